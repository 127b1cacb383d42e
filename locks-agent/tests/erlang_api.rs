//! The parts of the Erlang original's API beyond lock and await, through the public API: the
//! `majority_alive` requirement, `change_flag` (`Transaction::set_options`), beginning a
//! transaction with a list of objects, watching locks, and surrendering a lock to a waiter.
//!
//! One node, or in-process nodes connected over TCP on 127.0.0.1 (ephemeral ports). Blocking
//! is checked on the lock servers' tables or on watch views, never with timing; every wait is
//! bounded.

mod common;

use common::{BOUND, Harness, bounded};
use futures::StreamExt;
use locks_agent::{
    Error, LockWatch, Options, Req, RequestError, SurrenderRefusal, TransactionStatus, WatchItem,
    begin_transaction_with,
};
use locks_core::proto::LockView;
use locks_core::{AgentId, LockId, Mode, NodeId, lock_id};
use locks_server::NodeEvent;
use locks_server::{Node, NodeConfig};
use std::net::SocketAddr;
use std::time::Duration;

const COOKIE: &str = "erlang-api-tests";

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn config(name: &str) -> NodeConfig {
    NodeConfig::new(name)
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie(COOKIE)
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
}

/// Two nodes "a" and "b", connected.
async fn two_nodes() -> (Harness, Harness) {
    let a = bounded(Node::start(config("a"))).await.unwrap();
    let b = bounded(Node::start(config("b"))).await.unwrap();
    bounded(b.connect(a.local_addr().unwrap())).await.unwrap();
    for node in [&a, &b] {
        let mut events = node.subscribe_nodes();
        bounded(async {
            while !(node.nodes().contains(&n("a")) && node.nodes().contains(&n("b"))) {
                events.recv().await.expect("node running");
            }
        })
        .await;
    }
    (Harness { node: a }, Harness { node: b })
}

