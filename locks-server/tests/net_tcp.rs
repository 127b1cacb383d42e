//! The transport over real TCP on 127.0.0.1 (ephemeral ports), on tokio's current-thread
//! runtime like the Node's. Every wait is bounded by `BOUND`; no test asserts a duration.

mod common;

use common::net::{RawLink, id as node, init_tracing, loopback, raw_handshake, within};
use futures::{SinkExt, StreamExt};
use locks_core::proto::{Envelope, Message, PROTOCOL_VERSION, ServerRequest};
use locks_core::{AgentId, LockId, Mode, NodeId};
use locks_server::transport::net::frame::{Hello, decode_frame, encode_frame, length_codec};
use locks_server::transport::net::{
    Connection, DialError, DownReason, HeartbeatConfig, Listener, NameInUse, NetConfig, PeerFrame,
    Refusal, RefusalCode, Role, SendError, connect, establish,
};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

const BOUND: Duration = Duration::from_secs(10);
const MAX: usize = common::net::MAX_FRAME;

async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    within(BOUND, what, f).await
}

fn config(name: &str, cookie: &str) -> NetConfig {
    NetConfig::new(node(name), cookie)
}

fn no_names() -> NameInUse {
    Arc::new(|_: &NodeId| false)
}

fn envelope(serial: u64) -> Envelope {
    Envelope::new(Message::Server(ServerRequest::Lock {
        agent: AgentId::new(node("x"), 1, serial),
        lock: LockId::from(["db", "t"]),
        mode: Mode::S,
    }))
}

/// An accepted raw stream and the acceptor's `establish` running on it.
async fn raw_acceptor(
    config: NetConfig,
) -> (
    SocketAddr,
    tokio::task::JoinHandle<Result<locks_server::transport::net::Connection, Refusal>>,
) {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        establish(stream, Role::Acceptor, &config, |_: &NodeId| false).await
    });
    (addr, task)
}

/// Node `b` (cookie `secret`) dials `addr`: its side of the connection, not started yet.
async fn connect_b(addr: SocketAddr) -> Connection {
    bounded(
        "connect",
        connect(addr, &config("b", "secret"), |_: &NodeId| false),
    )
    .await
    .unwrap()
}

/// Peer `b` (cookie `secret`) dials `addr` and runs the handshake by hand, so that the test
/// controls every frame after it.
async fn hand_run_peer_b(addr: SocketAddr) -> RawLink {
    let stream = TcpStream::connect(addr).await.unwrap();
    let deadline = Instant::now() + BOUND;
    let handshake = raw_handshake(stream, Role::Initiator, "b", "secret", [0x5a; 32], deadline);
    bounded("handshake", handshake).await
}

/// Reads frames until the peer closes; returns the decoded frames.
async fn read_until_closed(framed: &mut Framed<TcpStream, LengthDelimitedCodec>) -> Vec<PeerFrame> {
    let mut frames = Vec::new();
    while let Some(Ok(bytes)) = framed.next().await {
        frames.push(decode_frame(&bytes, MAX).unwrap());
    }
    frames
}

