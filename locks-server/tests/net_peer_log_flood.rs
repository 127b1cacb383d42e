//! A connected peer cannot flood the log: a stream of messages the node refuses, and a loop of
//! reconnects, write a bounded number of lines above DEBUG, each reason at most once per
//! interval with the count held back. The whole output of the test binary is captured (a
//! global subscriber with a writer of its own), so this file holds one test.

mod common;

use common::logs::Capture;
use common::net::{expect_event, id, loopback, within};
use locks_core::proto::{AgentMessage, EntryState, LockNotice, Message};
use locks_core::{AgentId, lock_id};
use locks_server::{Node, NodeConfig, NodeEvent};
use locks_testing::forged_peer::RawPeer;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(20);
const COOKIE: &str = "flood";

#[tokio::test]
async fn a_peer_that_misbehaves_in_a_loop_writes_a_bounded_number_of_lines() {
    let capture = Capture::install();
    let node = within(
        BOUND,
        "start",
        Node::start(NodeConfig::new("a").listen(loopback()).cookie(COOKIE)),
    )
    .await
    .unwrap();
    let addr = node.local_addr().unwrap();

    // Notices in the name of another node's server, with a forged line in the lock key.
    let mut peer = RawPeer::connect(addr, "c", COOKIE, BOUND).await;
    for serial in 0..2000 {
        peer.send(Message::Agent {
            to: AgentId::new(id("a"), 1, serial),
            msg: AgentMessage::Notice(LockNotice {
                node: id("b"),
                lock: lock_id!["x\nERROR forged"],
                version: 1,
                state: EntryState::Absent,
                queue: None,
                note: None,
            }),
        });
    }
    peer.sync().await;
    let mut events = node.subscribe_nodes();
    drop(peer);
    expect_event(&mut events, NodeEvent::Down(id("c"))).await;

    // Reconnects, each waited for until the node has it up, then down.
    for _ in 0..20 {
        let peer = RawPeer::connect(addr, "c", COOKIE, BOUND).await;
        expect_event(&mut events, NodeEvent::Up(id("c"))).await;
        drop(peer);
        expect_event(&mut events, NodeEvent::Down(id("c"))).await;
    }

    let warnings = capture.lines("WARN", "a");
    let refused: Vec<&String> = warnings
        .iter()
        .filter(|l| l.contains("a message from a peer refused"))
        .collect();
    assert_eq!(refused.len(), 1, "{warnings:#?}");
    assert!(
        refused[0].contains("reason=\"foreign_server\""),
        "{refused:?}"
    );
    let infos = capture.lines("INFO", "a");
    for what in ["node up", "node connection established"] {
        let n = infos
            .iter()
            .filter(|l| l.ends_with(what) || l.contains(&format!("{what} ")))
            .count();
        assert!(n <= 2, "{what}: {n} lines: {infos:#?}");
    }
    // Nothing a peer sent shows unescaped.
    let all = capture.lines_at("DEBUG");
    assert!(
        !all.iter().any(|l| l.starts_with("ERROR forged")),
        "{all:#?}"
    );
    assert!(
        all.iter()
            .any(|l| l.contains("a message from a peer refused")),
        "the rest is at DEBUG"
    );
    node.shutdown().await;
}
