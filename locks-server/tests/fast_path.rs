//! The node's fast path (`LocalTable`): requests applied on the caller's thread decide exactly
//! as messages to the lock server do, and a transaction without an actor loses no message.
//! Every transaction here is begun as transactions are (`begin_agent`); the same for one whose
//! mailbox is registered at once (as on a thread without thread-locals) is a unit test of the
//! node (`src/node/tests.rs`), since nothing outside the crate can begin one so.

mod common;

use actix::prelude::*;
use common::net::ChannelAgent;
use locks_core::proto::{AgentMessage, EntryState, ServerRequest};
use locks_core::{AgentId, Mode, lock_id};
use locks_server::embed::{FastLock, NodeInternals, Presence, Touched};
use locks_server::{Node, NodeConfig};
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(10);

/// A new transaction of `node` without an actor: live for the router, which keeps the notices
/// for it (rather than taking them as its death) in a mailbox made when the first one comes.
fn agent(node: &Node) -> Presence {
    node.begin_agent()
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
    let FastLock::Granted { mode, version: v1 } = table.fast_lock(&a, &lock, Mode::X, &a_touched)
    else {
        panic!("a free lock is granted at once");
    };
    assert_eq!(mode, Mode::X);
    // b must wait: it is queued in the table as a message would have queued it.
    assert_eq!(
        table.fast_lock(&b, &lock, Mode::S, &Touched::default()),
        FastLock::Queued
    );
    table.release(&a, &a_touched);
    assert!(table.holds(b.id(), &lock).is_some(), "b granted on release");
    // c asks for a mode compatible with b's, and nobody waits: granted, at a later version.
    let FastLock::Granted { version: v2, .. } =
        table.fast_lock(&c, &lock, Mode::S, &Touched::default())
    else {
        panic!("compatible with the holder and nobody waits");
    };
    assert!(v2 > v1, "each grant a larger version");
    // A writer queues behind the readers; a new reader must not overtake it (FIFO).
    let (d, e) = (agent(&node), agent(&node));
    assert_eq!(
        table.fast_lock(&d, &lock, Mode::X, &Touched::default()),
        FastLock::Queued
    );
    assert_eq!(
        table.fast_lock(&e, &lock, Mode::S, &Touched::default()),
        FastLock::Queued
    );
}

#[tokio::test]
async fn a_fast_child_lock_holds_its_ancestors_and_a_parent_reader_waits() {
    let node = Node::start(NodeConfig::new("fast2")).await.unwrap();
    let table = node.local_table();
    let (w, r) = (agent(&node), agent(&node));
    assert!(matches!(
        table.fast_lock(&w, &lock_id!["db", "rows", 7], Mode::X, &Touched::default()),
        FastLock::Granted { .. }
    ));
    assert_eq!(
        table.read_lock(&lock_id!["db"], |t| t.state(w.id(), &lock_id!["db"])),
        EntryState::Granted(Mode::IX)
    );
    assert_eq!(
        table.fast_lock(&r, &lock_id!["db"], Mode::S, &Touched::default()),
        FastLock::Queued
    );
}

#[tokio::test]
async fn bad_requests_are_refused_on_the_fast_path_and_change_nothing() {
    let node = Node::start(NodeConfig::new("fast3")).await.unwrap();
    let table = node.local_table();
    let a = agent(&node);
    let deep = locks_core::LockId::new((0..100).map(|i| i.to_string())).unwrap();
    let before = table.snapshot();
    assert!(matches!(
        table.fast_lock(&a, &deep, Mode::S, &Touched::default()),
        FastLock::Rejected(locks_core::proto::Rejection::LockIdTooLarge(_))
    ));
    assert!(
        table.unlock(&a, &lock_id!["x"]).is_err(),
        "nothing to unlock"
    );
    assert_eq!(
        table.snapshot(),
        before,
        "a refused request changes nothing"
    );
    node.shutdown().await;
    assert_eq!(
        table.fast_lock(&a, &lock_id!["x"], Mode::S, &Touched::default()),
        FastLock::Stopped
    );
}

