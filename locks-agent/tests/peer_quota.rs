//! Per-peer quotas end to end, on two in-process nodes connected over TCP on 127.0.0.1: node
//! `a` has small quotas, the transactions of node `b` lock on `a`. A request past a quota is
//! refused with the quota named (the caller's `lock` returns the server's reason), `a` keeps
//! serving, and once `b`'s transactions release, `b` locks again. Every wait is bounded.

mod common;

use common::{Harness, bounded, cluster_with, config};
use locks_agent::{Error, Options, Req, RequestError, Transaction, begin_transaction};
use locks_core::proto::{Quota, Rejection};
use locks_core::{LockId, Mode, NodeId, lock_id};
use locks_server::{NodeConfig, PeerQuotas};

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

/// Nodes `a` (with `quotas` for its peers) and `b`, connected.
async fn nodes(quotas: PeerQuotas) -> (Harness, Harness) {
    let configure = move |name: &str| -> NodeConfig {
        match name {
            "a" => config(name).peer_quotas(quotas),
            _ => config(name),
        }
    };
    let mut hs = cluster_with(&["a", "b"], configure).await;
    let b = hs.pop().expect("two nodes");
    let a = hs.pop().expect("two nodes");
    (a, b)
}

async fn txn(h: &Harness) -> Transaction {
    bounded(begin_transaction(&h.node, Options::default()))
        .await
        .unwrap()
}

/// `t` locks `lock` on node `a` only.
async fn lock_on_a(t: &Transaction, lock: LockId) -> Result<(), Error> {
    bounded(t.lock_on(lock, Mode::WRITE, &[n("a")], Req::All))
        .await
        .map(|_| ())
}

/// Whether `err` is node `a`'s refusal of `lock` for `quota` with `limit`.
fn over_quota(err: &Error, lock: &LockId, quota: Quota, limit: u64) -> bool {
    let expected = Rejection::QuotaExceeded { quota, limit };
    matches!(err, Error::Request(RequestError::Refused { lock: l, node, reason })
        if l == lock && node == &n("a") && reason == &expected)
}

#[tokio::test]
async fn a_peer_past_its_lock_quota_is_refused_and_locks_again_once_it_released() {
    let quotas = PeerQuotas {
        locks: 2,
        ..PeerQuotas::default()
    };
    let (a, b) = nodes(quotas).await;
    // [q] and [q, 1]: two entries on a, the whole quota of b.
    let t1 = txn(&b).await;
    lock_on_a(&t1, lock_id!["q", "1"]).await.unwrap();
    let t2 = txn(&b).await;
    let err = lock_on_a(&t2, lock_id!["q", "2"]).await.unwrap_err();
    assert!(
        over_quota(&err, &lock_id!["q", "2"], Quota::Locks, 2),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "node a refused the request on [q, 2]: this node's per-peer quota is used up: \
         at most 2 locks (entries on lock ids) for one peer node"
    );
    let snap = bounded(a.node.snapshot()).await.unwrap();
    assert!(snap.locks.iter().all(|l| l.entry(t2.id()).is_none()));
    // a keeps serving: its own transactions are not limited, and b's lock is still held.
    let local = txn(&a).await;
    for i in 0..5u64 {
        bounded(local.lock(lock_id!["q", i], Mode::READ))
            .await
            .unwrap();
    }
    a.wait_granted(t1.id(), &lock_id!["q", "1"]).await;
    // Released (t1's locks and t2's refused request): b may lock again.
    let (id1, id2) = (t1.id().clone(), t2.id().clone());
    t1.end().await.unwrap();
    t2.end().await.unwrap();
    a.wait_released(&id1).await;
    a.wait_released(&id2).await;
    let t3 = txn(&b).await;
    lock_on_a(&t3, lock_id!["q", "2"]).await.unwrap();
    a.wait_granted(t3.id(), &lock_id!["q", "2"]).await;
}

