//! Refused connections cannot flood the log: an attack of many bad connections on a node
//! (127.0.0.1, ephemeral ports) writes a bounded number of WARN lines. The whole output of
//! the test binary is captured (a global subscriber with a writer of its own), so this file
//! holds one test.

mod common;

use common::logs::{Capture, send_and_wait_closed};
use common::net::{id, loopback, within};
use futures::{SinkExt, StreamExt};
use locks_core::proto::PROTOCOL_VERSION;
use locks_server::transport::net::frame::{Hello, decode_frame, encode_frame, length_codec};
use locks_server::transport::net::{Cookie, Handshake, PeerFrame, Role};
use locks_server::{Node, NodeConfig};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

const BOUND: Duration = Duration::from_secs(20);
/// Bad connections of each kind.
const N: usize = 30;

/// A handshake as initiator with the wrong cookie, until the node closes the connection.
async fn wrong_cookie(addr: SocketAddr, n: usize) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let mut framed = Framed::new(stream, length_codec(1024));
    let name = format!("x{n}");
    let deadline = Instant::now() + BOUND;
    let (mut hs, mut step) = Handshake::new(
        Role::Initiator,
        id(&name),
        Cookie::from("wrong"),
        [n as u8; 32],
        deadline,
    );
    loop {
        for frame in &step.send {
            if framed
                .send(encode_frame(frame, 1024).unwrap())
                .await
                .is_err()
            {
                return;
            }
        }
        if step.outcome.is_some() {
            return;
        }
        match within(BOUND, "node's frame", framed.next()).await {
            Some(Ok(bytes)) => {
                step = hs.on_frame(decode_frame(&bytes, 1024).unwrap(), |_| false);
            }
            _ => return,
        }
    }
}

#[tokio::test]
async fn an_attack_of_bad_connections_writes_a_bounded_number_of_warnings() {
    let capture = Capture::install();
    let started = Instant::now();

    let node = within(
        BOUND,
        "start",
        Node::start(
            NodeConfig::new("a")
                .listen(loopback())
                .cookie("secret")
                .handshake_timeout(Duration::from_millis(300)),
        ),
    )
    .await
    .unwrap();
    let addr = node.local_addr().unwrap();
    let mut refusals = node.handshake_refusals();

    let future_hello = encode_frame(
        &PeerFrame::Hello(Hello {
            version: PROTOCOL_VERSION + 1,
            node: id("future"),
            nonce: [7; 32],
        }),
        1024,
    )
    .unwrap();
    for n in 0..N {
        // Garbage in a well-framed packet.
        send_and_wait_closed(addr, &[0, 0, 0, 5, 0xde, 0xad, 0xbe, 0xef, 0x01]).await;
        // A huge length prefix.
        send_and_wait_closed(addr, &[0xff, 0xff, 0xff, 0xf0, 1, 2, 3]).await;
        // Another protocol version.
        send_and_wait_closed(addr, &future_hello).await;
        // The wrong cookie.
        wrong_cookie(addr, n).await;
    }
    // Idle connections, held open until the node gives them up.
    let mut idle = Vec::new();
    for _ in 0..N {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    let expected = (5 * N) as u64;
    let seen = within(
        BOUND,
        "every bad connection refused",
        refusals.wait_for(|r| r.total() >= expected),
    )
    .await
    .map(|r| r.clone())
    .expect("the node runs");
    drop(idle);
    within(BOUND, "shutdown", node.shutdown()).await;

    // At most one warning per reason per interval: the reasons here are a handful (malformed,
    // wrong version, wrong cookie, timeout, closed), however many connections there were.
    let intervals = 1 + started.elapsed().as_secs() / locks_server::embed::WARN_INTERVAL.as_secs();
    let warnings = capture.lines_at("WARN");
    assert!(
        warnings.len() as u64 <= 6 * intervals,
        "{} warnings for {seen:?}:\n{}",
        warnings.len(),
        warnings.join("\n")
    );
    // The rest are still there, at DEBUG.
    let refused = capture
        .lines_at("DEBUG")
        .iter()
        .filter(|l| l.contains("handshake refused"))
        .count();
    assert!(
        refused as u64 + warnings.len() as u64 >= expected,
        "{refused}"
    );
}
