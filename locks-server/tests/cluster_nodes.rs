//! The cluster layer between real nodes over TCP on 127.0.0.1 (ephemeral ports): connecting,
//! node events, one connection per pair, partitions with `disconnect`/`reconnect`, redialing,
//! refused handshakes next to a running cluster. Every wait is bounded by `BOUND`; no test
//! asserts a duration.

mod common;

use common::net::{id, init_tracing, loopback, raw_handshake, within};
use futures::{SinkExt, StreamExt};
use locks_core::NodeId;
use locks_core::proto::PROTOCOL_VERSION;
use locks_server::transport::net::frame::{Hello, decode_frame, encode_frame, length_codec};
use locks_server::transport::net::{
    Cookie, Handshake, HandshakeOutcome, PeerFrame, RefusalCode, Role,
};
use locks_server::{Error, Node, NodeConfig};
use locks_server::{NodeEvent, NodeEvents};
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

const BOUND: Duration = Duration::from_secs(20);
const COOKIE: &str = "cluster-test-cookie";

async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    within(BOUND, what, f).await
}

fn config(name: &str) -> NodeConfig {
    NodeConfig::new(name)
        .listen(loopback())
        .cookie(COOKIE)
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
}

async fn start(config: NodeConfig) -> Node {
    bounded("start", Node::start(config)).await.unwrap()
}

fn addr(node: &Node) -> SocketAddr {
    node.local_addr().expect("the node listens")
}

async fn next(events: &mut NodeEvents, what: &str) -> NodeEvent {
    bounded(what, events.recv())
        .await
        .unwrap_or_else(|| panic!("{what}: the node stopped"))
}

async fn expect(events: &mut NodeEvents, expected: NodeEvent) {
    let what = format!("{expected:?}");
    assert_eq!(next(events, &what).await, expected);
}

fn names(nodes: &[NodeId]) -> Vec<&str> {
    nodes.iter().map(|n| n.as_str()).collect()
}

#[tokio::test]
async fn connect_lists_both_nodes_and_reports_up_events() {
    init_tracing();
    let a = start(config("a")).await;
    let b = start(config("b")).await;
    let mut ev_a = a.subscribe_nodes();
    let mut ev_b = b.subscribe_nodes();

    let peer = bounded("connect", b.connect(addr(&a))).await.unwrap();
    assert_eq!(peer, id("a"));
    expect(&mut ev_a, NodeEvent::Up(id("b"))).await;
    expect(&mut ev_b, NodeEvent::Up(id("a"))).await;
    assert_eq!(names(&a.nodes()), ["a", "b"]);
    assert_eq!(names(&b.nodes()), ["a", "b"]);
    let (la, lb) = (a.links(), b.links());
    assert_eq!(
        (la.len(), la[0].peer.as_str(), la[0].role),
        (1, "b", Role::Acceptor)
    );
    assert_eq!(
        (lb.len(), lb[0].peer.as_str(), lb[0].role),
        (1, "a", Role::Initiator)
    );

    // Connecting again is a no-op that names the node.
    let again = bounded("connect again", b.connect(addr(&a))).await.unwrap();
    assert_eq!(again, id("a"));
    assert_eq!(b.links(), lb);

    // A late subscriber first hears of the nodes already connected.
    let mut late = a.subscribe_nodes();
    expect(&mut late, NodeEvent::Up(id("b"))).await;
    assert_eq!(late.try_recv(), None);
}

#[tokio::test]
async fn a_stopped_node_is_down_and_a_configured_peer_is_dialed_again() {
    init_tracing();
    let a = start(config("a")).await;
    let mut ev_a = a.subscribe_nodes();
    let a_addr = addr(&a);
    let b = start(config("b").peer(a_addr)).await;
    let mut ev_b = b.subscribe_nodes();
    expect(&mut ev_b, NodeEvent::Up(id("a"))).await;
    // The two ends register the connection independently: wait for a's too.
    expect(&mut ev_a, NodeEvent::Up(id("b"))).await;

    bounded("shutdown", a.shutdown()).await;
    expect(&mut ev_b, NodeEvent::Down(id("a"))).await;
    // The stopped node closed its connections on the way out (a clean leave), then its
    // subscription ends.
    expect(&mut ev_a, NodeEvent::Down(id("b"))).await;
    assert_eq!(bounded("a's events end", ev_a.recv()).await, None);
    assert_eq!(names(&b.nodes()), ["b"]);

    // A new incarnation of "a" on the same address: b's dialer finds it.
    let a2 = start(NodeConfig::new("a").listen(a_addr).cookie(COOKIE)).await;
    let mut ev_a2 = a2.subscribe_nodes();
    expect(&mut ev_b, NodeEvent::Up(id("a"))).await;
    expect(&mut ev_a2, NodeEvent::Up(id("b"))).await;
    assert_eq!(names(&a2.nodes()), ["a", "b"]);
}

