//! Cancelling a lock call: dropping the future of `lock`, `lock_on` or `await_all_locks`
//! (`tokio::time::timeout`, `select!`) withdraws what the call asked for unless it was granted,
//! on one node and across two, so that nobody waits behind a request nobody awaits; and the
//! bounded waits (`lock_timeout`, `lock_on_timeout`), which withdraw the same way and say what
//! they waited for.
//!
//! Each test checks the outcome a user relies on: another transaction is granted the lock
//! without the cancelled one ending, and the cancelled transaction reports the lock as it was
//! before the call.

mod common;

use common::{bounded, cluster};
use locks_agent::{LockState, Options, Req, Transaction, TransactionStatus, begin_transaction};
use locks_core::{Mode, NodeId, lock_id};
use locks_server::{Node, NodeConfig};
use std::time::Duration;

/// How long a call waits before the test gives up on it: it is always blocked by a holder that
/// stays, so the time out is certain whatever the machine's speed.
const SHORT: Duration = Duration::from_millis(30);

async fn txn(node: &Node) -> Transaction {
    begin_transaction(node, Options::default()).await.unwrap()
}

#[tokio::test]
async fn a_timed_out_lock_is_withdrawn_when_the_holder_ends() {
    let node = Node::start(NodeConfig::new("cancel1")).await.unwrap();
    let l = lock_id!["jobs", 1];
    let holder = txn(&node).await;
    holder.lock(l.clone(), Mode::WRITE).await.unwrap();
    // No agent yet: the fast path queues the request, then hands it to the agent.
    let waiter = txn(&node).await;
    let waited = tokio::time::timeout(SHORT, waiter.lock(l.clone(), Mode::WRITE)).await;
    assert!(waited.is_err(), "blocked by the holder: {waited:?}");
    holder.end().await.unwrap();
    let third = txn(&node).await;
    bounded(third.lock(l.clone(), Mode::WRITE)).await.unwrap();
    // The waiter is still running, and asks for nothing.
    assert_eq!(
        bounded(waiter.lock_state(l.clone())).await.unwrap(),
        LockState::NotRequested
    );
    assert_eq!(
        bounded(waiter.status()).await.unwrap(),
        TransactionStatus::NoLocks
    );
    // It can ask again, and waits for the third as any newcomer would.
    let again = tokio::time::timeout(SHORT, waiter.lock(l.clone(), Mode::WRITE)).await;
    assert!(again.is_err());
    third.end().await.unwrap();
    bounded(waiter.lock(l, Mode::WRITE)).await.unwrap();
}

#[tokio::test]
async fn a_timed_out_lock_is_withdrawn_while_the_holder_stays() {
    let node = Node::start(NodeConfig::new("cancel2")).await.unwrap();
    let l = lock_id!["jobs", 2];
    let holder = txn(&node).await;
    holder.lock(l.clone(), Mode::WRITE).await.unwrap();
    let waiter = txn(&node).await;
    // An agent of its own first (a lock on another key that must wait is not needed: events do).
    let _events = waiter.events();
    let waited = tokio::time::timeout(SHORT, waiter.lock(l.clone(), Mode::WRITE)).await;
    assert!(waited.is_err());
    // The holder gives the lock up without ending; the next asker gets it, not the waiter.
    holder.unlock(l.clone()).await.unwrap();
    let second = txn(&node).await;
    bounded(second.lock(l.clone(), Mode::WRITE)).await.unwrap();
    assert_eq!(
        bounded(waiter.lock_state(l)).await.unwrap(),
        LockState::NotRequested
    );
}

#[tokio::test]
async fn a_cancelled_upgrade_keeps_the_mode_held_before() {
    let node = Node::start(NodeConfig::new("cancel3")).await.unwrap();
    let l = lock_id!["page", 3];
    let reader = txn(&node).await;
    reader.lock(l.clone(), Mode::READ).await.unwrap();
    let upgrader = txn(&node).await;
    upgrader.lock(l.clone(), Mode::READ).await.unwrap();
    let waited = tokio::time::timeout(SHORT, upgrader.lock(l.clone(), Mode::WRITE)).await;
    assert!(waited.is_err(), "the other reader blocks the upgrade");
    // A new reader is not queued behind a conversion nobody awaits.
    let newcomer = txn(&node).await;
    bounded(newcomer.lock(l.clone(), Mode::READ)).await.unwrap();
    match bounded(upgrader.lock_state(l.clone())).await.unwrap() {
        LockState::Held(granted) => assert_eq!(granted.mode, Mode::READ),
        other => panic!("still holds READ: {other:?}"),
    }
    assert!(matches!(
        bounded(upgrader.status()).await.unwrap(),
        TransactionStatus::HaveAllLocks { .. }
    ));
}

#[tokio::test]
async fn a_lock_raced_against_shutdown_in_select_is_withdrawn() {
    let node = Node::start(NodeConfig::new("cancel4")).await.unwrap();
    let l = lock_id!["jobs", 4];
    let holder = txn(&node).await;
    holder.lock(l.clone(), Mode::WRITE).await.unwrap();
    let waiter = txn(&node).await;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    stop_tx.send(()).unwrap();
    tokio::select! {
        biased;
        locked = waiter.lock(l.clone(), Mode::WRITE) => panic!("held by another: {locked:?}"),
        _ = stop_rx => {}
    }
    holder.end().await.unwrap();
    let third = txn(&node).await;
    bounded(third.lock(l, Mode::WRITE)).await.unwrap();
    drop(waiter);
}

