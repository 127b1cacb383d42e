//! Tests of a live node that need what no caller outside the crate can do, so they use the
//! node's own router: a transaction whose mailbox is registered when it begins (as
//! `AgentIds::begin` does on a thread without thread-locals, where a transaction has no block
//! to be live in), and a request in the name of an agent of a node that is not connected (a
//! late message, or a forged one), which the liveness filter must keep out of the table. The
//! first two tests for transactions begun as they usually are, through the public API, are in
//! `tests/fast_path.rs`; the other tests of lock servers across nodes in
//! `tests/cluster_server.rs`. Every wait is bounded by `BOUND`.

use super::*;
use crate::NodeEvent;
use crate::embed::{AgentPort, Deliver, NodeInternals, Touched};
use crate::local::FastLock;
use locks_core::proto::{AgentMessage, EntryState, Probe, ProbeEdge, ServerRequest};
use locks_core::{Mode, lock_id};
use tokio::sync::mpsc;

const BOUND: Duration = Duration::from_secs(20);

async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {BOUND:?}"))
}

/// An agent that passes what it is delivered to a channel.
struct Recorder(mpsc::UnboundedSender<Deliver>);

impl Actor for Recorder {
    type Context = Context<Self>;
}

impl Handler<Deliver> for Recorder {
    type Result = ();

    fn handle(&mut self, msg: Deliver, _ctx: &mut Self::Context) {
        let _ = self.0.send(msg);
    }
}

/// A recorder started on `node`'s thread, and what it is delivered.
fn recorder(node: &Node) -> (Recipient<Deliver>, mpsc::UnboundedReceiver<Deliver>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let addr = Recorder::start_in_arbiter(node.arbiter(), move |_| Recorder(tx));
    (addr.recipient(), rx)
}

/// The next agent message delivered on `rx`.
async fn next_message(rx: &mut mpsc::UnboundedReceiver<Deliver>) -> AgentMessage {
    loop {
        match bounded("a message", rx.recv()).await {
            Some(Deliver::Message(msg)) => return msg,
            Some(_) => {}
            None => panic!("the recorder stopped"),
        }
    }
}

/// A transaction of `node` begun with its mailbox registered at once (no block), as on a
/// thread without thread-locals.
fn begun_with_a_mailbox(node: &Node) -> Presence {
    let id = node.next_agent_id().into_id();
    node.inner.router.register_idle_agent(id.clone());
    Presence { id, block: None }
}

#[tokio::test]
async fn messages_for_a_transaction_without_an_actor_are_kept_and_handed_over_in_order() {
    let node = Node::start(NodeConfig::new("fast4")).await.unwrap();
    let idle = begun_with_a_mailbox(&node);
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
    let (recipient, mut rx) = recorder(&node);
    node.router().attach_agent(&idle, recipient);
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
        match next_message(&mut rx).await {
            AgentMessage::Surrendered { version, .. } => versions.push(version),
            other => panic!("the kept messages first, got {other:?}"),
        }
    }
    assert_eq!(versions, [1, 2, 3]);
    assert!(matches!(
        next_message(&mut rx).await,
        AgentMessage::Notice(_)
    ));
}

/// A probe round a cycle through `through`, whose victim (and sender) is `victim`.
fn probe(node: &Node, through: &AgentId, victim: &AgentId) -> AgentMessage {
    let edge = |waiter: &AgentId, blocker: &AgentId| ProbeEdge {
        waiter: waiter.clone(),
        blocker: blocker.clone(),
        lock: lock_id!["p"],
        node: node.id().clone(),
        version: 1,
    };
    AgentMessage::Probe(Probe {
        edges: vec![edge(through, victim), edge(victim, through)],
        next: 0,
        epoch: 0,
        refuted: false,
    })
}

