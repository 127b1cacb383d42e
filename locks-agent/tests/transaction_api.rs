//! The `Transaction` API end to end, beyond the Erlang scenarios: what dropping a handle or a
//! future does, unlock/cancel/convert, where client code may run, and cycles of every length
//! and id order through the real actors.

mod common;

use common::{Harness, bounded};
use locks_agent::{Error, Options, TransactionStatus, begin_transaction};
use locks_core::proto::EntryState;
use locks_core::{LockId, Mode, lock_id};
use locks_server::embed::NodeInternals;
use locks_server::{Node, NodeConfig};

#[tokio::test]
async fn dropping_the_handle_releases_its_locks() {
    let h = Harness::new("drop").await;
    let txn = begin_transaction(&h.node, Options::default())
        .await
        .unwrap();
    let id = txn.id().clone();
    bounded(txn.lock(lock_id!["a"], Mode::WRITE)).await.unwrap();
    drop(txn);
    h.wait_released(&id).await;
}

#[tokio::test]
async fn a_panicking_client_task_releases_its_locks() {
    let h = Harness::new("panic").await;
    let node = h.node.clone();
    let (id_tx, id_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let txn = begin_transaction(&node, Options::default()).await.unwrap();
        id_tx.send(txn.id().clone()).unwrap();
        txn.lock(lock_id!["a"], Mode::WRITE).await.unwrap();
        panic!("client bug while holding a lock");
    });
    let id = bounded(id_rx).await.unwrap();
    assert!(bounded(task).await.unwrap_err().is_panic());
    h.wait_released(&id).await;
    let other = h.client().await;
    assert!(other.lock(lock_id!["a"], Mode::WRITE).await.is_empty());
}

#[tokio::test]
async fn a_dropped_lock_future_withdraws_its_request() {
    let h = Harness::new("dropfut").await;
    let c1 = h.client().await;
    let c2 = h.client().await;
    c1.lock(lock_id!["a"], Mode::WRITE).await;
    // Never polled, dropped at once: the request made at the call is withdrawn.
    drop(c2.txn().lock(lock_id!["a"], Mode::WRITE));
    h.wait_released(&c2.id()).await;
    assert_eq!(
        bounded(c2.txn().status()).await.unwrap(),
        TransactionStatus::NoLocks
    );
    // A request made with `lock_nowait` stays without anybody waiting for it.
    bounded(c2.txn().lock_nowait(lock_id!["a"], Mode::WRITE))
        .await
        .unwrap();
    c1.kill();
    c2.await_all_locks().await;
    h.wait_granted(&c2.id(), &lock_id!["a"]).await;
}

#[tokio::test]
async fn end_right_after_a_request_still_releases_everything() {
    // `end` releases from the handle without waiting for the agent; a request the agent has
    // not handled yet may reach the server after that release, and must be released too.
    let h = Harness::new("endrace").await;
    for key in 0..50 {
        let lock = lock_id!["race", key];
        let txn = begin_transaction(&h.node, Options::default())
            .await
            .unwrap();
        let id = txn.id().clone();
        drop(txn.lock(lock.clone(), Mode::WRITE));
        txn.end().await.unwrap();
        assert!(!h.node.router().has_agent(&id), "gone when end returns");
        h.wait_released(&id).await;
        let next = begin_transaction(&h.node, Options::default())
            .await
            .unwrap();
        bounded(next.lock(lock, Mode::WRITE)).await.unwrap();
        next.end().await.unwrap();
    }
}

/// `end` releases the locks on the transaction's own node before it returns, also when the
/// transaction has an agent (it waited): the next holder does not wait for the agent's turn on
/// the node's thread.
#[tokio::test]
async fn end_releases_this_nodes_locks_before_it_returns_also_with_an_agent() {
    let h = Harness::new("endsync").await;
    for key in 0..20 {
        let lock = lock_id!["sync", key];
        let holder = begin_transaction(&h.node, Options::default())
            .await
            .unwrap();
        bounded(holder.lock(lock.clone(), Mode::WRITE))
            .await
            .unwrap();
        let txn = begin_transaction(&h.node, Options::default())
            .await
            .unwrap();
        // Queued behind the holder: the transaction starts its agent.
        let waiting = txn.lock(lock.clone(), Mode::READ);
        holder.end().await.unwrap();
        bounded(waiting).await.unwrap();
        let id = txn.id().clone();
        txn.end().await.unwrap();
        let table = h.node.local_table();
        assert!(
            !table.knows(&id, &locks_server::embed::Touched::all()),
            "the table still has the ended transaction {id} (key {key})"
        );
    }
}

