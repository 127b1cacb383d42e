//! A local node's life: start, serve requests through the actor, shut down; dropping the last
//! handle stops it too; an agent that disappears without a word loses its locks.

mod common;

use actix::prelude::*;
use common::net::ChannelAgent;
use locks_core::proto::{AgentMessage, EntryState, ServerRequest};
use locks_core::{Mode, lock_id};
use locks_server::embed::{AgentPort, NodeInternals};
use locks_server::{Error, Node, NodeConfig};
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(10);

/// An agent of `node` with its mailbox `tx`, registered on the node's thread (where its
/// actor runs), and the port it sends its requests through.
async fn agent(node: &Node, tx: tokio::sync::mpsc::UnboundedSender<AgentMessage>) -> AgentPort {
    let fresh = node.next_agent_id();
    let port = node.router().for_agent(&fresh);
    let router = node.router().clone();
    node.spawn(async move {
        let addr = ChannelAgent(tx).start();
        router.register_agent(fresh, addr.recipient(), None);
    })
    .await
    .unwrap();
    port
}

/// `agent`'s request for `lock` in `X`.
fn lock_x(agent: &locks_core::AgentId, lock: &locks_core::LockId) -> ServerRequest {
    ServerRequest::Lock {
        agent: agent.clone(),
        lock: lock.clone(),
        mode: Mode::X,
    }
}

#[tokio::test]
async fn a_request_through_the_router_is_answered_with_a_notice() {
    let node = Node::start(NodeConfig::new("life1")).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let port = agent(&node, tx).await;
    let agent = port.agent().clone();
    let lock = lock_id!["a"];
    port.send_server(node.id(), lock_x(&agent, &lock)).unwrap();
    let msg = tokio::time::timeout(BOUND, rx.recv())
        .await
        .unwrap()
        .unwrap();
    let AgentMessage::Notice(n) = msg else {
        panic!("a notice expected, got {msg:?}")
    };
    assert_eq!(
        (n.lock, n.state),
        (lock.clone(), EntryState::Granted(Mode::X))
    );
    assert_eq!(
        node.snapshot().await.unwrap().state(&agent, &lock),
        EntryState::Granted(Mode::X)
    );
}

#[tokio::test]
async fn an_agent_that_vanishes_loses_its_locks() {
    let node = Node::start(NodeConfig::new("life2")).await.unwrap();
    // The holder never registers a mailbox: the first notice to it fails, and the server
    // takes that as its death.
    let holder = node.next_agent_id();
    let holder_port = node.router().for_agent(&holder);
    let holder = holder.into_id();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let waiter = agent(&node, tx).await;
    let lock = lock_id!["a"];
    holder_port
        .send_server(node.id(), lock_x(&holder, &lock))
        .unwrap();
    waiter
        .send_server(node.id(), lock_x(waiter.agent(), &lock))
        .unwrap();
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let msg = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap()
            .unwrap();
        if matches!(msg, AgentMessage::Notice(ref n) if n.state == EntryState::Granted(Mode::X)) {
            break;
        }
    }
    let snap = node.snapshot().await.unwrap();
    assert_eq!(snap.state(&holder, &lock), EntryState::Absent);
}

#[tokio::test]
async fn shutdown_stops_the_node_and_later_calls_fail() {
    let node = Node::start(NodeConfig::new("life3")).await.unwrap();
    let other = node.clone();
    assert!(node.is_running());
    tokio::time::timeout(BOUND, node.shutdown()).await.unwrap();
    assert!(!other.is_running());
    assert!(matches!(other.snapshot().await, Err(Error::Stopped)));
    assert!(matches!(
        other.spawn(async { 1 }).await,
        Err(Error::Stopped)
    ));
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_node() {
    let node = Node::start(NodeConfig::new("life4")).await.unwrap();
    let router = node.router().clone();
    assert_eq!(node.spawn(async { 41 + 1 }).await.unwrap(), 42);
    assert!(router.server_running());
    // Dropping joins the node's thread, so the system has stopped when `drop` returns.
    tokio::task::spawn_blocking(move || drop(node))
        .await
        .unwrap();
    assert!(!router.server_running());
}

#[tokio::test]
async fn a_bad_node_name_is_an_error() {
    assert!(matches!(
        Node::start(NodeConfig::new("")).await,
        Err(Error::InvalidName(_))
    ));
    assert!(matches!(
        Node::start(NodeConfig::new("has space")).await,
        Err(Error::InvalidName(_))
    ));
}