#[tokio::test]
async fn a_probe_through_a_transaction_that_waits_for_nothing_is_refuted_at_once() {
    let node = Node::start(NodeConfig::new("fast5")).await.unwrap();
    let idle = begun_with_a_mailbox(&node);
    let victim = node.next_agent_id();
    let victim_port = node.router().for_agent(&victim);
    let victim_id = victim.id().clone();
    let (recipient, mut rx) = recorder(&node);
    node.router().register_agent(victim, recipient, None);
    victim_port
        .send_agent(idle.id(), probe(&node, idle.id(), &victim_id))
        .unwrap();
    match next_message(&mut rx).await {
        AgentMessage::Probe(p) => assert!(p.refuted, "an agent without an actor waits for nobody"),
        other => panic!("the probe back, got {other:?}"),
    }
    // Once the table queued one of its requests, a probe is kept for its actor instead.
    let holder = node.begin_agent();
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
    let (recipient, mut rx2) = recorder(&node);
    node.router().attach_agent(&idle, recipient);
    assert!(matches!(next_message(&mut rx2).await, AgentMessage::Probe(p) if !p.refuted));
    assert!(rx.try_recv().is_err(), "nothing bounced to the victim");
}

async fn cluster_node(name: &str) -> Node {
    let config = NodeConfig::new(name)
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie("server-test");
    bounded("start", Node::start(config)).await.unwrap()
}

/// A stand-in agent of `node`: its id, the port it sends through, what it is delivered.
fn stand_in(node: &Node) -> (AgentPort, mpsc::UnboundedReceiver<Deliver>) {
    let fresh = node.next_agent_id();
    let port = node.router().for_agent(&fresh);
    let (recipient, rx) = recorder(node);
    node.router().register_agent(fresh, recipient, None);
    (port, rx)
}

fn lock_x(agent: &AgentId, lock: &LockId) -> ServerRequest {
    ServerRequest::Lock {
        agent: agent.clone(),
        lock: lock.clone(),
        mode: Mode::X,
    }
}

/// Waits until `rx` is told it was granted `lock` on `node`.
async fn granted(rx: &mut mpsc::UnboundedReceiver<Deliver>, node: &NodeId, lock: &LockId) {
    loop {
        if let AgentMessage::Notice(n) = next_message(rx).await
            && &n.node == node
            && &n.lock == lock
            && matches!(n.state, EntryState::Granted(_))
        {
            return;
        }
    }
}

#[tokio::test]
async fn no_entry_is_created_for_an_agent_of_a_node_that_is_not_connected() {
    let a = cluster_node("a").await;
    let b = cluster_node("b").await;
    let mut events = a.subscribe_nodes();
    bounded("connect", b.connect(a.local_addr().unwrap()))
        .await
        .unwrap();
    let b_id = NodeId::new("b").unwrap();
    assert_eq!(
        bounded("a sees b", events.recv()).await,
        Some(NodeEvent::Up(b_id.clone()))
    );
    let l = LockId::from(["stray"]);
    let (of_b, mut of_b_rx) = stand_in(&b);
    assert!(bounded("disconnect", a.disconnect("b")).await.unwrap());
    // a handled b's down: b's agents are gone from a's table. A request of b's agent that
    // comes after that (late, or forged), or one of an agent of a node that never connected,
    // must not leave an entry that no node down will ever remove.
    let never = AgentId::new(NodeId::new("z").unwrap(), 1, 1);
    for agent in [of_b.agent(), &never] {
        a.inner
            .router
            .send_server(a.id(), lock_x(agent, &l))
            .unwrap();
        a.inner
            .router
            .send_server(
                a.id(),
                ServerRequest::Watch {
                    watcher: agent.clone(),
                    lock: LockId::from(["watched"]),
                },
            )
            .unwrap();
    }
    // A local agent's request after them: once it is granted, they were handled.
    let (local, mut local_rx) = stand_in(&a);
    let after = LockId::from(["after"]);
    local
        .send_server(a.id(), lock_x(local.agent(), &after))
        .unwrap();
    granted(&mut local_rx, a.id(), &after).await;
    let snap = a.snapshot().await.unwrap();
    for agent in [of_b.agent(), &never] {
        assert_eq!(snap.state(agent, &l), EntryState::Absent, "{agent}");
    }
    assert!(snap.lock(&l).is_none(), "{snap:?}");
    assert!(snap.lock(&LockId::from(["watched"])).is_none(), "{snap:?}");
    // A connected node's agents are served as before.
    bounded("reconnect", a.reconnect("b")).await.unwrap();
    bounded("connect", b.connect(a.local_addr().unwrap()))
        .await
        .unwrap();
    of_b.send_server(a.id(), lock_x(of_b.agent(), &l)).unwrap();
    granted(&mut of_b_rx, a.id(), &l).await;
}