/// Shuts `gone` down and waits until `survivor` has seen it go.
async fn shut_down(gone: Harness, survivor: &Harness) {
    let name = gone.node.id().clone();
    let mut events = survivor.node.subscribe_nodes();
    bounded(gone.node.shutdown()).await;
    bounded(async { while events.recv().await != Some(NodeEvent::Down(name.clone())) {} }).await;
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

// ---- watch / unwatch / watchers ----

/// The next view of a watch stream, within the bound.
async fn next_view(views: &mut LockWatch) -> WatchItem {
    bounded(views.next()).await.expect("the stream goes on")
}

/// Views from the stream until one satisfies `done`; returns it.
async fn view_where(views: &mut LockWatch, done: impl Fn(&WatchItem) -> bool) -> WatchItem {
    bounded(async {
        loop {
            let item = views.next().await.expect("the stream goes on");
            if done(&item) {
                return item;
            }
        }
    })
    .await
}

fn holders(view: &LockView) -> Vec<(AgentId, Mode)> {
    view.granted
        .iter()
        .map(|e| (e.agent.clone(), e.mode))
        .collect()
}

#[tokio::test]
async fn a_watch_on_a_parent_sees_the_holders_of_a_child_locked_before_it() {
    let h = Harness::new("parent").await;
    let here = [h.node.id().clone()];
    let writer = h.client().await;
    writer.lock(lock_id!["a", "b"], Mode::WRITE).await;
    let observer = h.client().await;
    let mut views = bounded(observer.txn().watch(lock_id!["a"], &here))
        .await
        .unwrap();
    // The original's watch of [a] missed the holders of [a, b]; here they hold [a] in IX.
    let (node, lock, first) = next_view(&mut views).await;
    assert_eq!((node, lock), (n("parent"), lock_id!["a"]));
    assert_eq!(holders(&first), vec![(writer.id(), Mode::IX)]);
    assert_eq!(
        bounded(observer.txn().watchers(lock_id!["a"]))
            .await
            .unwrap(),
        vec![observer.id()]
    );
    // A read of [a] conflicts with the intention of the write below it: it waits.
    let mut reader = h.client().await;
    let read = reader.call(|t| async move { t.lock(lock_id!["a"], Mode::READ).await });
    let (_, _, queued) = view_where(&mut views, |(_, _, v)| !v.waiting.is_empty()).await;
    assert_eq!(holders(&queued), vec![(writer.id(), Mode::IX)]);
    assert_eq!(queued.waiting[0].agent, reader.id());
    assert!(queued.version > first.version);
    h.wait_blocked(&reader.id(), &lock_id!["a"]).await;
    assert!(!read.is_finished());
    // The writer goes: the reader holds [a], and the watch shows it.
    writer.kill();
    let (_, _, granted) = view_where(&mut views, |(_, _, v)| v.waiting.is_empty()).await;
    assert_eq!(holders(&granted), vec![(reader.id(), Mode::READ)]);
    assert!(read.result().await.is_ok());
    // The observer never queued on the lock.
    let snap = h.node.snapshot().await.unwrap();
    assert!(
        snap.lock(&lock_id!["a"])
            .unwrap()
            .entry(&observer.id())
            .is_none()
    );
}

#[tokio::test]
async fn dropping_the_stream_or_unwatch_stops_the_views_and_the_end_ends_them() {
    let h = Harness::new("stop").await;
    let here = [h.node.id().clone()];
    let observer = h.client().await;
    let watchers = || async {
        bounded(observer.txn().watchers(lock_id!["w"]))
            .await
            .unwrap()
    };
    // Two streams on one lock: each starts from the current queue.
    let mut one = bounded(observer.txn().watch(lock_id!["w"], &here))
        .await
        .unwrap();
    let (_, _, first) = next_view(&mut one).await;
    let mut two = bounded(observer.txn().watch(lock_id!["w"], &here))
        .await
        .unwrap();
    assert_eq!(next_view(&mut two).await.2, first);
    // Dropping one leaves the other watching.
    drop(one);
    let writer = h.client().await;
    writer.lock(lock_id!["w"], Mode::WRITE).await;
    let (_, _, held) = next_view(&mut two).await;
    assert_eq!(holders(&held), vec![(writer.id(), Mode::WRITE)]);
    assert_eq!(watchers().await, vec![observer.id()]);
    // unwatch: the server forgets the watcher and the stream, with nothing left, ends.
    bounded(observer.txn().unwatch(lock_id!["w"], &here))
        .await
        .unwrap();
    assert!(bounded(two.next()).await.is_none());
    assert!(watchers().await.is_empty());
    // Dropping the last stream of a lock makes the server forget the watcher too (a query
    // sent after the drop is handled after the agent's unwatch; polled, since the drop's
    // message to the agent and the query travel apart).
    let three = bounded(observer.txn().watch(lock_id!["w"], &here))
        .await
        .unwrap();
    assert_eq!(watchers().await, vec![observer.id()]);
    drop(three);
    bounded(async {
        while !watchers().await.is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // The end of the transaction ends its streams.
    let mut four = bounded(observer.txn().watch(lock_id!["w"], &here))
        .await
        .unwrap();
    next_view(&mut four).await;
    observer.kill();
    assert!(bounded(four.next()).await.is_none());
    assert!(
        bounded(h.node.watchers(lock_id!["w"]))
            .await
            .unwrap()
            .is_empty(),
        "released with the agent"
    );
}

#[tokio::test]
async fn a_watch_on_two_nodes_sees_each_nodes_queue() {
    let (a, b) = two_nodes().await;
    let both = [n("a"), n("b")];
    let observer = a.client().await;
    let mut views = bounded(observer.txn().watch(lock_id!["x"], &both))
        .await
        .unwrap();
    let mut first = [next_view(&mut views).await, next_view(&mut views).await];
    first.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        first
            .iter()
            .map(|(node, _, v)| (node.clone(), v.granted.len()))
            .collect::<Vec<_>>(),
        vec![(n("a"), 0), (n("b"), 0)]
    );
    // A writer on b locks x on b only: only b's view changes.
    let writer = b.client().await;
    bounded(
        writer
            .txn()
            .lock_on(lock_id!["x"], Mode::WRITE, &[n("b")], Req::All),
    )
    .await
    .unwrap();
    let (node, lock, view) = next_view(&mut views).await;
    assert_eq!((node, lock), (n("b"), lock_id!["x"]));
    assert_eq!(holders(&view), vec![(writer.id(), Mode::WRITE)]);
    // Each node's server knows its own watchers.
    assert_eq!(
        bounded(b.node.watchers(lock_id!["x"])).await.unwrap(),
        vec![observer.id()]
    );
    // Then on a too, in its own version order.
    bounded(
        writer
            .txn()
            .lock_on(lock_id!["x"], Mode::WRITE, &both, Req::All),
    )
    .await
    .unwrap();
    let (node, _, view) = next_view(&mut views).await;
    assert_eq!(node, n("a"));
    assert_eq!(holders(&view), vec![(writer.id(), Mode::WRITE)]);
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

#[tokio::test]
async fn a_watch_resumes_when_its_node_comes_back() {
    let (a, b) = two_nodes().await;
    let b_addr = b.node.local_addr().unwrap();
    let observer = a.client().await;
    let mut views = bounded(observer.txn().watch(lock_id!["x"], &[n("b")]))
        .await
        .unwrap();
    let (_, _, before) = next_view(&mut views).await;
    shut_down(b, &a).await;
    // A new incarnation of b on the same address: the agent watches x there again.
    let b = bounded(Node::start(
        NodeConfig::new("b").listen(b_addr).cookie(COOKIE),
    ))
    .await
    .unwrap();
    bounded(a.node.connect(b_addr)).await.unwrap();
    let b = Harness { node: b };
    let observer_id = observer.id();
    bounded(async {
        while b.node.watchers(lock_id!["x"]).await.unwrap() != [observer_id.clone()] {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let writer = b.client().await;
    bounded(writer.txn().lock(lock_id!["x"], Mode::WRITE))
        .await
        .unwrap();
    let (node, _, after) = view_where(&mut views, |(_, _, v)| v.holds(&writer.id())).await;
    assert_eq!(node, n("b"));
    assert!(
        after.version > before.version,
        "versions grow across incarnations"
    );
}