#[tokio::test]
async fn two_nodes_handshake_and_exchange_envelopes_both_ways() {
    init_tracing();
    let mut listener = Listener::bind(loopback(), config("a", "secret"), no_names())
        .await
        .unwrap();
    let addr = listener.local_addr();
    let conn_b = connect_b(addr).await;
    let conn_a = bounded("accept", listener.accept()).await.unwrap();
    assert_eq!(
        (conn_b.peer(), conn_b.role()),
        (&node("a"), Role::Initiator)
    );
    assert_eq!((conn_a.peer(), conn_a.role()), (&node("b"), Role::Acceptor));
    let mut link_a = conn_a.start();
    let mut link_b = conn_b.start();

    const N: u64 = 300;
    for i in 0..N {
        link_a.sender.send(&envelope(i)).await.unwrap();
        link_b.sender.try_send(&envelope(1000 + i)).unwrap();
    }
    for i in 0..N {
        assert_eq!(
            bounded("b receives", link_b.incoming.recv()).await,
            Some(envelope(i))
        );
        assert_eq!(
            bounded("a receives", link_a.incoming.recv()).await,
            Some(envelope(1000 + i))
        );
    }

    // Closing writes what is queued first.
    for i in 0..10 {
        link_a.sender.try_send(&envelope(i)).unwrap();
    }
    link_a.sender.close();
    assert!(matches!(
        link_a.sender.try_send(&envelope(99)),
        Err(SendError::Closed)
    ));
    for i in 0..10 {
        assert_eq!(
            bounded("drain", link_b.incoming.recv()).await,
            Some(envelope(i))
        );
    }
    assert_eq!(
        bounded("b incoming ends", link_b.incoming.recv()).await,
        None
    );
    assert_eq!(
        bounded("a down", link_a.down).await,
        Ok(DownReason::ClosedLocally)
    );
    assert_eq!(
        bounded("b down", link_b.down).await,
        Ok(DownReason::ClosedByPeer)
    );
}

/// The peer sends its last frames and resets the connection (it closed with our frames
/// unread) while this side is still writing, and is slow to read: the write fails first, yet
/// every frame the peer sent is delivered before the link is reported down (the kernel hands
/// them over before the reset's error). A link that ended on the failed write would leave
/// them unread: a leaving node's releases, which its peer would replace with a node down.
#[tokio::test]
async fn frames_sent_before_a_reset_are_delivered_though_a_write_failed_first() {
    init_tracing();
    let mut cfg = config("a", "secret");
    cfg.incoming_capacity = 1; // the reader is soon stuck handing over, frames pile up unread
    let mut listener = Listener::bind(loopback(), cfg, no_names()).await.unwrap();
    let mut peer = hand_run_peer_b(listener.local_addr()).await;
    let mut link = bounded("accept", listener.accept()).await.unwrap().start();
    const N: u64 = 50;
    for i in 0..N {
        let frame = PeerFrame::Payload(envelope(i));
        bounded("b sends", peer.send(&frame)).await.unwrap();
    }
    // a writes on and on; b reads none of it, so its close resets the connection.
    let sender = link.sender.clone();
    let flood = tokio::spawn(async move {
        let mut i = 0;
        while sender.send(&envelope(i)).await.is_ok() {
            i += 1;
        }
    });
    let stream = peer.into_inner();
    let mut one = [0u8; 1];
    bounded("a's frames reach b", stream.peek(&mut one))
        .await
        .unwrap();
    drop(stream); // with a's frames unread: a reset
    let mut got = Vec::new();
    while let Some(e) = bounded("a hands over", link.incoming.recv()).await {
        got.push(e);
    }
    assert_eq!(got, (0..N).map(envelope).collect::<Vec<_>>());
    let reason = bounded("a down", &mut link.down).await.unwrap();
    assert!(matches!(reason, DownReason::Io(_)), "{reason:?}");
    link.sender.close();
    bounded("the flood ends", flood).await.unwrap();
}

