//! Watching locks, as the Erlang original's `watch`/`unwatch`/`watchers` do, through the public
//! API: a watch sees the holders of its lock (and of locks below it), stops when dropped,
//! unwatched or ended, spans nodes, and resumes when its node comes back.
//!
//! In-process nodes, alone or connected over TCP on 127.0.0.1 (ephemeral ports). Blocking is
//! checked on watch views, never with timing; every wait is bounded.

mod common;

use common::{Harness, bounded, shut_down, two_nodes};
use futures::StreamExt;
use locks_agent::{LockWatch, Req, WatchItem};
use locks_core::proto::LockView;
use locks_core::{AgentId, Mode, NodeId, lock_id};
use locks_server::Node;

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

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
    let b = bounded(Node::start(common::config("b").listen(b_addr)))
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
