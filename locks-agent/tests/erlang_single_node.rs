//! The single-node scenarios of the Erlang test suite (tests 1-14), through the public API, with the same expectations. Where the original's outcome may
//! vary with message order, our sequential `lock_nowait` (which returns once the agent has
//! passed the request on) fixes the order, and the test asserts the outcome that order gives.

mod common;

use common::{Harness, bounded};
use locks_agent::{Error, Options, TransactionStatus};
use locks_core::{LockId, Mode, lock_id};
use locks_server::embed::NodeInternals;

fn l(name: &str) -> LockId {
    lock_id![name]
}

#[tokio::test]
async fn erlang_simple_lock() {
    let h = Harness::new("t1b").await;
    let txn = locks_agent::begin_transaction(&h.node, Options::default())
        .await
        .unwrap();
    let id = txn.id().clone();
    assert!(
        bounded(txn.lock(l("a"), Mode::WRITE))
            .await
            .unwrap()
            .deadlocks
            .is_empty()
    );
    bounded(txn.end()).await.unwrap();
    // After `end` returns the agent is gone; the release at the server follows.
    assert!(
        !h.node.router().has_agent(&id),
        "the agent is no longer alive"
    );
    h.wait_released(&id).await;
}

#[tokio::test]
async fn erlang_one_lock_two_clients() {
    let h = Harness::new("t2").await;
    let c1 = h.client().await;
    let mut c2 = h.client().await;
    assert!(c1.lock(l("a"), Mode::WRITE).await.is_empty());
    let p2 = c2.call(|t| async move { t.lock(l("a"), Mode::WRITE).await });
    h.wait_blocked(&c2.id(), &l("a")).await;
    assert!(!p2.is_finished(), "2 is still blocked");
    c1.kill();
    assert!(p2.result().await.unwrap().deadlocks.is_empty());
}

#[tokio::test]
async fn erlang_one_lock_wrr_clients() {
    let h = Harness::new("t3").await;
    let c1 = h.client().await;
    let c2 = h.client().await;
    let c3 = h.client().await;
    assert!(c1.lock(l("a"), Mode::WRITE).await.is_empty());
    c2.lock_nowait(l("a"), Mode::READ).await;
    c3.lock_nowait(l("a"), Mode::READ).await;
    c1.kill();
    assert!(c2.await_all_locks().await.deadlocks.is_empty());
    assert!(c3.await_all_locks().await.deadlocks.is_empty());
}

#[tokio::test]
async fn erlang_three_locks_three_clients() {
    let h = Harness::new("t4").await;
    let (l1, l2, l3) = (l("l1"), l("l2"), l("l3"));
    let c1 = h.client().await;
    let c2 = h.client().await;
    let c3 = h.client().await;
    assert!(c1.lock(l1.clone(), Mode::WRITE).await.is_empty());
    assert!(c1.lock(l2.clone(), Mode::WRITE).await.is_empty());
    for (c, lock) in [
        (&c2, &l2),
        (&c1, &l3),
        (&c3, &l3),
        (&c2, &l3),
        (&c3, &l1),
        (&c2, &l1),
    ] {
        c.lock_nowait(lock.clone(), Mode::WRITE).await;
    }
    // Client 1's request for l3 reached the server first: it has everything, 2 waits.
    assert!(matches!(
        bounded(c1.txn().await_all_locks()).await,
        Ok(r) if r.deadlocks.is_empty()
    ));
    h.wait_blocked(&c2.id(), &l1).await;
    assert_eq!(
        bounded(c2.txn().status()).await.unwrap(),
        TransactionStatus::Waiting
    );
    c1.kill();
    c2.kill();
    assert!(c3.await_all_locks().await.deadlocks.is_empty());
    assert!(c3.lock(l2.clone(), Mode::WRITE).await.is_empty());
    assert!(c3.await_all_locks().await.deadlocks.is_empty());
}

#[tokio::test]
async fn erlang_lock_merge() {
    let h = Harness::new("t5").await;
    let c1 = h.client().await;
    let base = l("m");
    assert!(c1.lock(base.child(1), Mode::READ).await.is_empty());
    assert!(c1.lock(base.child(2), Mode::WRITE).await.is_empty());
    assert!(c1.lock(base.clone(), Mode::WRITE).await.is_empty());
}