#[tokio::test]
async fn unlock_releases_one_lock_and_keeps_the_others() {
    let h = Harness::new("unlock").await;
    let c1 = h.client().await;
    let mut c2 = h.client().await;
    let (a, b) = (lock_id!["a"], lock_id!["b"]);
    c1.lock(a.clone(), Mode::WRITE).await;
    c1.lock(b.clone(), Mode::WRITE).await;
    let bb = b.clone();
    let p2 = c2.call(move |t| async move { t.lock(bb, Mode::WRITE).await });
    h.wait_blocked(&c2.id(), &b).await;
    bounded(c1.txn().unlock(b.clone())).await.unwrap();
    assert!(p2.result().await.unwrap().deadlocks.is_empty());
    let snap = h.node.snapshot().await.unwrap();
    assert_eq!(snap.state(&c1.id(), &a), EntryState::Granted(Mode::WRITE));
    assert_eq!(snap.state(&c1.id(), &b), EntryState::Absent);
    // The transaction still reports all its (remaining) locks.
    assert!(matches!(
        bounded(c1.txn().status()).await.unwrap(),
        TransactionStatus::HaveAllLocks { .. }
    ));
}

#[tokio::test]
async fn unlock_cancels_a_pending_request() {
    let h = Harness::new("cancel").await;
    let c1 = h.client().await;
    let mut c2 = h.client().await;
    let a = lock_id!["a"];
    c1.lock(a.clone(), Mode::WRITE).await;
    let aa = a.clone();
    let p2 = c2.call(move |t| async move { t.lock(aa, Mode::WRITE).await });
    h.wait_blocked(&c2.id(), &a).await;
    bounded(c2.txn().unlock(a.clone())).await.unwrap();
    h.wait_released(&c2.id()).await;
    assert_eq!(
        bounded(c2.txn().status()).await.unwrap(),
        TransactionStatus::NoLocks
    );
    // The cancelled call is answered.
    assert!(matches!(p2.result().await, Err(Error::Cancelled { lock }) if lock == a));
    let snap = h.node.snapshot().await.unwrap();
    let view = snap.lock(&a).expect("held by 1").view();
    assert!(view.waiting.is_empty() && view.converting.is_empty());
}

#[tokio::test]
async fn convert_down_lets_readers_in() {
    let h = Harness::new("convert").await;
    let c1 = h.client().await;
    let mut c2 = h.client().await;
    let a = lock_id!["a"];
    c1.lock(a.clone(), Mode::WRITE).await;
    let aa = a.clone();
    let p2 = c2.call(move |t| async move { t.lock(aa, Mode::READ).await });
    h.wait_blocked(&c2.id(), &a).await;
    bounded(c1.txn().convert(a.clone(), Mode::READ))
        .await
        .unwrap();
    assert!(p2.result().await.unwrap().deadlocks.is_empty());
    let snap = h.node.snapshot().await.unwrap();
    assert_eq!(snap.state(&c1.id(), &a), EntryState::Granted(Mode::READ));
    assert_eq!(snap.state(&c2.id(), &a), EntryState::Granted(Mode::READ));
    // Converting up through `convert` is refused with an error, not a panic.
    assert!(
        bounded(c1.txn().convert(a.clone(), Mode::WRITE))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn convert_while_converting_up_is_done_on_the_server_too() {
    // A's entry on [a] converts S -> SIX for its write of [a, b] and waits behind B's S when A
    // converts [a] down to IS: the server must take the conversion then, or A keeps S on [a]
    // while its client believes it holds IS, and a writer of [a, c] waits as long as A lives.
    let h = Harness::new("convconv").await;
    let ca = h.client().await;
    let cb = h.client().await;
    let mut cc = h.client().await;
    let (a, ab, ac) = (lock_id!["a"], lock_id!["a", "b"], lock_id!["a", "c"]);
    ca.lock(a.clone(), Mode::S).await;
    cb.lock(a.clone(), Mode::S).await;
    ca.lock_nowait(ab.clone(), Mode::X).await;
    h.wait_blocked(&ca.id(), &a).await;
    bounded(ca.txn().convert(a.clone(), Mode::IS))
        .await
        .unwrap();
    bounded(ca.txn().unlock(ab.clone())).await.unwrap();
    let b = cb.id();
    cb.kill();
    h.wait_released(&b).await;
    let acc = ac.clone();
    let pc = cc.call(move |t| async move { t.lock(acc, Mode::X).await });
    assert!(
        pc.result().await.unwrap().deadlocks.is_empty(),
        "C gets [a, c]"
    );
    let snap = h.node.snapshot().await.unwrap();
    assert_eq!(snap.state(&ca.id(), &a), EntryState::Granted(Mode::IS));
    assert_eq!(snap.state(&cc.id(), &a), EntryState::Granted(Mode::IX));
    assert!(matches!(
        bounded(ca.txn().status()).await.unwrap(),
        TransactionStatus::HaveAllLocks { .. }
    ));
}

#[tokio::test]
async fn a_covered_repeat_is_answered_at_once() {
    let h = Harness::new("repeat").await;
    let c1 = h.client().await;
    c1.lock(lock_id!["a"], Mode::WRITE).await;
    // The Erlang original's `lock/2` on a held lock hangs; ours answers.
    assert!(c1.lock(lock_id!["a"], Mode::READ).await.is_empty());
    assert!(c1.lock(lock_id!["a"], Mode::WRITE).await.is_empty());
}

#[tokio::test]
async fn calls_on_an_ended_transaction_fail_cleanly() {
    let h = Harness::new("ended").await;
    let txn = begin_transaction(&h.node, Options::default())
        .await
        .unwrap();
    let node = h.node.clone();
    node.shutdown().await;
    assert!(matches!(
        bounded(txn.lock(lock_id!["a"], Mode::WRITE)).await,
        Err(Error::Ended)
    ));
    assert!(begin_transaction(&node, Options::default()).await.is_err());
}

async fn take_and_release(node: &Node, key: i64) -> Result<(), Error> {
    let txn = begin_transaction(node, Options::default()).await?;
    txn.lock(lock_id!["spawned", key], Mode::WRITE).await?;
    txn.lock(lock_id!["spawned"], Mode::READ).await?;
    txn.end().await
}

#[tokio::test]
async fn clients_on_the_node_runtime_and_on_a_foreign_runtime() {
    let node = Node::start(NodeConfig::new("where")).await.unwrap();
    // On the node's own thread.
    let on_node = node.clone();
    bounded(node.spawn(async move { take_and_release(&on_node, 1).await }))
        .await
        .unwrap()
        .unwrap();
    // From a plain thread with a runtime of its own.
    let foreign = node.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move { bounded(take_and_release(&foreign, 2)).await })
    });
    tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(node.snapshot().await.unwrap().locks.is_empty());
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 1 {
        return vec![vec![0]];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, n - 1);
            out.push(q);
        }
    }
    out
}

