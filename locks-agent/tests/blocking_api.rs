//! The blocking API from plain OS threads: a lock granted at once is answered on the calling
//! thread, a lock that has to wait parks the thread until the agent answers, bounded waits give
//! up, the calls work inside `spawn_blocking` and fail (without a panic) on the node's own
//! thread, and a program with no async runtime starts two nodes, locks across them and stops.
//!
//! Every wait is bounded ([`BOUND`]): a channel receive with a timeout, or a poll of the node's
//! table through `locks_testing::wait`.

use locks_agent::{Error, Options, Req, begin_transaction_blocking};
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

/// Inside `spawn_blocking` every blocking call works, bounded waits included.
#[test]
fn blocking_calls_work_inside_spawn_blocking() {
    let (rt, node) = node("blocking-in-rt");
    let holder = begin_transaction_blocking(&node, Options::default()).unwrap();
    holder.blocking_lock(lock_id!["a"], Mode::WRITE).unwrap();
    let inside = node.clone();
    let outcome = rt.block_on(async move {
        let task = tokio::task::spawn_blocking(move || {
            let txn = begin_transaction_blocking(&inside, Options::default()).unwrap();
            txn.blocking_lock(lock_id!["b"], Mode::WRITE).unwrap();
            let waited =
                txn.blocking_lock_timeout(lock_id!["a"], Mode::WRITE, Duration::from_millis(20));
            let status = txn.blocking_status().unwrap();
            // The queries, in blocking form.
            assert!(matches!(
                txn.blocking_lock_state(lock_id!["b"]).unwrap(),
                locks_agent::LockState::Held(_)
            ));
            assert_eq!(
                txn.blocking_lock_state(lock_id!["a"]).unwrap(),
                locks_agent::LockState::NotRequested
            );
            assert!(!txn.blocking_options().unwrap().abort_on_deadlock);
            assert!(txn.blocking_watchers(lock_id!["b"]).unwrap().is_empty());
            assert!(txn.blocking_wait_for_graph().unwrap().contains("digraph"));
            txn.blocking_end().unwrap();
            (waited, status)
        });
        within(BOUND, "the blocking task", task).await
    });
    let (waited, status) = outcome.expect("no panic");
    assert!(matches!(waited, Err(Error::TimedOut { .. })), "{waited:?}");
    assert!(
        status.have_all_locks(),
        "only [b] is asked for now: {status:?}"
    );
    holder.blocking_end().unwrap();
}

/// On the node's own thread a blocking call that would wait is an error, not a hang or a
/// panic: that thread must compute the answer. Its request is withdrawn.
#[test]
fn a_blocking_wait_on_the_node_thread_is_an_error() {
    let (rt, node) = node("blocking-on-node");
    let holder = begin_transaction_blocking(&node, Options::default()).unwrap();
    holder.blocking_lock(lock_id!["a"], Mode::WRITE).unwrap();
    let inside = node.clone();
    let (id, result) = rt
        .block_on(within(
            BOUND,
            "the node's task",
            node.spawn(async move {
                let txn = begin_transaction_blocking(&inside, Options::default()).unwrap();
                let result = txn.blocking_lock(lock_id!["a"], Mode::WRITE);
                (txn.id().clone(), result)
            }),
        ))
        .expect("the node runs it");
    match result {
        Err(Error::Node(e)) => assert!(
            matches!(*e, locks_server::Error::OnNodeThread { .. }),
            "{e}"
        ),
        other => panic!("refused on the node's thread: {other:?}"),
    }
    holder.blocking_end().unwrap();
    wait_table(
        &rt,
        &node,
        "nothing left of the refused call",
        |s| s == EntryState::Absent,
        &id,
        &lock_id!["a"],
    );
}

