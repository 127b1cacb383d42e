//! The node's fast path (`LocalTable`): requests applied on the caller's thread decide exactly
//! as messages to the lock server do, and a transaction without an actor loses no message.

mod common;

use actix::prelude::*;
use common::net::ChannelAgent;
use locks_core::proto::{AgentMessage, EntryState, ServerRequest};
use locks_core::{Mode, lock_id};
use locks_server::embed::sim;
use locks_server::embed::{FastLock, NodeInternals, Presence, Touched};
use locks_server::{Node, NodeConfig};
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(10);

/// A new agent id of `node`, registered as a transaction without an actor (so that notices to
/// it are kept, not taken as its death).
fn agent(node: &Node) -> locks_core::AgentId {
    let id = sim::next_agent_id(node);
    sim::router(node).register_idle_agent(id.clone());
    id
}

async fn recv(rx: &mut tokio::sync::mpsc::UnboundedReceiver<AgentMessage>) -> AgentMessage {
    tokio::time::timeout(BOUND, rx.recv())
        .await
        .expect("a message within the bound")
        .expect("the sink is alive")
}

#[tokio::test]
async fn a_fast_grant_carries_a_growing_version_and_never_overtakes_a_waiter() {
    let node = Node::start(NodeConfig::new("fast1")).await.unwrap();
    let table = node.local_table();
    let (a, b, c) = (agent(&node), agent(&node), agent(&node));
    let lock = lock_id!["t", 1];
    let a_touched = Touched::default();
    let FastLock::Granted { mode, version: v1 } =
        sim::fast_lock(table, &a, &lock, Mode::X, &a_touched)
    else {
        panic!("a free lock is granted at once");
    };
    assert_eq!(mode, Mode::X);
    // b must wait: it is queued in the table as a message would have queued it.
    assert_eq!(
        sim::fast_lock(table, &b, &lock, Mode::S, &Touched::default()),
        FastLock::Queued
    );
    sim::release(table, &a, &a_touched);
    assert!(table.holds(&b, &lock).is_some(), "b granted on release");
    // c asks for a mode compatible with b's, and nobody waits: granted, at a later version.
    let FastLock::Granted { version: v2, .. } =
        sim::fast_lock(table, &c, &lock, Mode::S, &Touched::default())
    else {
        panic!("compatible with the holder and nobody waits");
    };
    assert!(v2 > v1, "each grant a larger version");
    // A writer queues behind the readers; a new reader must not overtake it (FIFO).
    let (d, e) = (agent(&node), agent(&node));
    assert_eq!(
        sim::fast_lock(table, &d, &lock, Mode::X, &Touched::default()),
        FastLock::Queued
    );
    assert_eq!(
        sim::fast_lock(table, &e, &lock, Mode::S, &Touched::default()),
        FastLock::Queued
    );
}

#[tokio::test]
async fn a_fast_child_lock_holds_its_ancestors_and_a_parent_reader_waits() {
    let node = Node::start(NodeConfig::new("fast2")).await.unwrap();
    let table = node.local_table();
    let (w, r) = (agent(&node), agent(&node));
    assert!(matches!(
        sim::fast_lock(
            table,
            &w,
            &lock_id!["db", "rows", 7],
            Mode::X,
            &Touched::default()
        ),
        FastLock::Granted { .. }
    ));
    assert_eq!(
        table.read_lock(&lock_id!["db"], |t| t.state(&w, &lock_id!["db"])),
        EntryState::Granted(Mode::IX)
    );
    assert_eq!(
        sim::fast_lock(table, &r, &lock_id!["db"], Mode::S, &Touched::default()),
        FastLock::Queued
    );
}

#[tokio::test]
async fn bad_requests_are_refused_on_the_fast_path_and_change_nothing() {
    let node = Node::start(NodeConfig::new("fast3")).await.unwrap();
    let table = node.local_table();
    let a = sim::next_agent_id(&node);
    let deep = locks_core::LockId::new((0..100).map(|i| i.to_string())).unwrap();
    let before = table.snapshot();
    assert!(matches!(
        sim::fast_lock(table, &a, &deep, Mode::S, &Touched::default()),
        FastLock::Rejected(locks_core::proto::Rejection::LockIdTooLarge(_))
    ));
    assert!(
        sim::unlock(table, &a, &lock_id!["x"]).is_err(),
        "nothing to unlock"
    );
    assert_eq!(
        table.snapshot(),
        before,
        "a refused request changes nothing"
    );
    node.shutdown().await;
    assert_eq!(
        sim::fast_lock(table, &a, &lock_id!["x"], Mode::S, &Touched::default()),
        FastLock::Stopped
    );
}

/// A transaction without an actor: begun as transactions are (`begin_agent`: live for the
/// router, no mailbox until a message comes) when `lazy`, else with its mailbox registered at
/// once (`register_idle_agent`). The presence, if any, ends it for the router.
fn idle_transaction(node: &Node, lazy: bool) -> (locks_core::AgentId, Option<Presence>) {
    if lazy {
        let presence = node.begin_agent();
        (presence.id().clone(), Some(presence))
    } else {
        (agent(node), None)
    }
}

#[tokio::test]
async fn messages_for_a_transaction_without_an_actor_are_kept_and_handed_over_in_order() {
    kept_and_handed_over("fast4", false).await;
}

#[tokio::test]
async fn messages_for_a_transaction_begun_without_a_mailbox_are_kept_and_handed_over_in_order() {
    kept_and_handed_over("fast4l", true).await;
}