/// Agent `order[i]` (agents are created in index order, so ids grow with the index) holds
/// `held[i]` and asks for `asked[i]`, which conflicts with what the next one holds: one cycle
/// through all of them. Each client ends as soon as its call completes, which lets the next
/// one through; every call must complete and report the deadlock.
async fn cycle_resolves(
    h: &Harness,
    order: &[usize],
    held: &[LockId],
    asked: &[LockId],
    mode: Mode,
) {
    let k = order.len();
    let mut clients = Vec::new();
    for _ in 0..k {
        clients.push(Some(h.client().await));
    }
    for (i, &who) in order.iter().enumerate() {
        let c = clients[who].as_ref().expect("alive");
        c.lock(held[i].clone(), Mode::WRITE).await;
    }
    let mut pending = Vec::new();
    for (i, &who) in order.iter().enumerate() {
        let next = asked[i].clone();
        let c = clients[who].as_mut().expect("alive");
        pending.push(Some((
            who,
            c.call(move |t| async move { t.lock(next, mode).await }),
        )));
    }
    let deadline = tokio::time::Instant::now() + common::BOUND;
    while pending.iter().any(Option::is_some) {
        let finished = pending
            .iter()
            .position(|p| p.as_ref().is_some_and(|(_, p)| p.is_finished()));
        match finished {
            Some(i) => {
                let (who, p) = pending[i].take().expect("present");
                let deadlocks = p.result().await.unwrap().deadlocks;
                assert!(
                    !deadlocks.is_empty(),
                    "order {order:?}: every member of the cycle is told"
                );
                clients[who].take().expect("alive").kill();
            }
            None => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "order {order:?}: cycle not resolved"
                );
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        }
    }
}

#[tokio::test]
async fn cycles_of_length_2_to_4_in_every_id_order_resolve_end_to_end() {
    for k in 2..=4usize {
        for (n, order) in permutations(k).into_iter().enumerate() {
            let flat: Vec<LockId> = (0..k).map(|i| lock_id!["flat", i as i64]).collect();
            let next: Vec<LockId> = (0..k).map(|i| flat[(i + 1) % k].clone()).collect();
            let h = Harness::new(&format!("cycle{k}x{n}")).await;
            cycle_resolves(&h, &order, &flat, &next, Mode::WRITE).await;
            // Through parent/child locks: each holds a parent and reads a child of the next
            // one's, so the conflict is between an intention mode and a write.
            let parents: Vec<LockId> = (0..k).map(|i| lock_id!["tree", i as i64]).collect();
            let children: Vec<LockId> = (0..k).map(|i| parents[(i + 1) % k].child("row")).collect();
            let h = Harness::new(&format!("tree{k}x{n}")).await;
            cycle_resolves(&h, &order, &parents, &children, Mode::READ).await;
        }
    }
}