#[tokio::test]
async fn erlang_lock_upgrade1() {
    let h = Harness::new("t6").await;
    let c1 = h.client().await;
    let mut c2 = h.client().await;
    let base = l("u");
    assert!(c1.lock(base.clone(), Mode::READ).await.is_empty());
    assert!(c1.lock(base.clone(), Mode::WRITE).await.is_empty());
    let child = base.child(1);
    let p2 = c2.call(move |t| async move { t.lock(child, Mode::READ).await });
    h.wait_blocked(&c2.id(), &base).await;
    assert!(!p2.is_finished());
    c1.kill();
    assert!(p2.result().await.unwrap().deadlocks.is_empty());
}

#[tokio::test]
async fn erlang_lock_upgrade2() {
    let h = Harness::new("t7").await;
    let mut c1 = h.client().await;
    let c2 = h.client().await;
    let base = l("u");
    assert!(c1.lock(base.clone(), Mode::READ).await.is_empty());
    assert!(c2.lock(base.child(1), Mode::READ).await.is_empty());
    let b = base.clone();
    let p1 = c1.call(move |t| async move { t.lock(b, Mode::WRITE).await });
    // Blocked by another agent's read of a child: not a self-deadlock.
    h.wait_blocked(&c1.id(), &base).await;
    assert!(!p1.is_finished());
    c2.kill();
    assert!(p1.result().await.unwrap().deadlocks.is_empty());
}

#[tokio::test]
async fn erlang_lock_upgrade3() {
    let h = Harness::new("t8").await;
    let mut c1 = h.client().await;
    let mut c2 = h.client().await;
    let base = l("u");
    assert!(c1.lock(base.clone(), Mode::READ).await.is_empty());
    assert!(c2.lock(base.clone(), Mode::READ).await.is_empty());
    c1.lock_nowait(base.clone(), Mode::WRITE).await;
    c2.lock_nowait(base.clone(), Mode::WRITE).await;
    // Both readers converting to write is StickyLocking's conversion deadlock: exactly one upgrade
    // wins (the smaller agent; the larger surrenders and queues behind it).
    let a1 = c1.call(|t| async move { t.await_all_locks().await });
    let a2 = c2.call(|t| async move { t.await_all_locks().await });
    let r1 = a1.result().await.unwrap();
    assert!(!r1.deadlocks.is_empty(), "client 1 saw the deadlock");
    h.wait_blocked(&c2.id(), &base).await;
    assert!(!a2.is_finished(), "exactly one upgrade wins");
    c1.kill();
    assert!(!a2.result().await.unwrap().deadlocks.is_empty());
}

#[tokio::test]
async fn erlang_two_w_locks_parent_read() {
    let h = Harness::new("t9").await;
    let l0 = l("p");
    let mut c1 = h.client().await;
    let c2 = h.client().await;
    assert!(c1.lock(l0.child(1), Mode::WRITE).await.is_empty());
    assert!(c2.lock(l0.child(2), Mode::WRITE).await.is_empty());
    let p = l0.clone();
    let p1 = c1.call(move |t| async move { t.lock(p, Mode::READ).await });
    h.wait_blocked(&c1.id(), &l0).await;
    assert!(
        !p1.is_finished(),
        "a read on a parent conflicts with a write on any child"
    );
    c2.kill();
    assert!(p1.result().await.unwrap().deadlocks.is_empty());
}

#[tokio::test]
async fn erlang_two_w_locks_parent_read_deadlock() {
    let h = Harness::new("t10").await;
    let l0 = l("p");
    let mut c1 = h.client().await;
    let mut c2 = h.client().await;
    assert!(c1.lock(l0.child(1), Mode::WRITE).await.is_empty());
    assert!(c2.lock(l0.child(2), Mode::WRITE).await.is_empty());
    let p = l0.clone();
    let p1 = c1.call(move |t| async move { t.lock(p, Mode::READ).await });
    h.wait_blocked(&c1.id(), &l0).await;
    let p = l0.clone();
    let p2 = c2.call(move |t| async move { t.lock(p, Mode::READ).await });
    assert!(!p1.result().await.unwrap().deadlocks.is_empty());
    c1.kill();
    assert!(!p2.result().await.unwrap().deadlocks.is_empty());
}