async fn kept_and_handed_over(name: &str, lazy: bool) {
    let node = Node::start(NodeConfig::new(name)).await.unwrap();
    let router = sim::router(&node).clone();
    let (idle, _presence) = idle_transaction(&node, lazy);
    let lock = lock_id!["k"];
    let holder = sim::next_agent_id(&node);
    // Messages another agent sends it while it has no actor.
    for version in [1, 2, 3] {
        let msg = AgentMessage::Surrendered {
            by: holder.clone(),
            node: node.id().clone(),
            lock: lock.clone(),
            version,
        };
        router.send_agent(&idle, msg).expect("kept");
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (r, id) = (router.clone(), idle.clone());
    node.spawn(async move { r.attach_agent(&id, ChannelAgent(tx).start().recipient()) })
        .await
        .unwrap();
    // And one after: it comes after the kept ones.
    router
        .send_server(
            node.id(),
            ServerRequest::Lock {
                agent: idle.clone(),
                lock: lock.clone(),
                mode: Mode::X,
            },
        )
        .unwrap();
    let mut versions = Vec::new();
    for _ in 0..3 {
        match recv(&mut rx).await {
            AgentMessage::Surrendered { version, .. } => versions.push(version),
            other => panic!("the kept messages first, got {other:?}"),
        }
    }
    assert_eq!(versions, [1, 2, 3]);
    assert!(matches!(recv(&mut rx).await, AgentMessage::Notice(_)));
}

/// A probe round a cycle through `through`, whose victim is `victim`.
fn probe(node: &Node, through: &locks_core::AgentId, victim: &locks_core::AgentId) -> AgentMessage {
    let edge = |waiter: &locks_core::AgentId, blocker: &locks_core::AgentId| {
        locks_core::proto::ProbeEdge {
            waiter: waiter.clone(),
            blocker: blocker.clone(),
            lock: lock_id!["p"],
            node: node.id().clone(),
            version: 1,
        }
    };
    AgentMessage::Probe(locks_core::proto::Probe {
        edges: vec![edge(through, victim), edge(victim, through)],
        next: 0,
        epoch: 0,
        refuted: false,
    })
}

#[tokio::test]
async fn a_probe_through_a_transaction_that_waits_for_nothing_is_refuted_at_once() {
    refuted_at_once("fast5", false).await;
}

#[tokio::test]
async fn a_probe_through_a_transaction_begun_without_a_mailbox_is_refuted_at_once() {
    refuted_at_once("fast5l", true).await;
}

async fn refuted_at_once(name: &str, lazy: bool) {
    let node = Node::start(NodeConfig::new(name)).await.unwrap();
    let router = sim::router(&node).clone();
    let (idle, _presence) = idle_transaction(&node, lazy);
    let victim = sim::next_agent_id(&node);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (r, v) = (router.clone(), victim.clone());
    node.spawn(async move { r.register_agent(v, ChannelAgent(tx).start().recipient()) })
        .await
        .unwrap();
    router
        .send_agent(&idle, probe(&node, &idle, &victim))
        .unwrap();
    match recv(&mut rx).await {
        AgentMessage::Probe(p) => assert!(p.refuted, "an agent without an actor waits for nobody"),
        other => panic!("the probe back, got {other:?}"),
    }
    // Once the table queued one of its requests, a probe is kept for its actor instead.
    let holder = sim::next_agent_id(&node);
    let table = node.local_table();
    assert!(matches!(
        sim::fast_lock(table, &holder, &lock_id!["p"], Mode::X, &Touched::default()),
        FastLock::Granted { .. }
    ));
    assert_eq!(
        sim::fast_lock(table, &idle, &lock_id!["p"], Mode::X, &Touched::default()),
        FastLock::Queued
    );
    router
        .send_agent(&idle, probe(&node, &idle, &victim))
        .unwrap();
    let (tx2, mut rx2) = tokio::sync::mpsc::unbounded_channel();
    let (r, id) = (router.clone(), idle.clone());
    node.spawn(async move { r.attach_agent(&id, ChannelAgent(tx2).start().recipient()) })
        .await
        .unwrap();
    assert!(matches!(recv(&mut rx2).await, AgentMessage::Probe(p) if !p.refuted));
    assert!(rx.try_recv().is_err(), "nothing bounced to the victim");
}

/// A transaction begun without a mailbox is live for the router until its end, whether or not
/// a message made it a mailbox; after its end a message to it fails as to an agent that is
/// gone (which the lock server takes as its death), and nothing of it is left.
#[tokio::test]
async fn a_transaction_begun_without_a_mailbox_is_gone_for_the_router_after_its_end() {
    let node = Node::start(NodeConfig::new("fast6")).await.unwrap();
    let router = sim::router(&node).clone();
    let before = router.agent_count();
    let (quiet, told) = (node.begin_agent(), node.begin_agent());
    assert!(router.has_agent(quiet.id()) && router.has_agent(told.id()));
    assert_eq!(router.agent_count(), before + 2);
    let msg = AgentMessage::Surrendered {
        by: quiet.id().clone(),
        node: node.id().clone(),
        lock: lock_id!["g"],
        version: 1,
    };
    router.send_agent(told.id(), msg.clone()).expect("kept");
    for presence in [&quiet, &told] {
        router.end_transaction(presence);
        assert!(!router.has_agent(presence.id()));
        assert!(matches!(
            router.send_agent(presence.id(), msg.clone()),
            Err(locks_server::RouteError::UnknownAgent(_))
        ));
    }
    assert_eq!(router.agent_count(), before);
    node.shutdown().await;
}