#[tokio::test]
async fn a_peer_past_its_queued_quota_is_refused_until_its_waiter_is_granted() {
    let quotas = PeerQuotas {
        queued: 1,
        ..PeerQuotas::default()
    };
    let (a, b) = nodes(quotas).await;
    // a's own transaction holds [w]; b's first transaction waits for it: one queued entry.
    let holder = txn(&a).await;
    bounded(holder.lock(lock_id!["w"], Mode::WRITE))
        .await
        .unwrap();
    let waiter = txn(&b).await;
    let waiting = {
        let waiter = std::sync::Arc::new(waiter);
        let w = waiter.clone();
        (
            waiter,
            tokio::spawn(async move { lock_on_a(&w, lock_id!["w"]).await }),
        )
    };
    a.wait_blocked(waiting.0.id(), &lock_id!["w"]).await;
    // Another request of b may queue too: refused, though [v] is free.
    let t2 = txn(&b).await;
    let err = lock_on_a(&t2, lock_id!["v"]).await.unwrap_err();
    assert!(
        over_quota(&err, &lock_id!["v"], Quota::Queued, 1),
        "{err:?}"
    );
    // The holder ends, the waiter is granted: nothing of b is queued any more.
    holder.end().await.unwrap();
    bounded(waiting.1).await.unwrap().unwrap();
    let t3 = txn(&b).await;
    lock_on_a(&t3, lock_id!["v"]).await.unwrap();
}

#[tokio::test]
async fn a_peer_that_went_down_starts_from_zero_when_it_is_back() {
    let quotas = PeerQuotas {
        locks: 1,
        ..PeerQuotas::default()
    };
    let (a, b) = nodes(quotas).await;
    let t1 = txn(&b).await;
    lock_on_a(&t1, lock_id!["x"]).await.unwrap();
    let t2 = txn(&b).await;
    let err = lock_on_a(&t2, lock_id!["y"]).await.unwrap_err();
    assert!(over_quota(&err, &lock_id!["y"], Quota::Locks, 1), "{err:?}");
    // a sees b go down. b's transactions end meanwhile: their releases never reach a, so only
    // the node down can have given b's quota back.
    assert!(bounded(a.node.disconnect("b")).await.unwrap());
    t1.end().await.unwrap();
    t2.end().await.unwrap();
    bounded(a.node.reconnect("b")).await.unwrap();
    common::wait_connected(&a.node, &["b"]).await;
    common::wait_connected(&b.node, &["a"]).await;
    let t3 = txn(&b).await;
    lock_on_a(&t3, lock_id!["y"]).await.unwrap();
}

/// A lock id thousands of keys deep from a peer is refused for its depth before the quota
/// books count anything (counting its prefixes would take time quadratic in its depth, on the
/// node's thread): node `a` answers at once, and `b`, which watches `a`'s heartbeats with a
/// short timeout, never sees it down.
#[tokio::test]
async fn a_lock_id_thousands_of_keys_deep_is_refused_and_its_node_is_never_seen_down() {
    use std::time::Duration;
    let configure = |name: &str| -> NodeConfig {
        config(name).heartbeat(Duration::from_millis(100), Duration::from_millis(1000))
    };
    let mut hs = cluster_with(&["a", "b"], configure).await;
    let b = hs.pop().expect("two nodes");
    let _a = hs.pop().expect("two nodes");
    let mut events = b.node.subscribe_nodes();
    let deep = LockId::new(0..12_000u64).unwrap();
    let t = txn(&b).await;
    let err = lock_on_a(&t, deep).await.unwrap_err();
    // The id itself is not printed: 12,000 keys.
    let reason = match &err {
        Error::Request(RequestError::Refused { reason, .. }) => reason.clone(),
        _ => panic!(
            "not refused by a: {}",
            err.to_string().chars().take(200).collect::<String>()
        ),
    };
    assert!(matches!(reason, Rejection::LockIdTooLarge(_)), "{reason:?}");
    // A lock of b's on a still works, and b never saw a go down meanwhile.
    let t2 = txn(&b).await;
    lock_on_a(&t2, lock_id!["after"]).await.unwrap();
    while let Some(event) = events.try_recv() {
        assert!(
            !matches!(event, locks_server::NodeEvent::Down(..)),
            "b saw a down: {event:?}"
        );
    }
}