#[tokio::test]
async fn disconnect_keeps_a_peer_apart_until_reconnect() {
    init_tracing();
    let a = start(config("a")).await;
    let b = start(config("b")).await;
    let mut ev_a = a.subscribe_nodes();
    let mut ev_b = b.subscribe_nodes();
    // a dials b: a keeps a dialer on b's address.
    bounded("connect", a.connect(addr(&b))).await.unwrap();
    expect(&mut ev_a, NodeEvent::Up(id("b"))).await;
    expect(&mut ev_b, NodeEvent::Up(id("a"))).await;

    // The dialing side keeps the peer apart.
    assert!(bounded("disconnect", a.disconnect("b")).await.unwrap());
    assert_eq!(
        names(&a.nodes()),
        ["a"],
        "a handled the down before returning"
    );
    expect(&mut ev_a, NodeEvent::Down(id("b"))).await;
    expect(&mut ev_b, NodeEvent::Down(id("a"))).await;
    // b dialing in is refused while a keeps it apart.
    let refused = bounded("b dials a", b.connect(addr(&a))).await;
    assert!(matches!(refused, Err(Error::Connect(_))), "{refused:?}");
    assert_eq!(names(&a.nodes()), ["a"]);
    assert_eq!(names(&b.nodes()), ["b"]);
    // reconnect: a's dialer dials b at once.
    bounded("reconnect", a.reconnect("b")).await.unwrap();
    expect(&mut ev_a, NodeEvent::Up(id("b"))).await;
    expect(&mut ev_b, NodeEvent::Up(id("a"))).await;

    // The accepting side keeps the peer apart: a's dialer keeps being refused.
    assert!(bounded("disconnect", b.disconnect("a")).await.unwrap());
    expect(&mut ev_b, NodeEvent::Down(id("a"))).await;
    expect(&mut ev_a, NodeEvent::Down(id("b"))).await;
    let refused = bounded("a dials b", a.connect(addr(&b))).await;
    assert!(matches!(refused, Err(Error::Connect(_))), "{refused:?}");
    assert_eq!(names(&b.nodes()), ["b"]);
    // Once b lets a back in, a's dialer gets through on its next try.
    bounded("reconnect", b.reconnect("a")).await.unwrap();
    expect(&mut ev_b, NodeEvent::Up(id("a"))).await;
    expect(&mut ev_a, NodeEvent::Up(id("b"))).await;
    assert_eq!(names(&a.nodes()), ["a", "b"]);

    // Disconnecting a node that is not connected keeps it apart all the same.
    assert!(!bounded("disconnect c", a.disconnect("c")).await.unwrap());
}

#[tokio::test]
async fn simultaneous_dials_keep_one_connection() {
    init_tracing();
    for (x, y) in [("a", "b"), ("d", "c"), ("e", "f")] {
        let nx = start(config(x)).await;
        let ny = start(config(y)).await;
        let mut ev_x = nx.subscribe_nodes();
        let mut ev_y = ny.subscribe_nodes();
        let (rx, ry) = bounded("both connect", async {
            tokio::join!(nx.connect(addr(&ny)), ny.connect(addr(&nx)))
        })
        .await;
        assert_eq!(rx.unwrap(), id(y));
        assert_eq!(ry.unwrap(), id(x));
        let (lx, ly) = (nx.links(), ny.links());
        assert_eq!((lx.len(), ly.len()), (1, 1), "{lx:?} {ly:?}");
        assert_ne!(lx[0].role, ly[0].role, "both ends of one connection");
        // No flap: each node saw the other come up once, and the next event is the down
        // caused here.
        assert!(bounded("disconnect", nx.disconnect(y)).await.unwrap());
        expect(&mut ev_x, NodeEvent::Up(id(y))).await;
        expect(&mut ev_x, NodeEvent::Down(id(y))).await;
        expect(&mut ev_y, NodeEvent::Up(id(x))).await;
        expect(&mut ev_y, NodeEvent::Down(id(x))).await;
    }
}