/// Messages another agent of the node sends a transaction begun without a mailbox are kept
/// for it, in order, and handed to its actor before any later message.
#[tokio::test]
async fn messages_for_a_transaction_begun_without_a_mailbox_are_kept_and_handed_over_in_order() {
    let node = Node::start(NodeConfig::new("fast4l")).await.unwrap();
    let idle = agent(&node);
    let lock = lock_id!["k"];
    let holder = node.next_agent_id();
    let holder_port = node.router().for_agent(&holder);
    // Messages another agent sends it, in its own name, while it has no actor.
    for version in [1, 2, 3] {
        let msg = AgentMessage::Surrendered {
            by: holder.id().clone(),
            node: node.id().clone(),
            lock: lock.clone(),
            version,
        };
        holder_port.send_agent(idle.id(), msg).expect("kept");
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let port = node.router().clone();
    let idle = node
        .spawn(async move {
            port.attach_agent(&idle, ChannelAgent(tx).start().recipient());
            idle
        })
        .await
        .unwrap();
    // And one after: it comes after the kept ones.
    node.router()
        .for_transaction(&idle)
        .send_server(
            node.id(),
            ServerRequest::Lock {
                agent: idle.id().clone(),
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

/// A probe round a cycle through `through`, whose victim is `victim` (sent by the victim).
fn probe(node: &Node, through: &AgentId, victim: &AgentId) -> AgentMessage {
    let edge = |waiter: &AgentId, blocker: &AgentId| locks_core::proto::ProbeEdge {
        waiter: waiter.clone(),
        blocker: blocker.clone(),
        lock: lock_id!["p"],
        node: node.id().clone(),
        version: 1,
    };
    AgentMessage::Probe(locks_core::proto::Probe {
        edges: vec![edge(through, victim), edge(victim, through)],
        next: 0,
        epoch: 0,
        refuted: false,
    })
}

/// A probe through a transaction that waits for nothing goes back to its victim at once,
/// refuted; once the table queued one of the transaction's requests, it is kept for its actor.
#[tokio::test]
async fn a_probe_through_a_transaction_begun_without_a_mailbox_is_refuted_at_once() {
    let node = Node::start(NodeConfig::new("fast5l")).await.unwrap();
    let idle = agent(&node);
    let victim = node.next_agent_id();
    let victim_port = node.router().for_agent(&victim);
    let victim_id = victim.id().clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let port = node.router().clone();
    node.spawn(
        async move { port.register_agent(victim, ChannelAgent(tx).start().recipient(), None) },
    )
    .await
    .unwrap();
    victim_port
        .send_agent(idle.id(), probe(&node, idle.id(), &victim_id))
        .unwrap();
    match recv(&mut rx).await {
        AgentMessage::Probe(p) => assert!(p.refuted, "an agent without an actor waits for nobody"),
        other => panic!("the probe back, got {other:?}"),
    }
    // Once the table queued one of its requests, a probe is kept for its actor instead.
    let holder = agent(&node);
    let table = node.local_table();
    assert!(matches!(
        table.fast_lock(&holder, &lock_id!["p"], Mode::X, &Touched::default()),
        FastLock::Granted { .. }
    ));
    assert_eq!(
        table.fast_lock(&idle, &lock_id!["p"], Mode::X, &Touched::default()),
        FastLock::Queued
    );
    victim_port
        .send_agent(idle.id(), probe(&node, idle.id(), &victim_id))
        .unwrap();
    let (tx2, mut rx2) = tokio::sync::mpsc::unbounded_channel();
    let port = node.router().clone();
    node.spawn(async move { port.attach_agent(&idle, ChannelAgent(tx2).start().recipient()) })
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
    let router = node.router().clone();
    let before = router.agent_count();
    let (quiet, told) = (node.begin_agent(), node.begin_agent());
    assert!(router.has_agent(quiet.id()) && router.has_agent(told.id()));
    assert_eq!(router.agent_count(), before + 2);
    // A message in quiet's name, as its own agent would send it.
    let from_quiet = router.for_transaction(&quiet);
    let msg = AgentMessage::Surrendered {
        by: quiet.id().clone(),
        node: node.id().clone(),
        lock: lock_id!["g"],
        version: 1,
    };
    from_quiet.send_agent(told.id(), msg.clone()).expect("kept");
    for presence in [&quiet, &told] {
        router.end_transaction(presence);
        assert!(!router.has_agent(presence.id()));
        assert!(matches!(
            from_quiet.send_agent(presence.id(), msg.clone()),
            Err(locks_server::RouteError::UnknownAgent(_))
        ));
    }
    assert_eq!(router.agent_count(), before);
    node.shutdown().await;
}
