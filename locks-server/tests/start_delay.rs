//! A clustered node grants nothing for its start-delay: a restarted node must not grant at once
//! what its previous incarnation may have granted to holders that still believe in it. A
//! local-only node has no remote holders and serves at once. Every wait is bounded.

mod common;

use actix::prelude::*;
use common::net::{loopback, within};
use locks_core::proto::ServerRequest;
use locks_core::{LockId, Mode};
use locks_server::embed::sim;
use locks_server::embed::{Deliver, NodeInternals};
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

/// A lock request of a new stand-in agent registered on `node`.
fn lock_request(node: &Node, lock: &LockId) -> ServerRequest {
    let agent = sim::next_agent_id(node);
    let addr = Sink::start_in_arbiter(node.arbiter(), |_| Sink);
    sim::router(node).register_agent(agent.clone(), addr.recipient());
    ServerRequest::Lock {
        agent,
        lock: lock.clone(),
        mode: Mode::X,
    }
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
    sim::router(&node)
        .send_server(node.id(), lock_request(&node, &l))
        .unwrap();
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
    sim::router(&other)
        .send_server(other.id(), lock_request(&other, &l))
        .unwrap();
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
    let (ServerRequest::Lock { agent: a1, .. }, ServerRequest::Lock { agent: a2, .. }) =
        (&first, &second)
    else {
        unreachable!()
    };
    let (a1, a2) = (a1.clone(), a2.clone());
    sim::router(&node).send_server(node.id(), first).unwrap();
    sim::router(&node).send_server(node.id(), second).unwrap();
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
    sim::router(&node)
        .send_server(node.id(), lock_request(&node, &l))
        .unwrap();
    let snap = within(BOUND, "snapshot", node.snapshot()).await.unwrap();
    assert_eq!(snap.lock(&l).expect("granted at once").granted.len(), 1);
}
