//! The blocking API from plain OS threads: a lock granted at once is answered on the calling
//! thread, a lock that has to wait parks the thread until the agent answers, and a blocking call
//! made inside an async runtime panics instead of stalling it.
//!
//! Every wait is bounded ([`BOUND`]): a channel receive with a timeout, or a poll of the node's
//! table through `locks_testing::wait`.

use locks_agent::{Error, Options, begin_transaction_blocking};
use locks_core::proto::EntryState;
use locks_core::{LockId, Mode, lock_id};
use locks_server::{Node, NodeConfig};
use locks_testing::wait::{poll, within};
use std::sync::mpsc;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(20);

/// A node started on a runtime of the test's own (the node runs on its own thread; the
/// runtime only drives the test's reads of its table).
fn node(name: &str) -> (tokio::runtime::Runtime, Node) {
    let rt = locks_testing::wait::runtime();
    let node = rt
        .block_on(within(
            BOUND,
            "node start",
            Node::start(NodeConfig::new(name)),
        ))
        .expect("node starts");
    (rt, node)
}

/// Waits until the node's table shows `agent`'s entry on `lock` in a state `done` accepts.
fn wait_table(
    rt: &tokio::runtime::Runtime,
    node: &Node,
    what: &str,
    done: impl Fn(EntryState) -> bool,
    agent: &locks_core::AgentId,
    lock: &LockId,
) {
    rt.block_on(poll(BOUND, what, Duration::from_millis(2), || async {
        let snap = node.snapshot().await.expect("snapshot");
        let state = snap.state(agent, lock);
        if done(state) { Ok(()) } else { Err(state) }
    }));
}

/// A thread that has to wait blocks in `blocking_lock` (through its agent) until the holder,
/// on another plain thread, ends; it then holds the lock with a newer fencing version.
#[test]
fn a_blocked_thread_gets_the_lock_when_the_holder_ends() {
    let (rt, node) = node("blocking-wait");
    let row = lock_id!["row", 1];
    let holder = begin_transaction_blocking(&node, Options::default()).unwrap();
    let held = holder.blocking_lock(row.clone(), Mode::WRITE).unwrap();
    let first = held.version_on(node.id()).expect("a version on this node");

    let (id_tx, id_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let (waiter_node, waiter_row) = (node.clone(), row.clone());
    let waiter = std::thread::spawn(move || {
        let txn = begin_transaction_blocking(&waiter_node, Options::default()).unwrap();
        id_tx.send(txn.id().clone()).unwrap();
        let got = txn.blocking_lock(waiter_row, Mode::WRITE);
        done_tx.send(got).unwrap();
        txn.blocking_end()
    });
    let waiter_id = id_rx.recv_timeout(BOUND).expect("the waiter began");
    wait_table(
        &rt,
        &node,
        "the waiter queued",
        EntryState::is_waiting,
        &waiter_id,
        &row,
    );
    assert!(
        done_rx.try_recv().is_err(),
        "the waiter returned while the holder held the lock"
    );

    holder.blocking_end().unwrap();
    let got = done_rx
        .recv_timeout(BOUND)
        .expect("the waiter was answered")
        .expect("the waiter got the lock");
    assert_eq!(got.granted.mode, Mode::WRITE);
    let second = got.version_on(node.id()).expect("a version on this node");
    assert!(second > first, "version {second} after {first}");
    waiter.join().unwrap().unwrap();
    let no_entry = |state| state == EntryState::Absent;
    wait_table(
        &rt,
        &node,
        "the waiter released",
        no_entry,
        &waiter_id,
        &row,
    );
}

/// `blocking_unlock` releases at once: another thread's transaction is then granted the lock
/// at its call, and the first transaction no longer has it.
#[test]
fn blocking_unlock_releases_for_the_next_thread() {
    let (rt, node) = node("blocking-unlock");
    let row = lock_id!["row", 2];
    let first = begin_transaction_blocking(&node, Options::default()).unwrap();
    first.blocking_lock(row.clone(), Mode::WRITE).unwrap();
    first.blocking_unlock(row.clone()).unwrap();
    wait_table(
        &rt,
        &node,
        "the unlock released",
        |state| state == EntryState::Absent,
        first.id(),
        &row,
    );
    let (next_node, next_row) = (node.clone(), row.clone());
    let next = std::thread::spawn(move || {
        let txn = begin_transaction_blocking(&next_node, Options::default()).unwrap();
        let got = txn.blocking_lock(next_row, Mode::WRITE);
        txn.blocking_end().map(|()| got)
    });
    let got = next.join().unwrap().unwrap().unwrap();
    assert_eq!(got.granted.mode, Mode::WRITE);
    // Unlocking what it no longer holds is refused, by name.
    match first.blocking_unlock(row.clone()) {
        Err(Error::Request(locks_agent::RequestError::NoSuchRequest(lock))) => {
            assert_eq!(lock, row)
        }
        other => panic!("unlock of a released lock: {other:?}"),
    }
    first.blocking_end().unwrap();
}

/// A blocking call made on a thread that runs an async runtime panics with what to use
/// instead, for every call that is answered without an executor too.
#[test]
fn blocking_calls_inside_a_runtime_panic() {
    let (rt, node) = node("blocking-in-rt");
    let message = |panic: Box<dyn std::any::Any + Send>| {
        panic.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let begin = rt.block_on(async {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            begin_transaction_blocking(&node, Options::default())
        }))
    });
    assert!(
        message(begin.unwrap_err()).contains("begin_transaction_blocking called from within"),
        "begin"
    );
    let txn = begin_transaction_blocking(&node, Options::default()).unwrap();
    let lock = rt.block_on(async {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            txn.blocking_lock(lock_id!["a"], Mode::WRITE)
        }))
    });
    assert!(
        message(lock.unwrap_err()).contains("Transaction::blocking_lock called from within"),
        "lock"
    );
    txn.blocking_end().unwrap();
}