#[tokio::test]
async fn three_nodes_that_list_each_other_as_peers_form_a_full_mesh() {
    init_tracing();
    // Each node lists the ones started before it; the first learns of the others when they
    // dial in. Every pair ends with exactly one connection.
    let a = start(config("a")).await;
    let b = start(config("b").peer(addr(&a))).await;
    let c = start(config("c").peer(addr(&a)).peer(addr(&b))).await;
    let mut ev = c.subscribe_nodes();
    let mut up = vec![next(&mut ev, "c up 1").await, next(&mut ev, "c up 2").await];
    up.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(up, [NodeEvent::Up(id("a")), NodeEvent::Up(id("b"))]);
    for node in [&a, &b] {
        let mut ev = node.subscribe_nodes();
        let mut seen = Vec::new();
        while seen.len() < 2 {
            seen.push(next(&mut ev, "mesh").await);
        }
        assert!(
            seen.iter().all(|e| matches!(e, NodeEvent::Up(_))),
            "{seen:?}"
        );
    }
    for node in [&a, &b, &c] {
        assert_eq!(names(&node.nodes()), ["a", "b", "c"]);
        assert_eq!(node.links().len(), 2);
    }
}

#[tokio::test]
async fn handshake_refusals_do_not_disturb_a_running_cluster() {
    init_tracing();
    let a = start(config("a")).await;
    let b = start(config("b")).await;
    let mut ev_a = a.subscribe_nodes();
    bounded("connect", b.connect(addr(&a))).await.unwrap();
    expect(&mut ev_a, NodeEvent::Up(id("b"))).await;
    let links = a.links();

    // A node with the wrong cookie.
    let intruder = start(NodeConfig::new("x").cookie("wrong")).await;
    let refused = bounded("wrong cookie", intruder.connect(addr(&a))).await;
    assert!(matches!(refused, Err(Error::Connect(_))), "{refused:?}");
    // A node that claims b's name.
    let twin = start(NodeConfig::new("b").cookie(COOKIE)).await;
    let refused = bounded("duplicate name", twin.connect(addr(&a))).await;
    assert!(matches!(refused, Err(Error::Connect(_))), "{refused:?}");
    // Random bytes.
    let mut garbage = TcpStream::connect(addr(&a)).await.unwrap();
    garbage
        .write_all(&[0x00, 0x00, 0x00, 0x05, 0xde, 0xad, 0xbe, 0xef, 0x01])
        .await
        .unwrap();
    let mut sink = Vec::new();
    let _ = bounded("garbage closed", garbage.read_to_end(&mut sink)).await;
    // Another protocol version.
    let mut future = Framed::new(
        TcpStream::connect(addr(&a)).await.unwrap(),
        length_codec(1024),
    );
    let hello = PeerFrame::Hello(Hello {
        version: PROTOCOL_VERSION + 1,
        node: id("future"),
        nonce: [7; 32],
    });
    future
        .send(encode_frame(&hello, 1024).unwrap())
        .await
        .unwrap();
    while let Some(Ok(_)) = bounded("future refused", future.next()).await {}

    // The cluster is as it was: same connection, no event.
    assert_eq!(a.links(), links);
    assert_eq!(ev_a.try_recv(), None);
    assert_eq!(names(&a.nodes()), ["a", "b"]);
    // And a correct node still gets in.
    let d = start(config("d")).await;
    assert_eq!(
        bounded("good connect", d.connect(addr(&a))).await.unwrap(),
        id("a")
    );
    expect(&mut ev_a, NodeEvent::Up(id("d"))).await;
}

#[tokio::test]
async fn a_cluster_node_needs_a_cookie_and_a_local_node_has_no_cluster() {
    let err = Node::start(NodeConfig::new("a").listen(loopback()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("cookie"),
        "a clear error, got: {err}"
    );
    let err = Node::start(NodeConfig::new("a").peer(loopback()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");

    let local = start(NodeConfig::new("solo")).await;
    assert_eq!(local.local_addr(), None);
    assert!(matches!(
        local.connect(loopback()).await,
        Err(Error::NotClustered)
    ));
    assert_eq!(local.subscribe_nodes().recv().await, None);
    assert_eq!(names(&local.nodes()), ["solo"]);
}

#[tokio::test]
async fn a_listen_address_in_use_is_an_error() {
    let a = start(config("a")).await;
    let err = Node::start(NodeConfig::new("b").listen(addr(&a)).cookie(COOKIE))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Listen { .. }), "{err:?}");
}

/// Completes a handshake as initiator by hand, then hands back the stream, which nobody reads
/// or writes any more.
async fn silent_peer(addr: SocketAddr, name: &str) -> Framed<TcpStream, LengthDelimitedCodec> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let deadline = Instant::now() + BOUND;
    raw_handshake(stream, Role::Initiator, name, COOKIE, [0x42; 32], deadline)
        .await
        .framed
}