/// A program on plain threads, with no async runtime of its own: two nodes on loopback start,
/// wait for each other, a lock is taken on both with a bounded wait (which gives up while
/// another thread holds it, then succeeds), and the nodes stop.
#[test]
fn a_program_on_plain_threads_locks_across_two_nodes() {
    let loopback: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let config = |name: &str| {
        NodeConfig::new(name)
            .listen(loopback)
            .cookie("plain-threads")
    };
    let a = Node::start_blocking(config("pa")).unwrap();
    let b = Node::start_blocking(config("pb").peer(a.local_addr().unwrap())).unwrap();
    let both = [a.id().clone(), b.id().clone()];
    a.wait_for_nodes_blocking(&both, BOUND).unwrap();
    b.wait_for_nodes_blocking(&both, BOUND).unwrap();
    let nobody = locks_core::NodeId::new("nobody").unwrap();
    match a.wait_for_nodes_blocking(std::slice::from_ref(&nobody), Duration::from_millis(20)) {
        Err(locks_server::Error::NodesNotUp { missing }) => assert_eq!(missing, [nobody]),
        other => panic!("nobody never connects: {other:?}"),
    }
    let job = lock_id!["jobs", 1];
    let holder = begin_transaction_blocking(&b, Options::default()).unwrap();
    holder
        .blocking_lock_on_timeout(job.clone(), Mode::WRITE, &both, Req::All, BOUND)
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let (worker_node, worker_job, worker_both) = (a.clone(), job.clone(), both.clone());
    let worker = std::thread::spawn(move || {
        let txn = begin_transaction_blocking(&worker_node, Options::default()).unwrap();
        let short = Duration::from_millis(30);
        let first = txn.blocking_lock_on_timeout(
            worker_job.clone(),
            Mode::WRITE,
            &worker_both,
            Req::All,
            short,
        );
        tx.send(()).unwrap();
        let second =
            txn.blocking_lock_on_timeout(worker_job, Mode::WRITE, &worker_both, Req::All, BOUND);
        txn.blocking_end().unwrap();
        (first, second)
    });
    rx.recv_timeout(BOUND).expect("the first wait gives up");
    holder.blocking_end().unwrap();
    let (first, second) = worker.join().expect("no panic");
    assert!(matches!(first, Err(Error::TimedOut { .. })), "{first:?}");
    let second = second.unwrap();
    assert!(second.version_on(a.id()).is_some() && second.version_on(b.id()).is_some());
    b.shutdown_blocking().unwrap();
    a.shutdown_blocking().unwrap();
    assert!(!a.is_running() && !b.is_running());
}

/// The bounded blocking waits that ask for nothing: `blocking_await_all_locks_timeout` gives up
/// while a holder keeps the lock (the request stays queued, and is granted once the holder
/// ends), and `blocking_lost_timeout` gives up while nothing is lost.
#[test]
fn bounded_blocking_waits_give_up_and_leave_the_requests_queued() {
    let (rt, node) = node("blocking-bounded");
    let row = lock_id!["row", 3];
    let holder = begin_transaction_blocking(&node, Options::default()).unwrap();
    holder.blocking_lock(row.clone(), Mode::WRITE).unwrap();
    let waiter = begin_transaction_blocking(&node, Options::default()).unwrap();
    waiter
        .blocking_lock_nowait(row.clone(), Mode::WRITE)
        .unwrap();
    let short = Duration::from_millis(50);
    assert!(
        waiter
            .blocking_await_all_locks_timeout(short)
            .unwrap()
            .is_none(),
        "the holder still holds it"
    );
    assert!(holder.blocking_lost_timeout(short).unwrap().is_none());
    wait_table(
        &rt,
        &node,
        "the request stayed queued",
        EntryState::is_waiting,
        waiter.id(),
        &row,
    );
    holder.blocking_end().unwrap();
    let all = waiter
        .blocking_await_all_locks_timeout(BOUND)
        .unwrap()
        .expect("granted once the holder ended");
    assert_eq!(all.locks.len(), 1);
    waiter.blocking_end().unwrap();
}