#[tokio::test]
async fn erlang_two_clients_direct_deadlock() {
    let h = Harness::new("t11").await;
    let (a, b) = (l("a"), l("b"));
    let mut c1 = h.client().await;
    let mut c2 = h.client().await;
    assert!(c1.lock(a.clone(), Mode::WRITE).await.is_empty());
    assert!(c2.lock(b.clone(), Mode::WRITE).await.is_empty());
    let b2 = b.clone();
    let p1 = c1.call(move |t| async move { t.lock(b2, Mode::WRITE).await });
    let a2 = a.clone();
    let p2 = c2.call(move |t| async move { t.lock(a2, Mode::WRITE).await });
    // Agent 2 (the larger) surrenders b, where 1 waits for it; both report that one lock.
    assert_eq!(p1.result().await.unwrap().deadlock_locks(), vec![b.clone()]);
    c1.kill();
    assert_eq!(p2.result().await.unwrap().deadlock_locks(), vec![b]);
}

#[tokio::test]
async fn erlang_three_clients_deadlock() {
    let h = Harness::new("t12").await;
    let (a, b, c) = (l("a"), l("b"), l("c"));
    let mut c1 = h.client().await;
    let mut c2 = h.client().await;
    let mut c3 = h.client().await;
    for (cl, lock) in [(&c1, &a), (&c2, &b), (&c3, &c)] {
        assert!(cl.lock(lock.clone(), Mode::WRITE).await.is_empty());
    }
    let cc = c.clone();
    let p1 = c1.call(move |t| async move { t.lock(cc, Mode::WRITE).await });
    let aa = a.clone();
    let p2 = c2.call(move |t| async move { t.lock(aa, Mode::WRITE).await });
    let bb = b.clone();
    let p3 = c3.call(move |t| async move { t.lock(bb, Mode::WRITE).await });
    assert!(!p1.result().await.unwrap().deadlocks.is_empty());
    c1.kill();
    // 2 was not in the surrendered lock's queue but was told.
    assert!(!p2.result().await.unwrap().deadlocks.is_empty());
    c2.kill();
    assert!(!p3.result().await.unwrap().deadlocks.is_empty());
}

#[tokio::test]
async fn erlang_two_clients_hierarchical_deadlock() {
    let h = Harness::new("t13").await;
    let (a, b) = (l("a"), l("b"));
    let mut c1 = h.client().await;
    let mut c2 = h.client().await;
    assert!(c1.lock(a.clone(), Mode::WRITE).await.is_empty());
    assert!(c2.lock(b.clone(), Mode::WRITE).await.is_empty());
    let b1 = b.child(1);
    let p1 = c1.call(move |t| async move { t.lock(b1, Mode::WRITE).await });
    let a1 = a.child(1);
    let p2 = c2.call(move |t| async move { t.lock(a1, Mode::WRITE).await });
    assert!(!p1.result().await.unwrap().deadlocks.is_empty());
    c1.kill();
    assert!(!p2.result().await.unwrap().deadlocks.is_empty());
}

#[tokio::test]
async fn erlang_two_clients_abort_on_deadlock() {
    let h = Harness::new("t14").await;
    let (a, b) = (l("a"), l("b"));
    let mut c1 = h.client().await;
    let c2 = h
        .client_with(Options {
            abort_on_deadlock: true,
            ..Options::default()
        })
        .await;
    assert!(c1.lock(a.clone(), Mode::WRITE).await.is_empty());
    assert!(c2.lock(b.clone(), Mode::WRITE).await.is_empty());
    let bb = b.clone();
    let p1 = c1.call(move |t| async move { t.lock(bb, Mode::WRITE).await });
    h.wait_blocked(&c1.id(), &b).await;
    // Agent 2 is the victim and was already told it holds b: it aborts.
    match bounded(c2.txn().lock(a.clone(), Mode::WRITE)).await {
        Err(Error::Deadlock { lock, .. }) => assert_eq!(lock, b),
        other => panic!("expected a deadlock abort, got {other:?}"),
    }
    p1.result().await.unwrap();
    // Later calls on the aborted transaction say why it ended.
    assert!(matches!(
        bounded(c2.txn().status()).await,
        Err(Error::Deadlock { .. })
    ));
}