#[tokio::test]
async fn a_dropped_await_all_locks_leaves_the_queued_requests() {
    // `await_all_locks` asks for nothing: dropping it withdraws nothing, and the requests made
    // with `lock_nowait` stay (that call's contract).
    let node = Node::start(NodeConfig::new("cancel5")).await.unwrap();
    let l = lock_id!["jobs", 5];
    let holder = txn(&node).await;
    holder.lock(l.clone(), Mode::WRITE).await.unwrap();
    let waiter = txn(&node).await;
    waiter.lock_nowait(l.clone(), Mode::WRITE).await.unwrap();
    assert!(
        tokio::time::timeout(SHORT, waiter.await_all_locks())
            .await
            .is_err()
    );
    assert_eq!(
        bounded(waiter.lock_state(l.clone())).await.unwrap(),
        LockState::Waiting
    );
    holder.end().await.unwrap();
    bounded(waiter.await_all_locks()).await.unwrap();
}

#[tokio::test]
async fn a_timed_out_lock_on_two_nodes_is_withdrawn_on_both() {
    let hs = cluster(&["cx_a", "cx_b"]).await;
    let (a, b) = (&hs[0].node, &hs[1].node);
    let both: Vec<NodeId> = vec![a.id().clone(), b.id().clone()];
    let l = lock_id!["jobs", 6];
    let holder = txn(b).await;
    bounded(holder.lock_on(l.clone(), Mode::WRITE, &both, Req::All))
        .await
        .unwrap();
    let waiter = txn(a).await;
    let waited = tokio::time::timeout(
        SHORT,
        waiter.lock_on(l.clone(), Mode::WRITE, &both, Req::All),
    )
    .await;
    assert!(waited.is_err());
    holder.end().await.unwrap();
    let third = txn(b).await;
    bounded(third.lock_on(l.clone(), Mode::WRITE, &both, Req::All))
        .await
        .unwrap();
    assert_eq!(
        bounded(waiter.lock_state(l)).await.unwrap(),
        LockState::NotRequested
    );
}

#[tokio::test]
async fn a_later_call_on_the_same_lock_keeps_the_request() {
    // Two calls wait for the same lock; dropping one leaves the other waiting, and granted.
    let node = Node::start(NodeConfig::new("cancel7")).await.unwrap();
    let l = lock_id!["jobs", 7];
    let holder = txn(&node).await;
    holder.lock(l.clone(), Mode::WRITE).await.unwrap();
    let waiter = txn(&node).await;
    let first = waiter.lock(l.clone(), Mode::WRITE);
    let second = waiter.lock(l.clone(), Mode::WRITE);
    drop(first);
    holder.end().await.unwrap();
    bounded(second).await.unwrap();
}

#[tokio::test]
async fn a_bounded_wait_names_the_holder_and_withdraws() {
    let node = Node::start(NodeConfig::new("bounded1")).await.unwrap();
    let l = lock_id!["jobs", 8];
    let holder = txn(&node).await;
    holder.lock(l.clone(), Mode::WRITE).await.unwrap();
    let waiter = txn(&node).await;
    let err = bounded(waiter.lock_timeout(l.clone(), Mode::WRITE, SHORT))
        .await
        .unwrap_err();
    match &err {
        locks_agent::Error::TimedOut {
            lock,
            waited_on,
            holders,
        } => {
            assert_eq!(*lock, l);
            assert_eq!(*waited_on, [(l.clone(), node.id().clone())]);
            assert_eq!(*holders, [holder.id().clone()]);
        }
        other => panic!("a time out: {other:?}"),
    }
    let shown = err.to_string();
    assert_eq!(
        shown,
        format!(
            "gave up waiting for {l}: not granted: {l}@{}; waiting for {}",
            node.id(),
            holder.id()
        )
    );
    // Withdrawn: the next asker gets the lock once the holder lets go.
    holder.unlock(l.clone()).await.unwrap();
    let third = txn(&node).await;
    bounded(third.lock(l.clone(), Mode::WRITE)).await.unwrap();
    // A free lock is granted whatever the bound.
    bounded(waiter.lock_timeout(lock_id!["jobs", 9], Mode::WRITE, SHORT))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_bounded_wait_on_two_nodes_withdraws_on_both() {
    let hs = cluster(&["bx_a", "bx_b"]).await;
    let (a, b) = (&hs[0].node, &hs[1].node);
    let both: Vec<NodeId> = vec![a.id().clone(), b.id().clone()];
    let l = lock_id!["jobs", 10];
    let holder = txn(b).await;
    bounded(holder.lock_on(l.clone(), Mode::WRITE, &both, Req::All))
        .await
        .unwrap();
    let waiter = txn(a).await;
    let err = bounded(waiter.lock_on_timeout(l.clone(), Mode::WRITE, &both, Req::All, SHORT))
        .await
        .unwrap_err();
    let locks_agent::Error::TimedOut {
        waited_on, holders, ..
    } = err
    else {
        panic!("a time out: {err:?}");
    };
    assert_eq!(waited_on.len(), 2, "{waited_on:?}");
    assert_eq!(holders, [holder.id().clone()]);
    holder.end().await.unwrap();
    let third = txn(b).await;
    bounded(third.lock_on(l, Mode::WRITE, &both, Req::All))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_reader_is_not_queued_behind_a_writer_that_gave_up() {
    // The holder stays: a new reader is compatible with it, and would queue only behind the
    // writer's request, which is gone with the writer's timeout.
    let node = Node::start(NodeConfig::new("cancel8")).await.unwrap();
    let l = lock_id!["page", 8];
    let reader = txn(&node).await;
    reader.lock(l.clone(), Mode::READ).await.unwrap();
    let writer = txn(&node).await;
    let waited = tokio::time::timeout(SHORT, writer.lock(l.clone(), Mode::WRITE)).await;
    assert!(waited.is_err());
    let second = txn(&node).await;
    bounded(second.lock(l, Mode::READ)).await.unwrap();
    drop(writer);
}
