//! A relay of another node's handshake gains nothing: a third party that takes one dial of
//! node `b` (it listens where `b` dials, as on a dead peer's port) and relays `b`'s handshake
//! to node `c` ends up with a connection `c` holds to be `b`'s, but every frame after the
//! handshake must carry the tag of the session's key, which needs the cookie. Its first frame
//! of its own ends the connection, and nothing it sent is acted on. On 127.0.0.1, every wait
//! bounded.

mod common;

use common::net::{expect_event, id, init_tracing, loopback, within};
use futures::{SinkExt, StreamExt};
use locks_core::proto::{Envelope, Message, ServerRequest};
use locks_core::{AgentId, Mode, lock_id};
use locks_server::transport::net::PeerFrame;
use locks_server::transport::net::frame::{encode_frame, length_codec};
use locks_server::{Node, NodeConfig, NodeEvent};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;

const BOUND: Duration = Duration::from_secs(20);
const COOKIE: &str = "relay-cookie";
const MAX: usize = 1 << 16;

#[tokio::test]
async fn a_relayed_handshake_gives_the_relay_no_link() {
    init_tracing();
    // c grants at once, and only the tag check can end the relay's link within the bound: the
    // relay answers no ping, but c's heartbeat and lease outlast the test. A lock c granted
    // would outlive the link (held for the lock-delay, also longer than the test).
    let config = |name: &str| NodeConfig::new(name).listen(loopback()).cookie(COOKIE);
    let b = within(BOUND, "b starts", Node::start(config("b")))
        .await
        .unwrap();
    let c = config("c")
        .heartbeat(Duration::from_secs(10), 3 * BOUND)
        .start_delay(Duration::ZERO);
    let c = within(BOUND, "c starts", Node::start(c)).await.unwrap();
    let mut c_events = c.subscribe_nodes();

    // The relay: it takes b's dial, and dials c in b's name with b's own frames.
    let relay = TcpListener::bind(loopback()).await.unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let dial = tokio::spawn({
        let b = b.clone();
        async move { b.connect(relay_addr).await }
    });
    let (from_b, _) = within(BOUND, "b dials", relay.accept()).await.unwrap();
    let mut from_b = Framed::new(from_b, length_codec(MAX));
    let to_c = TcpStream::connect(c.local_addr().unwrap()).await.unwrap();
    let mut to_c = Framed::new(to_c, length_codec(MAX));
    // b's Hello to c, c's Hello to b, b's proof to c: c has its proof of the cookie.
    let hello_b = within(BOUND, "b's hello", from_b.next())
        .await
        .unwrap()
        .unwrap();
    to_c.send(hello_b.freeze()).await.unwrap();
    let hello_c = within(BOUND, "c's hello", to_c.next())
        .await
        .unwrap()
        .unwrap();
    from_b.send(hello_c.freeze()).await.unwrap();
    let proof_b = within(BOUND, "b's proof", from_b.next())
        .await
        .unwrap()
        .unwrap();
    to_c.send(proof_b.freeze()).await.unwrap();
    expect_event(&mut c_events, NodeEvent::Up(id("b"))).await;

    // Now a lock in the name of b's agent: without the session's tag.
    let forged = Envelope::new(Message::Server(ServerRequest::Lock {
        agent: AgentId::new(id("b"), 1, 1),
        lock: lock_id!["db", "x"],
        mode: Mode::X,
    }));
    let frame = encode_frame(&PeerFrame::Payload(forged), MAX).unwrap();
    to_c.send(frame).await.unwrap();
    expect_event(&mut c_events, NodeEvent::Down(id("b"))).await;
    let snapshot = within(BOUND, "c's table", c.snapshot()).await.unwrap();
    assert!(snapshot.locks.is_empty(), "{snapshot:?}");
    dial.abort();
}