#[tokio::test]
async fn a_peer_that_stops_answering_is_declared_down_by_its_heartbeat() {
    init_tracing();
    let a =
        start(config("a").heartbeat(Duration::from_millis(50), Duration::from_millis(400))).await;
    let mut ev = a.subscribe_nodes();
    let frozen = bounded("handshake", silent_peer(addr(&a), "frozen")).await;
    expect(&mut ev, NodeEvent::Up(id("frozen"))).await;
    // It neither answers pings nor closes the connection.
    expect(&mut ev, NodeEvent::Down(id("frozen"))).await;
    assert_eq!(names(&a.nodes()), ["a"]);
    drop(frozen);
}

/// Opens a connection to `addr` that claims to be node `name` without knowing the cookie: it
/// sends its `Hello`, waits for the node's `Hello` (so the node is in the middle of the
/// handshake with it), and then stalls. Returns the stream, to keep it open.
async fn stalled_impostor(addr: SocketAddr, name: &str) -> Framed<TcpStream, LengthDelimitedCodec> {
    let mut framed = Framed::new(TcpStream::connect(addr).await.unwrap(), length_codec(1024));
    let hello = PeerFrame::Hello(Hello {
        version: PROTOCOL_VERSION,
        node: id(name),
        nonce: [9; 32],
    });
    framed
        .send(encode_frame(&hello, 1024).unwrap())
        .await
        .unwrap();
    let reply = framed
        .next()
        .await
        .expect("the node answers")
        .expect("a frame");
    assert!(
        matches!(decode_frame(&reply, 1024), Ok(PeerFrame::Hello(_))),
        "the node answers with its Hello"
    );
    framed
}

#[tokio::test]
async fn a_handshake_without_the_cookie_cannot_hold_a_nodes_name() {
    init_tracing();
    // The impostor claims the dialer's name at the node dialed (an accepted handshake against
    // an accepted one), then the dialed node's name at the dialer (against the dialer's own
    // handshake, which loses a tie to an accepted one when the dialer has the larger name).
    for impostor_at_dialer in [false, true] {
        let a = start(config("a")).await;
        let b = start(config("b")).await;
        let mut ev_a = a.subscribe_nodes();
        let impostor = if impostor_at_dialer {
            bounded("impostor at b", stalled_impostor(addr(&b), "a")).await
        } else {
            bounded("impostor at a", stalled_impostor(addr(&a), "b")).await
        };
        let peer = bounded("b connects", b.connect(addr(&a))).await;
        assert_eq!(
            peer.unwrap(),
            id("a"),
            "impostor at the dialer: {impostor_at_dialer}"
        );
        expect(&mut ev_a, NodeEvent::Up(id("b"))).await;
        drop(impostor);
    }
}

#[tokio::test]
async fn stalled_handshakes_cannot_lock_out_a_real_peer() {
    init_tracing();
    let a = start(config("a")).await;
    let b = start(config("b")).await;
    let mut ev_a = a.subscribe_nodes();
    // As many stalled handshakes as a takes at once by default (NetConfig's
    // max_pending_handshakes), each one answered, so all are in progress at a.
    let mut stalled = Vec::new();
    for i in 0..64 {
        let name = format!("s{i}");
        stalled.push(bounded("stalled", stalled_impostor(addr(&a), &name)).await);
    }
    let peer = bounded("b connects", b.connect(addr(&a))).await;
    assert_eq!(peer.unwrap(), id("a"));
    expect(&mut ev_a, NodeEvent::Up(id("b"))).await;
    drop(stalled);
}

/// Reads `framed`'s next frame (a handshake frame).
async fn next_frame(framed: &mut Framed<TcpStream, LengthDelimitedCodec>) -> PeerFrame {
    let bytes = framed
        .next()
        .await
        .expect("a frame, not the end")
        .expect("a frame, not an error");
    decode_frame(&bytes, 1024).expect("a handshake frame")
}

async fn send_frame(framed: &mut Framed<TcpStream, LengthDelimitedCodec>, frame: PeerFrame) {
    framed
        .send(encode_frame(&frame, 1024).unwrap())
        .await
        .unwrap();
}

/// Accepts one connection on `listener` as a node named "a" would: reads the dialer's `Hello`
/// and answers with its own, then leaves the handshake hanging.
async fn fake_a_answers(
    listener: &tokio::net::TcpListener,
) -> Framed<TcpStream, LengthDelimitedCodec> {
    let (stream, _) = listener.accept().await.unwrap();
    let mut framed = Framed::new(stream, length_codec(1024));
    assert!(matches!(next_frame(&mut framed).await, PeerFrame::Hello(_)));
    let hello = PeerFrame::Hello(Hello {
        version: PROTOCOL_VERSION,
        node: id("a"),
        nonce: [5; 32],
    });
    send_frame(&mut framed, hello).await;
    framed
}