#[tokio::test]
async fn lock_objects_sent_in_several_slices_are_all_held() {
    // More than two slices of requests, ending in a partial one.
    let h = Harness::new("objects").await;
    let txn = begin_transaction(&h.node, Options::default())
        .await
        .unwrap();
    let n: i64 = 2_500;
    bounded(txn.lock_objects((0..n).map(|i| (lock_id!["objects", i], Mode::WRITE))))
        .await
        .unwrap();
    let result = bounded(txn.await_all_locks()).await.unwrap();
    assert_eq!(result.locks.len(), n as usize);
    assert!(result.deadlocks.is_empty());
    for (i, granted) in (0..n).zip(&result.locks) {
        assert_eq!(granted.lock, lock_id!["objects", i]);
        assert_eq!(granted.mode, Mode::WRITE);
        assert_eq!(granted.nodes.len(), 1);
        assert_eq!(granted.nodes[0].0, *h.node.id());
    }
    // Another transaction finds the last of them (from the last, partial slice) taken.
    let other = begin_transaction(&h.node, Options::default())
        .await
        .unwrap();
    bounded(other.lock_nowait(lock_id!["objects", n - 1], Mode::WRITE))
        .await
        .unwrap();
    assert_eq!(
        bounded(other.status()).await.unwrap(),
        TransactionStatus::Waiting
    );
    txn.end().await.unwrap();
    bounded(other.await_all_locks()).await.unwrap();
}

/// A client on the node's own thread that runs transactions granted at once, in a loop, still
/// lets the thread's other tasks run (the fast path takes from the task's budget): found when
/// the W4 bench's parent reader never got a turn among eight such writers.
#[tokio::test]
async fn a_loop_of_fast_transactions_on_the_node_thread_lets_other_tasks_run() {
    let h = Harness::new("coop").await;
    let node = h.node.clone();
    let other_ran = bounded(h.node.spawn(async move {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let set = flag.clone();
        actix::spawn(async move { set.store(true, std::sync::atomic::Ordering::SeqCst) });
        for i in 0..10_000i64 {
            let txn = begin_transaction(&node, Options::default()).await.unwrap();
            txn.lock(lock_id!["coop", i], Mode::WRITE).await.unwrap();
            txn.end().await.unwrap();
            if flag.load(std::sync::atomic::Ordering::SeqCst) {
                return true;
            }
        }
        false
    }))
    .await
    .unwrap();
    assert!(
        other_ran,
        "10,000 transactions without a turn for another task"
    );
}

/// Two clients on the node's thread taking the same lock in a loop of one-lock transactions
/// never find it held: neither yields between taking its lock and releasing it (the budget's
/// turn is given at `end`), so every `lock` is granted at its call, on the fast path. A client
/// whose budget ran out right after a grant would yield holding the lock, and the other would
/// queue behind it.
#[tokio::test]
async fn clients_of_one_lock_on_one_thread_never_yield_while_holding_it() {
    use futures::FutureExt;
    let h = Harness::new("holdyield").await;
    let client = |node: locks_server::Node| async move {
        let mut not_at_once = 0;
        for _ in 0..1_000 {
            let txn = begin_transaction(&node, Options::default()).await.unwrap();
            match txn.lock(lock_id!["hot"], Mode::WRITE).now_or_never() {
                Some(granted) => {
                    granted.unwrap();
                }
                None => {
                    not_at_once += 1;
                    bounded(txn.await_all_locks()).await.unwrap();
                }
            }
            txn.end().await.unwrap();
        }
        not_at_once
    };
    let (a, b) = (client(h.node.clone()), client(h.node.clone()));
    let a = h.node.spawn(a);
    let b = h.node.spawn(b);
    let (a, b) = (bounded(a).await.unwrap(), bounded(b).await.unwrap());
    assert_eq!((a, b), (0, 0), "locks not granted at their call");
}

/// Bad input gets a clear error on the fast path too: a mode outside the node's mode table is
/// refused before the table is touched, and the transaction stays usable.
#[tokio::test]
async fn a_mode_outside_the_nodes_table_is_refused_on_the_fast_path() {
    let config =
        NodeConfig::new("smallmodes").mode_table(locks_core::ModeTable::shared_exclusive());
    let node = Node::start(config).await.unwrap();
    let txn = begin_transaction(&node, Options::default()).await.unwrap();
    let err = bounded(txn.lock(lock_id!["a"], Mode::U)).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Request(locks_agent::RequestError::ModeNotInTable(Mode::U))
        ),
        "{err:?}"
    );
    assert_eq!(
        bounded(txn.status()).await.unwrap(),
        TransactionStatus::NoLocks
    );
    bounded(txn.lock(lock_id!["a"], Mode::X)).await.unwrap();
    txn.end().await.unwrap();
}
