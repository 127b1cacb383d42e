//! A clustered node grants nothing for its start-delay: a restarted node must not grant at once
//! what its previous incarnation may have granted to holders that still believe in it. A
//! local-only node has no remote holders and serves at once. Every wait is bounded.

mod common;

use actix::prelude::*;
use common::net::{loopback, within};
use locks_core::proto::ServerRequest;
use locks_core::{LockId, Mode};
use locks_server::embed::{AgentPort, Deliver, NodeInternals};
use locks_server::{Node, NodeConfig};
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(20);

/// A stand-in agent that takes whatever it is sent (an agent the router does not know is
/// taken for dead, and its locks released).
struct Sink;

impl Actor for Sink {
    type Context = Context<Self>;
}

impl Handler<Deliver> for Sink {
    type Result = ();

    fn handle(&mut self, _msg: Deliver, _ctx: &mut Self::Context) {}
}

/// A lock request of a new stand-in agent registered on `node`, and the port of that agent
/// (through which it is sent).
fn lock_request(node: &Node, lock: &LockId) -> (AgentPort, ServerRequest) {
    let fresh = node.next_agent_id();
    let port = node.router().for_agent(&fresh);
    let addr = Sink::start_in_arbiter(node.arbiter(), |_| Sink);
    node.router().register_agent(fresh, addr.recipient(), None);
    let request = ServerRequest::Lock {
        agent: port.agent().clone(),
        lock: lock.clone(),
        mode: Mode::X,
    };
    (port, request)
}

/// Sends the request of [`lock_request`] to `node`'s lock server, as its agent.
fn send(node: &Node, (port, request): (AgentPort, ServerRequest)) {
    port.send_server(node.id(), request).unwrap();
}

#[tokio::test]
async fn a_clustered_node_holds_requests_back_for_its_start_delay() {
    // Long enough that the check below cannot race it on a slow machine.
    let config = NodeConfig::new("restarted")
        .listen(loopback())
        .cookie("start-delay")
        .start_delay(Duration::from_secs(600));
    let node = within(BOUND, "start", Node::start(config)).await.unwrap();
    let l = LockId::from(["l"]);
    send(&node, lock_request(&node, &l));
    // The snapshot is answered after the request was handled (one mailbox, in order).
    let snap = within(BOUND, "snapshot", node.snapshot()).await.unwrap();
    assert!(
        snap.lock(&l).is_none(),
        "granted during the start-delay: {snap:?}"
    );
    // The same request on a node without a start-delay is granted by then.
    let config = NodeConfig::new("fresh")
        .listen(loopback())
        .cookie("start-delay")
        .start_delay(Duration::ZERO);
    let other = within(BOUND, "start", Node::start(config)).await.unwrap();
    send(&other, lock_request(&other, &l));
    let snap = within(BOUND, "snapshot", other.snapshot()).await.unwrap();
    assert_eq!(snap.lock(&l).expect("granted at once").granted.len(), 1);
}

#[tokio::test]
async fn requests_held_back_are_served_in_order_once_the_delay_has_passed() {
    let config = NodeConfig::new("served")
        .listen(loopback())
        .cookie("start-delay")
        .start_delay(Duration::from_millis(200));
    let node = within(BOUND, "start", Node::start(config)).await.unwrap();
    let l = LockId::from(["l"]);
    let (first, second) = (lock_request(&node, &l), lock_request(&node, &l));
    let (a1, a2) = (first.0.agent().clone(), second.0.agent().clone());
    send(&node, first);
    send(&node, second);
    within(BOUND, "served", async {
        loop {
            let snap = node.snapshot().await.unwrap();
            if let Some(lock) = snap.lock(&l) {
                assert_eq!(lock.granted.len(), 1);
                assert_eq!(lock.granted[0].agent, a1, "first come, first served");
                assert_eq!(lock.waiting[0].agent, a2);
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_local_only_node_serves_at_once() {
    let node = within(BOUND, "start", Node::start(NodeConfig::new("alone")))
        .await
        .unwrap();
    let l = LockId::from(["l"]);
    send(&node, lock_request(&node, &l));
    let snap = within(BOUND, "snapshot", node.snapshot()).await.unwrap();
    assert_eq!(snap.lock(&l).expect("granted at once").granted.len(), 1);
}