#[tokio::test]
async fn wrong_cookie_is_refused_on_both_sides() {
    init_tracing();
    let (addr, acceptor) = raw_acceptor(config("a", "secret")).await;
    let initiator = bounded(
        "connect",
        connect(addr, &config("b", "guess"), |_: &NodeId| false),
    )
    .await;
    match initiator {
        Err(DialError::Refused { refusal, .. }) => {
            assert_eq!(refusal, Refusal::ByPeer(RefusalCode::WrongCookie));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let acceptor = bounded("acceptor", acceptor).await.unwrap();
    assert_eq!(acceptor.unwrap_err(), Refusal::WrongCookie);
}

#[tokio::test]
async fn wrong_protocol_version_is_refused() {
    init_tracing();
    let (addr, acceptor) = raw_acceptor(config("a", "secret")).await;
    let mut peer = Framed::new(TcpStream::connect(addr).await.unwrap(), length_codec(MAX));
    let hello = PeerFrame::Hello(Hello {
        version: PROTOCOL_VERSION + 1,
        node: node("future"),
        nonce: [1; 32],
    });
    peer.send(encode_frame(&hello, MAX).unwrap()).await.unwrap();
    let frames = bounded("refusal", read_until_closed(&mut peer)).await;
    drop(peer); // hang up, as a real node does after a refusal
    assert_eq!(
        frames,
        [PeerFrame::Refuse(RefusalCode::WrongVersion {
            supported: PROTOCOL_VERSION
        })]
    );
    let acceptor = bounded("acceptor", acceptor).await.unwrap();
    assert_eq!(
        acceptor.unwrap_err(),
        Refusal::WrongVersion {
            ours: PROTOCOL_VERSION,
            theirs: PROTOCOL_VERSION + 1
        }
    );
}

#[tokio::test]
async fn random_bytes_are_refused() {
    init_tracing();
    let (addr, acceptor) = raw_acceptor(config("a", "secret")).await;
    let mut peer = TcpStream::connect(addr).await.unwrap();
    // A fixed pseudo-random sequence (xorshift), starting with a length prefix far above the
    // handshake limit.
    let mut x: u32 = 0x9e37_79b9;
    let garbage: Vec<u8> = (0..256)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect();
    peer.write_all(&garbage).await.unwrap();
    let acceptor = bounded("acceptor", acceptor).await.unwrap();
    assert!(
        matches!(acceptor, Err(Refusal::Malformed(_))),
        "{acceptor:?}"
    );
    // The acceptor closed the connection: the peer reads to its end (or is reset).
    let mut buf = Vec::new();
    let _ = bounded("closed", peer.read_to_end(&mut buf)).await;
}

#[tokio::test]
async fn a_garbage_frame_is_refused_and_the_peer_told() {
    init_tracing();
    let (addr, acceptor) = raw_acceptor(config("a", "secret")).await;
    let mut peer = Framed::new(TcpStream::connect(addr).await.unwrap(), length_codec(MAX));
    peer.send(bytes::Bytes::from_static(&[0xff; 5]))
        .await
        .unwrap();
    let frames = bounded("refusal", read_until_closed(&mut peer)).await;
    drop(peer);
    assert_eq!(frames, [PeerFrame::Refuse(RefusalCode::Malformed)]);
    let acceptor = bounded("acceptor", acceptor).await.unwrap();
    assert!(
        matches!(acceptor, Err(Refusal::Malformed(_))),
        "{acceptor:?}"
    );
}

#[tokio::test]
async fn the_listener_still_accepts_a_correct_peer_after_refused_ones() {
    init_tracing();
    let in_use: NameInUse = Arc::new(|n: &NodeId| n.as_str() == "dup");
    let mut listener = Listener::bind(loopback(), config("a", "secret"), in_use)
        .await
        .unwrap();
    let addr = listener.local_addr();

    let wrong_cookie = bounded(
        "wrong cookie",
        connect(addr, &config("b", "guess"), |_: &NodeId| false),
    )
    .await;
    assert!(matches!(
        wrong_cookie,
        Err(DialError::Refused {
            refusal: Refusal::ByPeer(RefusalCode::WrongCookie),
            ..
        })
    ));
    let duplicate = bounded(
        "duplicate",
        connect(addr, &config("dup", "secret"), |_: &NodeId| false),
    )
    .await;
    assert!(matches!(
        duplicate,
        Err(DialError::Refused {
            refusal: Refusal::ByPeer(RefusalCode::DuplicateName),
            ..
        })
    ));
    let mut garbage = TcpStream::connect(addr).await.unwrap();
    garbage
        .write_all(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3])
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = bounded("garbage closed", garbage.read_to_end(&mut buf)).await;
    let mut future = Framed::new(TcpStream::connect(addr).await.unwrap(), length_codec(MAX));
    let hello = PeerFrame::Hello(Hello {
        version: PROTOCOL_VERSION + 1,
        node: node("future"),
        nonce: [1; 32],
    });
    future
        .send(encode_frame(&hello, MAX).unwrap())
        .await
        .unwrap();
    let frames = bounded("future refused", read_until_closed(&mut future)).await;
    assert_eq!(frames.len(), 1);
    // A peer that connects and says nothing does not hold the listener up either.
    let _silent = TcpStream::connect(addr).await.unwrap();

    let good = bounded(
        "good connect",
        connect(addr, &config("good", "secret"), |_: &NodeId| false),
    )
    .await
    .unwrap();
    let accepted = bounded("accept", listener.accept()).await.unwrap();
    assert_eq!(
        accepted.peer(),
        &node("good"),
        "refused peers never come out of accept"
    );
    let (mut link_a, mut link_good) = (accepted.start(), good.start());
    link_good.sender.send(&envelope(1)).await.unwrap();
    link_a.sender.send(&envelope(2)).await.unwrap();
    assert_eq!(
        bounded("a receives", link_a.incoming.recv()).await,
        Some(envelope(1))
    );
    assert_eq!(
        bounded("good receives", link_good.incoming.recv()).await,
        Some(envelope(2))
    );
}

#[tokio::test]
async fn a_peer_that_stops_reading_is_declared_down_by_heartbeat() {
    init_tracing();
    let mut short = config("a", "secret");
    short.heartbeat = HeartbeatConfig {
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(300),
        ..HeartbeatConfig::default()
    };
    short.outgoing_capacity = 64;
    let mut listener = Listener::bind(loopback(), short, no_names()).await.unwrap();
    // The peer completes the handshake, then neither reads nor writes: its connection is
    // never started.
    let silent = connect_b(listener.local_addr()).await;
    let link = bounded("accept", listener.accept()).await.unwrap().start();
    // Keep the writer busy against a peer that does not read: the reader must still notice
    // the silence.
    let big = Envelope::new(Message::Server(ServerRequest::Lock {
        agent: AgentId::new(node("x"), 1, 1),
        lock: LockId::new(vec!["k"; 4000]).unwrap(),
        mode: Mode::X,
    }));
    for _ in 0..500 {
        if link.sender.try_send(&big).is_err() {
            break;
        }
    }
    let reason = bounded("down", link.down).await.unwrap();
    match reason {
        DownReason::HeartbeatTimeout { silent_for } => {
            assert!(silent_for >= Duration::from_millis(300), "{silent_for:?}");
        }
        other => panic!("expected a heartbeat timeout, got {other:?}"),
    }
    assert!(matches!(
        link.sender.try_send(&envelope(1)),
        Err(SendError::Closed)
    ));
    drop(silent);
}

#[tokio::test]
async fn pings_go_to_a_quiet_peer_and_pings_are_answered() {
    init_tracing();
    let mut short = config("a", "secret");
    short.heartbeat = HeartbeatConfig {
        interval: Duration::from_millis(20),
        timeout: Duration::from_secs(5),
        ..HeartbeatConfig::default()
    };
    let mut listener = Listener::bind(loopback(), short, no_names()).await.unwrap();
    let mut peer = hand_run_peer_b(listener.local_addr()).await;
    let _link = bounded("accept", listener.accept()).await.unwrap().start();
    // The quiet peer is pinged...
    let seq = loop {
        if let PeerFrame::Ping { seq } = bounded("ping", peer.next()).await.unwrap() {
            break seq;
        }
    };
    assert_eq!(seq, 1);
    // ...and its own ping is answered with the same sequence number.
    peer.send(&PeerFrame::Ping { seq: 42 }).await.unwrap();
    loop {
        match bounded("pong", peer.next()).await.unwrap() {
            PeerFrame::Pong { seq } => {
                assert_eq!(seq, 42);
                break;
            }
            PeerFrame::Ping { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_malformed_frame_after_the_handshake_closes_the_connection() {
    init_tracing();
    let cases: [(&str, Vec<u8>); 3] = [
        ("garbage", vec![0, 0, 0, 3, 0xff, 0xff, 0xff]),
        ("hello after the handshake", {
            let hello = PeerFrame::Hello(Hello {
                version: PROTOCOL_VERSION,
                node: node("b"),
                nonce: [3; 32],
            });
            let body = encode_frame(&hello, MAX).unwrap();
            let mut v = (body.len() as u32).to_be_bytes().to_vec();
            v.extend_from_slice(&body);
            v
        }),
        (
            "oversize length prefix",
            (MAX as u32 * 1024).to_be_bytes().to_vec(),
        ),
    ];
    for (what, bytes) in cases {
        let mut cfg = config("a", "secret");
        cfg.max_frame = MAX;
        let mut listener = Listener::bind(loopback(), cfg, no_names()).await.unwrap();
        let peer = hand_run_peer_b(listener.local_addr()).await;
        let mut link = bounded("accept", listener.accept()).await.unwrap().start();
        let mut stream = peer.into_inner();
        stream.write_all(&bytes).await.unwrap();
        let reason = bounded(what, &mut link.down).await.unwrap();
        assert!(
            matches!(reason, DownReason::Malformed(_)),
            "{what}: {reason:?}"
        );
        assert_eq!(
            bounded("incoming ends", link.incoming.recv()).await,
            None,
            "{what}"
        );
    }
}

#[tokio::test]
async fn a_too_large_envelope_is_refused_to_the_sender_and_the_connection_stays_up() {
    init_tracing();
    let mut cfg = config("a", "secret");
    cfg.max_frame = 4096;
    let mut listener = Listener::bind(loopback(), cfg, no_names()).await.unwrap();
    let b = connect_b(listener.local_addr()).await;
    let link_a = bounded("accept", listener.accept()).await.unwrap().start();
    let mut link_b = b.start();
    let big = Envelope::new(Message::Server(ServerRequest::Unlock {
        agent: AgentId::new(node("x"), 1, 1),
        lock: LockId::new(vec!["k"; 5000]).unwrap(),
    }));
    assert!(matches!(
        link_a.sender.try_send(&big),
        Err(SendError::Encode(_))
    ));
    link_a.sender.send(&envelope(7)).await.unwrap();
    assert_eq!(
        bounded("receive", link_b.incoming.recv()).await,
        Some(envelope(7))
    );
}

#[tokio::test]
async fn connecting_to_a_closed_port_fails() {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let result = bounded(
        "connect",
        connect(addr, &config("b", "secret"), |_: &NodeId| false),
    )
    .await;
    assert!(matches!(result, Err(DialError::Io { .. })), "{result:?}");
}

/// The Node runs on actix's current-thread runtime with a `LocalSet`: the driver from
/// `Connection::split` runs there with `spawn_local`, and `Driver::run` returns the reason.
#[tokio::test]
async fn the_driver_runs_on_a_local_set() {
    init_tracing();
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let mut listener = Listener::bind(loopback(), config("a", "secret"), no_names())
                .await
                .unwrap();
            let b = connect_b(listener.local_addr()).await;
            let (link_a, driver_a) = bounded("accept", listener.accept()).await.unwrap().split();
            let (mut link_b, driver_b) = b.split();
            let run_a = tokio::task::spawn_local(driver_a.run());
            let run_b = tokio::task::spawn_local(driver_b.run());
            link_a.sender.send(&envelope(1)).await.unwrap();
            assert_eq!(
                bounded("receive", link_b.incoming.recv()).await,
                Some(envelope(1))
            );
            drop(link_a);
            assert_eq!(
                bounded("a ends", run_a).await.unwrap(),
                DownReason::ClosedLocally
            );
            assert_eq!(
                bounded("b ends", run_b).await.unwrap(),
                DownReason::ClosedByPeer
            );
        })
        .await;
}
