//! `RaiseVersions`: the table raises its versions whoever asks, and answers only a holder of
//! the lock named, after the raise; on a node with a data directory the raise outlives a
//! restart, and the answer comes through the router like any other.

mod common;

use actix::prelude::*;
use common::net::ChannelAgent;
use common::*;
use locks_core::proto::{AgentMessage, EntryState, ServerRequest};
use locks_core::{LockId, Mode, lock_id};
use locks_server::embed::NodeInternals;
use locks_server::{Node, NodeConfig};
use std::path::PathBuf;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(10);

fn raise(n: u64, lock: &LockId, floor: u64) -> ServerRequest {
    ServerRequest::RaiseVersions {
        agent: t(n),
        lock: lock.clone(),
        floor,
    }
}

#[test]
fn a_raise_moves_the_versions_up_and_only_a_holder_hears_of_it() {
    let mut tb = table();
    let l = lock_id!["g"];
    lock(&mut tb, 1, &l, Mode::X);
    let waiting = lock(&mut tb, 2, &l, Mode::X);
    assert!(
        matches!(&waiting[..], [(_, AgentMessage::Notice(n))] if n.state == EntryState::Waiting(Mode::X))
    );
    // Nobody who does not hold the lock hears of it; the raise stands all the same.
    assert!(tb.handle(raise(2, &l, 1000)).is_empty());
    assert!(tb.handle(raise(9, &l, 2000)).is_empty());
    assert_eq!(tb.version(), 2000);
    let answer = tb.handle(raise(1, &l, 3000));
    assert_eq!(
        answer,
        vec![(
            t(1),
            AgentMessage::Raised {
                node: node(),
                lock: l.clone(),
                floor: 3000
            }
        )]
    );
    // Never down, and no queue changed: the next grant (to the waiter) is above the floor.
    assert!(tb.handle(raise(1, &l, 5)).len() == 1);
    assert_eq!(tb.version(), 3000);
    let fx = unlock(&mut tb, 1, &l);
    let granted = fx.iter().find_map(|(to, msg)| match msg {
        AgentMessage::Notice(n) if to == &t(2) && n.state == EntryState::Granted(Mode::X) => {
            Some(n.version)
        }
        _ => None,
    });
    assert!(granted.is_some_and(|v| v > 3000), "{fx:?}");
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn a_raise_is_answered_through_the_router_and_outlives_a_restart() {
    let dir = TempDir(std::env::temp_dir().join(format!("locks-raise-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let node = Node::start(NodeConfig::new("raise").data_dir(&dir.0))
        .await
        .unwrap();
    let fresh = node.next_agent_id();
    let port = node.router().for_agent(&fresh);
    let agent = port.agent().clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let router = node.router().clone();
    node.spawn(async move {
        router.register_agent(fresh, ChannelAgent(tx).start().recipient(), None);
    })
    .await
    .unwrap();
    let l = lock_id!["g"];
    let send = |request| port.send_server(node.id(), request).unwrap();
    send(ServerRequest::Lock {
        agent: agent.clone(),
        lock: l.clone(),
        mode: Mode::X,
    });
    let granted = tokio::time::timeout(BOUND, rx.recv()).await.unwrap();
    assert!(
        matches!(granted, Some(AgentMessage::Notice(_))),
        "{granted:?}"
    );
    // Far above what the node hands out by its clock, and what it would start from.
    let floor = node.local_table().read_lock(&l, |t| t.version()) + (1 << 44);
    send(ServerRequest::RaiseVersions {
        agent: agent.clone(),
        lock: l.clone(),
        floor,
    });
    let answer = tokio::time::timeout(BOUND, rx.recv()).await.unwrap();
    assert_eq!(
        answer,
        Some(AgentMessage::Raised {
            node: node.id().clone(),
            lock: l.clone(),
            floor
        })
    );
    node.shutdown().await;
    let node = Node::start(NodeConfig::new("raise").data_dir(&dir.0))
        .await
        .unwrap();
    let version = node.local_table().read_lock(&l, |t| t.version());
    assert!(version > floor, "{version} after a raise to {floor}");
    node.shutdown().await;
}