#[tokio::test]
async fn connect_racing_the_background_dial_reports_the_real_refusal() {
    init_tracing();
    // A fake node "a" under the test's control; b dials it in the background (a configured
    // peer) with a long handshake timeout, so that a wait for it would be noticed.
    let fake = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let fake_addr = fake.local_addr().unwrap();
    let b = start(
        config("b")
            .peer(fake_addr)
            .handshake_timeout(Duration::from_secs(60)),
    )
    .await;
    // The background dial reaches its name check: b now has a handshake with "a" under way.
    let mut background = bounded("background dial", fake_a_answers(&fake)).await;
    let refusals = b.handshake_refusals();
    let connect = tokio::spawn({
        let b = b.clone();
        async move { b.connect(fake_addr).await }
    });
    // connect's own dial meets the background one at b's name check, and b gives it up.
    let mut raced = bounded("connect's dial", fake_a_answers(&fake)).await;
    assert_eq!(
        bounded("b gives its second dial up", next_frame(&mut raced)).await,
        PeerFrame::Refuse(RefusalCode::DuplicateName)
    );
    // Then "a" refuses the background dial: that is the outcome connect must report, at once.
    assert!(matches!(
        bounded("b's proof", next_frame(&mut background)).await,
        PeerFrame::Proof(_)
    ));
    send_frame(&mut background, PeerFrame::Refuse(RefusalCode::WrongCookie)).await;
    let result = bounded("connect returns", connect).await.unwrap();
    let err = result.expect_err("a refused b");
    assert!(
        err.to_string().contains("cookie"),
        "connect reports the real refusal, got: {err}"
    );
    // The refusals are counted where the caller can read them.
    let mut refusals = refusals;
    let counted = bounded("refusals counted", refusals.wait_for(|r| r.by_peer >= 1))
        .await
        .map(|r| r.clone())
        .expect("the node runs");
    assert!(counted.total() >= 2, "{counted:?}");
}

#[tokio::test]
async fn connect_refused_as_a_duplicate_waits_for_the_peers_own_dial_still_unproven() {
    init_tracing();
    // A hand-run node "a" (it knows the cookie) that dials b at the same time as b dials it,
    // and refuses b's dial because its own is under way. Its refusal reaches b before its own
    // dial has proved the cookie at b.
    let fake = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let fake_addr = fake.local_addr().unwrap();
    let b = start(config("b")).await;
    let mut ev_b = b.subscribe_nodes();
    let connect = tokio::spawn({
        let b = b.clone();
        async move { b.connect(fake_addr).await }
    });
    // b's dial: answered, and b proves itself.
    let mut b_dial = bounded("b's dial", fake_a_answers(&fake)).await;
    assert!(matches!(
        bounded("b's proof", next_frame(&mut b_dial)).await,
        PeerFrame::Proof(_)
    ));
    // a's own dial of b reaches b's Hello (b now has it unproven).
    let stream = TcpStream::connect(addr(&b)).await.unwrap();
    let mut a_dial = Framed::new(stream, length_codec(1024));
    let deadline = Instant::now() + BOUND;
    let (mut hs, step) = Handshake::new(
        Role::Initiator,
        id("a"),
        Cookie::from(COOKIE),
        [3; 32],
        deadline,
    );
    for frame in step.send {
        send_frame(&mut a_dial, frame).await;
    }
    let b_hello = bounded("b's Hello", next_frame(&mut a_dial)).await;
    // Now a refuses b's dial as a duplicate, and waits until b has closed it: b's node thread
    // has taken the refusal in (and its connect has looked at what is under way) before a's
    // proof below can be read.
    send_frame(&mut b_dial, PeerFrame::Refuse(RefusalCode::DuplicateName)).await;
    while let Some(Ok(_)) = bounded("b closes its dial", b_dial.next()).await {}
    // Then a finishes its own dial.
    let step = hs.on_frame(b_hello, |_: &NodeId| false);
    for frame in step.send {
        send_frame(&mut a_dial, frame).await;
    }
    let step = hs.on_frame(
        bounded("b's proof", next_frame(&mut a_dial)).await,
        |_: &NodeId| false,
    );
    assert_eq!(
        step.outcome,
        Some(HandshakeOutcome::Established { peer: id("b") })
    );
    // connect reports the connection that a's dial made.
    let result = bounded("connect returns", connect).await.unwrap();
    assert_eq!(result.unwrap(), id("a"));
    expect(&mut ev_b, NodeEvent::Up(id("a"))).await;
    drop((a_dial, b_dial));
}
