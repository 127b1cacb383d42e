//! The parts of the Erlang original's API beyond lock and await, through the public API: the
//! `majority_alive` requirement, `change_flag` (`Transaction::set_options`), beginning a
//! transaction with a list of objects, and surrendering a lock to a waiter (watching locks is
//! in `erlang_watch.rs`).
//!
//! One node, or in-process nodes connected over TCP on 127.0.0.1 (ephemeral ports). Blocking
//! is checked on the lock servers' tables or on watch views, never with timing; every wait is
//! bounded.

mod common;

use common::{BOUND, Harness, bounded, shut_down, two_nodes};
use locks_agent::{
    Error, Options, Req, RequestError, SurrenderRefusal, TransactionStatus, begin_transaction_with,
};
use locks_core::{LockId, Mode, NodeId, lock_id};

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

/// Polls the status until it is no longer `from` (each poll is a round trip to the agent).
async fn status_after(
    txn: &locks_agent::Transaction,
    from: &TransactionStatus,
) -> TransactionStatus {
    bounded(async {
        loop {
            let status = txn.status().await.unwrap();
            if &status != from {
                return status;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
}

// ---- majority_alive ----

#[tokio::test]
async fn majority_alive_survives_a_node_going_down_where_majority_does_not() {
    let (a, b) = two_nodes().await;
    let both = [n("a"), n("b")];
    let alive = a.client().await;
    let plain = a.client().await;
    bounded(
        alive
            .txn()
            .lock_on(lock_id!["m"], Mode::WRITE, &both, Req::MajorityAlive),
    )
    .await
    .unwrap();
    bounded(
        plain
            .txn()
            .lock_on(lock_id!["p"], Mode::WRITE, &both, Req::Majority),
    )
    .await
    .unwrap();
    b.wait_granted(&alive.id(), &lock_id!["m"]).await;
    shut_down(b, &a).await;
    // One of two listed nodes is left: no majority of the listed nodes, but a majority of
    // the live ones.
    let held = TransactionStatus::HaveAllLocks { deadlocks: vec![] };
    assert_eq!(
        status_after(plain.txn(), &held).await,
        TransactionStatus::CannotServe {
            locks: vec![lock_id!["p"]],
            nodes: vec![n("b")]
        }
    );
    assert_eq!(alive.txn().status().await.unwrap(), held);
    // A new majority_alive request naming the dead node is accepted and served by a alone;
    // a plain majority one fails at once, naming it.
    let other = a.client().await;
    bounded(
        other
            .txn()
            .lock_on(lock_id!["n"], Mode::WRITE, &both, Req::MajorityAlive),
    )
    .await
    .unwrap();
    let err = bounded(
        other
            .txn()
            .lock_on(lock_id!["q"], Mode::WRITE, &both, Req::Majority),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, Error::Request(RequestError::NodesDown { nodes, .. }) if nodes == &[n("b")]),
        "{err:?}"
    );
    // The lock held by a live majority still excludes others on the live node.
    let mut waiter = a.client().await;
    let pending = waiter.call(|t| async move {
        t.lock_on(
            lock_id!["m"],
            Mode::WRITE,
            &[n("a"), n("b")],
            Req::MajorityAlive,
        )
        .await
    });
    a.wait_blocked(&waiter.id(), &lock_id!["m"]).await;
    alive.kill();
    assert!(pending.result().await.is_ok());
}

// ---- change_flag ----

#[tokio::test]
async fn switching_await_nodes_off_fails_the_callers_waiting_for_a_dead_node() {
    let (a, b) = two_nodes().await;
    let both = [n("a"), n("b")];
    let mut client = a
        .client_with(Options {
            await_nodes: true,
            ..Options::default()
        })
        .await;
    shut_down(b, &a).await;
    let pending = client.call(|t| async move {
        t.lock_on(lock_id!["l"], Mode::WRITE, &[n("a"), n("b")], Req::All)
            .await
    });
    // Granted on a, it waits for b to come back.
    a.wait_granted(&client.id(), &lock_id!["l"]).await;
    assert_eq!(
        client.txn().status().await.unwrap(),
        TransactionStatus::Waiting
    );
    assert!(!pending.is_finished());
    bounded(client.txn().set_options(Options::default()))
        .await
        .unwrap();
    let cannot = TransactionStatus::CannotServe {
        locks: vec![lock_id!["l"]],
        nodes: vec![n("b")],
    };
    assert_eq!(client.txn().status().await.unwrap(), cannot);
    let err = pending.result().await.unwrap_err();
    assert!(
        matches!(&err, Error::CannotServe { nodes, .. } if nodes == &both[1..]),
        "{err:?}"
    );
    assert_eq!(
        bounded(client.txn().options()).await.unwrap(),
        Options::default()
    );
}

// ---- begin_transaction with objects ----

#[tokio::test]
async fn begin_transaction_with_objects_waits_for_all_of_them() {
    let h = Harness::new("objects").await;
    let holder = h.client().await;
    holder.lock(lock_id!["b"], Mode::WRITE).await;
    let node = h.node.clone();
    let started = tokio::spawn(async move {
        let objects = vec![
            (lock_id!["a"], Mode::WRITE),
            (lock_id!["b"], Mode::READ),
            (lock_id!["a", "x"], Mode::READ),
        ];
        begin_transaction_with(&node, objects, Options::default()).await
    });
    // It waits for b, held by the other transaction.
    let waiter = bounded(async {
        loop {
            let snap = h.node.snapshot().await.unwrap();
            if let Some(w) = snap.lock(&lock_id!["b"]).and_then(|b| b.waiting.first()) {
                return w.agent.clone();
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    h.wait_granted(&waiter, &lock_id!["a"]).await;
    assert!(!started.is_finished());
    holder.kill();
    let (txn, held) = tokio::time::timeout(BOUND, started)
        .await
        .expect("granted once b is free")
        .unwrap()
        .unwrap();
    let locks: Vec<(LockId, Mode)> = held
        .locks
        .iter()
        .map(|g| (g.lock.clone(), g.mode))
        .collect();
    assert_eq!(
        locks,
        vec![
            (lock_id!["a"], Mode::WRITE),
            (lock_id!["a", "x"], Mode::READ),
            (lock_id!["b"], Mode::READ),
        ]
    );
    h.wait_granted(txn.id(), &lock_id!["b"]).await;
    txn.end().await.unwrap();
    h.wait_released(&waiter).await;
}

#[tokio::test]
async fn begin_transaction_with_objects_that_cannot_be_had_fails_and_releases_the_rest() {
    let h = Harness::new("refused").await;
    // Deeper than the lock server accepts: refused at once by the node's table (the fast
    // path answers the caller directly), naming the lock, the node and why.
    let deep = LockId::new((0..100).map(|i| i.to_string())).unwrap();
    let objects = vec![(lock_id!["a"], Mode::WRITE), (deep.clone(), Mode::READ)];
    let err = bounded(begin_transaction_with(&h.node, objects, Options::default()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Request(locks_agent::RequestError::Refused {
            lock, reason: locks_core::proto::Rejection::LockIdTooLarge(_), ..
        }) if lock == &deep),
        "{err:?}"
    );
    // The lock it got is released: another transaction takes it.
    let other = h.client().await;
    other.lock(lock_id!["a"], Mode::WRITE).await;
}

#[tokio::test]
async fn begin_transaction_with_no_objects_returns_at_once() {
    let h = Harness::new("empty").await;
    let (txn, held) = bounded(begin_transaction_with(&h.node, [], Options::default()))
        .await
        .unwrap();
    assert!(held.locks.is_empty());
    assert_eq!(txn.status().await.unwrap(), TransactionStatus::NoLocks);
}

// ---- surrender_nowait ----

#[tokio::test]
async fn surrendering_to_a_waiter_lets_it_in_and_the_lock_comes_back() {
    let h = Harness::new("yield").await;
    let here = [h.node.id().clone()];
    let mut holder = h.client().await;
    holder.lock(lock_id!["a"], Mode::WRITE).await;
    holder.lock(lock_id!["a", "b"], Mode::WRITE).await;
    let mut waiter = h.client().await;
    let granted = waiter.call(|t| async move { t.lock(lock_id!["a"], Mode::READ).await });
    h.wait_blocked(&waiter.id(), &lock_id!["a"]).await;
    bounded(
        holder
            .txn()
            .surrender_nowait(lock_id!["a"], &waiter.id(), &here),
    )
    .await
    .unwrap();
    // The waiter holds a; the holder's entries on a and a/b wait behind it.
    assert!(
        granted.result().await.unwrap().deadlocks.is_empty(),
        "no deadlock"
    );
    h.wait_blocked(&holder.id(), &lock_id!["a"]).await;
    assert_eq!(
        holder.txn().status().await.unwrap(),
        TransactionStatus::Waiting
    );
    let back = holder.call(|t| async move { t.await_all_locks().await });
    assert!(!back.is_finished());
    waiter.kill();
    let result = back.result().await.unwrap();
    assert!(result.deadlocks.is_empty(), "a surrender is no deadlock");
    assert_eq!(result.locks.len(), 2);
    h.wait_granted(&holder.id(), &lock_id!["a", "b"]).await;
}

#[tokio::test]
async fn a_surrender_to_an_agent_that_does_not_wait_fails_and_changes_nothing() {
    let h = Harness::new("refuse").await;
    let here = [h.node.id().clone()];
    let holder = h.client().await;
    holder.lock(lock_id!["a"], Mode::WRITE).await;
    let idle = h.client().await;
    idle.lock(lock_id!["other"], Mode::WRITE).await;
    let before = h.node.snapshot().await.unwrap();
    let err = bounded(
        holder
            .txn()
            .surrender_nowait(lock_id!["a"], &idle.id(), &here),
    )
    .await
    .unwrap_err();
    let expected = RequestError::CannotSurrender {
        lock: lock_id!["a"],
        to: idle.id(),
        node: n("refuse"),
        why: SurrenderRefusal::NotWaiting,
    };
    assert!(
        matches!(&err, Error::Request(e) if *e == expected),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&idle.id().to_string()) && text.contains("a"),
        "{text}"
    );
    assert_eq!(h.node.snapshot().await.unwrap(), before);
    assert!(holder.txn().status().await.unwrap().have_all_locks());
    // A lock the transaction waits for, or never asked for, is not its to surrender.
    let mut waiting = h.client().await;
    let _pending = waiting.call(|t| async move { t.lock(lock_id!["a"], Mode::WRITE).await });
    h.wait_blocked(&waiting.id(), &lock_id!["a"]).await;
    let err = bounded(
        waiting
            .txn()
            .surrender_nowait(lock_id!["a"], &holder.id(), &here),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Request(RequestError::CannotSurrender {
                why: SurrenderRefusal::NotHeld,
                ..
            })
        ),
        "{err:?}"
    );
    let err = bounded(
        holder
            .txn()
            .surrender_nowait(lock_id!["none"], &idle.id(), &here),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, Error::Request(RequestError::NoSuchRequest(l)) if *l == lock_id!["none"]),
        "{err:?}"
    );
    // The refusal left the holder's request servable: the waiter still waits.
    assert!(holder.txn().status().await.unwrap().have_all_locks());
    h.wait_blocked(&waiting.id(), &lock_id!["a"]).await;
}
