//! Lock servers across nodes over TCP (127.0.0.1, ephemeral ports), driven by stand-in agents
//! (actors that record what they are sent, whose requests go through their own agent ports): a
//! node going down releases its agents' locks on the others, and a message for an agent a node
//! does not know makes the sender release that agent. Every wait is bounded by `BOUND`. (That a
//! request of an agent whose node is not connected leaves no entry needs such a request, which
//! nothing outside the crate can make: it is a unit test of the node, `src/node/tests.rs`.)

mod common;

use actix::prelude::*;
use common::net::{id, init_tracing, loopback, within};
use locks_core::proto::{AgentMessage, EntryState, Rejection, ServerRequest};
use locks_core::{AgentId, LockId, Mode};
use locks_server::NodeEvent;
use locks_server::embed::{AgentPort, Deliver, NodeInternals};
use locks_server::{Node, NodeConfig, TableSnapshot};
use locks_testing::wait::poll;
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;

const BOUND: Duration = Duration::from_secs(20);

async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    within(BOUND, what, f).await
}

async fn start(name: &str) -> Node {
    let config = NodeConfig::new(name)
        .listen(loopback())
        .cookie("server-test");
    bounded("start", Node::start(config)).await.unwrap()
}

/// Two connected nodes `a` and `b` (both ends registered).
async fn pair() -> (Node, Node) {
    let a = start("a").await;
    let b = start("b").await;
    let mut events = a.subscribe_nodes();
    bounded("connect", b.connect(a.local_addr().unwrap()))
        .await
        .unwrap();
    assert_eq!(
        bounded("a sees b", events.recv()).await,
        Some(NodeEvent::Up(id("b")))
    );
    (a, b)
}

/// A stand-in agent: records everything delivered to it.
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

/// A stand-in agent registered on `node`, the port it sends its requests through, and what
/// it receives.
struct StandIn {
    id: AgentId,
    port: AgentPort,
    inbox: mpsc::UnboundedReceiver<Deliver>,
    seen: Vec<Deliver>,
    _addr: Addr<Recorder>,
}

fn stand_in(node: &Node) -> StandIn {
    let (tx, inbox) = mpsc::unbounded_channel();
    let addr = Recorder::start_in_arbiter(node.arbiter(), move |_| Recorder(tx));
    let fresh = node.next_agent_id();
    let id = fresh.id().clone();
    let port = node.router().for_agent(&fresh);
    node.router()
        .register_agent(fresh, addr.clone().recipient(), None);
    StandIn {
        id,
        port,
        inbox,
        seen: Vec::new(),
        _addr: addr,
    }
}

impl StandIn {
    /// Waits until something matching `pred` has been delivered (in any order with the rest).
    async fn wait(&mut self, what: &str, pred: impl Fn(&Deliver) -> bool) {
        let what = format!("{}: {what}", self.id);
        bounded(&what, async {
            while !self.seen.iter().any(&pred) {
                match self.inbox.recv().await {
                    Some(msg) => self.seen.push(msg),
                    None => panic!("{what}: the stand-in stopped"),
                }
            }
        })
        .await;
    }

    /// Waits for a notice that this agent was granted `lock` on `node`.
    async fn granted(&mut self, node: &str, lock: &LockId) {
        self.wait(&format!("granted {lock} on {node}"), |m| {
            matches!(m, Deliver::Message(AgentMessage::Notice(n))
                if n.node.as_str() == node
                    && &n.lock == lock
                    && matches!(n.state, EntryState::Granted(_)))
        })
        .await;
    }

    /// Waits for the node-down news of `node`.
    async fn node_down(&mut self, node: &str) {
        self.wait(
            &format!("{node} down"),
            |m| matches!(m, Deliver::NodeDown(n, _) if n.as_str() == node),
        )
        .await;
    }
}

fn lock(agent: &AgentId, lock: &LockId) -> ServerRequest {
    ServerRequest::Lock {
        agent: agent.clone(),
        lock: lock.clone(),
        mode: Mode::X,
    }
}

/// Polls `node`'s table until `done` holds (bounded).
async fn wait_table(node: &Node, what: &str, done: impl Fn(&TableSnapshot) -> bool) {
    let done = &done;
    poll(BOUND, what, Duration::ZERO, move || async move {
        let snap = node.snapshot().await.unwrap();
        if done(&snap) { Ok(()) } else { Err(snap) }
    })
    .await;
}

#[tokio::test]
async fn a_node_going_down_releases_its_agents_locks_on_the_others() {
    init_tracing();
    let (a, b) = pair().await;
    let l = LockId::from(["cluster", "l"]);
    let mut remote = stand_in(&b);
    let mut local = stand_in(&a);
    remote
        .port
        .send_server(&id("a"), lock(&remote.id, &l))
        .unwrap();
    remote.granted("a", &l).await;
    local
        .port
        .send_server(&id("a"), lock(&local.id, &l))
        .unwrap();
    wait_table(&a, "local waits", |s| s.state(&local.id, &l).is_waiting()).await;

    let mut events = a.subscribe_nodes();
    assert_eq!(
        bounded("up", events.recv()).await,
        Some(NodeEvent::Up(id("b"))),
        "a new subscription starts with the connected nodes"
    );
    bounded("b stops", b.shutdown()).await;
    assert_eq!(
        bounded("down", events.recv()).await,
        Some(NodeEvent::Down(id("b")))
    );
    // b's agent lost its lock on a, so a's agent got it; a's agents heard of the down.
    local.granted("a", &l).await;
    local.node_down("b").await;
    let snap = a.snapshot().await.unwrap();
    assert_eq!(snap.state(&remote.id, &l), EntryState::Absent);
    assert_eq!(snap.state(&local.id, &l), EntryState::Granted(Mode::X));
}

#[tokio::test]
async fn a_partition_releases_the_other_sides_agents_on_both_nodes() {
    init_tracing();
    let (a, b) = pair().await;
    let (la, lb) = (LockId::from(["on-a"]), LockId::from(["on-b"]));
    let mut of_b = stand_in(&b);
    let mut of_a = stand_in(&a);
    of_b.port
        .send_server(&id("a"), lock(&of_b.id, &la))
        .unwrap();
    of_a.port
        .send_server(&id("b"), lock(&of_a.id, &lb))
        .unwrap();
    of_b.granted("a", &la).await;
    of_a.granted("b", &lb).await;

    assert!(bounded("disconnect", a.disconnect("b")).await.unwrap());
    // `disconnect` returns after a handled the down: b's agent is gone from a's table, and
    // its lock is held by nobody (a ghost) until the lock-delay has passed.
    let snap = a.snapshot().await.unwrap();
    assert_eq!(snap.state(&of_b.id, &la), EntryState::Absent, "{snap:?}");
    let entries = &snap.lock(&la).expect("kept for the lock-delay").entries;
    assert!(
        entries
            .iter()
            .all(|e| e.agent.is_ghost() && e.state == EntryState::Granted(Mode::X)),
        "{snap:?}"
    );
    wait_table(&a, "b's agent's ghost released on a", |s| {
        s.lock(&la).is_none()
    })
    .await;
    of_a.node_down("b").await;
    of_b.node_down("a").await;
    wait_table(&b, "a's agent released on b", |s| s.lock(&lb).is_none()).await;
    // Requests to a node that is down fail at once.
    assert!(
        of_b.port
            .send_server(&id("a"), lock(&of_b.id, &la))
            .is_err()
    );
}

#[tokio::test]
async fn a_message_for_an_agent_the_peer_does_not_know_releases_that_agent() {
    init_tracing();
    let (a, b) = pair().await;
    let l = LockId::from(["gone"]);
    let mut holder = stand_in(&a);
    holder
        .port
        .send_server(&id("a"), lock(&holder.id, &l))
        .unwrap();
    holder.granted("a", &l).await;
    // An agent id of b that no agent on b answers to: it died without saying goodbye. Its
    // request queues behind the holder, and a tells it so; b answers that it does not know the
    // agent, and a releases it. Without that answer its entry would stay forever.
    let ghost = b.next_agent_id();
    let ghost_port = b.router().for_agent(&ghost);
    let ghost = ghost.into_id();
    let before = a.snapshot().await.unwrap().version;
    ghost_port.send_server(&id("a"), lock(&ghost, &l)).unwrap();
    // Two changes of the table: the ghost queued, then removed.
    wait_table(&a, "the ghost queued and released", |s| {
        s.version >= before + 2 && s.state(&ghost, &l) == EntryState::Absent
    })
    .await;
    let snap = a.snapshot().await.unwrap();
    assert_eq!(snap.state(&holder.id, &l), EntryState::Granted(Mode::X));
    assert_eq!(a.nodes().len(), 2, "the connection is unaffected");
}

#[tokio::test]
async fn a_notice_too_large_for_a_frame_is_refused_to_its_agent_and_the_link_stays_up() {
    init_tracing();
    // a sends frames of 1 KiB at most: a queue of a few dozen agents does not fit.
    let config = NodeConfig::new("a")
        .listen(loopback())
        .cookie("server-test")
        .max_frame(1024);
    let a = bounded("start", Node::start(config)).await.unwrap();
    let b = start("b").await;
    let mut events = b.subscribe_nodes();
    bounded("connect", b.connect(a.local_addr().unwrap()))
        .await
        .unwrap();
    assert_eq!(
        bounded("b sees a", events.recv()).await,
        Some(NodeEvent::Up(id("a")))
    );
    let l = LockId::from(["big"]);
    let mut holder = stand_in(&b);
    holder
        .port
        .send_server(&id("a"), lock(&holder.id, &l))
        .unwrap();
    holder.granted("a", &l).await;
    // Agents of b queue behind the holder; a waiter is told the whole queue, which soon does
    // not fit in a frame.
    let mut waiters: Vec<StandIn> = (0..100).map(|_| stand_in(&b)).collect();
    for w in &waiters {
        w.port.send_server(&id("a"), lock(&w.id, &l)).unwrap();
    }
    let last = waiters.last_mut().unwrap();
    last.wait("refused, or the link down", |m| {
        matches!(m, Deliver::NodeDown(..))
            || matches!(m, Deliver::Message(AgentMessage::Rejected { lock, reason: Rejection::QueueTooLarge, .. }) if *lock == l)
    })
    .await;
    assert!(
        !last.seen.iter().any(|m| matches!(m, Deliver::NodeDown(..))),
        "the link went down: {:?}",
        last.seen
    );
    // Its request was withdrawn on a, so it does not hold a place it cannot be told about.
    let last_id = last.id.clone();
    wait_table(&a, "the refused request withdrawn", |s| {
        s.state(&last_id, &l) == EntryState::Absent
    })
    .await;
    // The connection is unaffected: no node event, and lock traffic still flows.
    assert_eq!(events.try_recv(), None);
    assert_eq!(a.nodes().len(), 2);
    let other = LockId::from(["small"]);
    holder
        .port
        .send_server(&id("a"), lock(&holder.id, &other))
        .unwrap();
    holder.granted("a", &other).await;
    let snap = a.snapshot().await.unwrap();
    assert_eq!(snap.state(&holder.id, &l), EntryState::Granted(Mode::X));
}
