//! Mutual TLS between real nodes on 127.0.0.1 (ephemeral ports), with certificates made at
//! test time: a TLS cluster connects; a peer with another CA's certificate, a plain-TCP peer
//! (either way round) and an expired certificate are refused with the reason counted, and the
//! refusing node still serves a good peer afterwards; bad TLS settings are refused when the
//! configuration is built. Every wait is bounded by `BOUND`; no test asserts a duration.

mod common;

use common::net::{id, init_tracing, loopback, within};
use locks_server::{
    ConfigError, ConnectError, DialError, Error, HandshakeRefusals, Node, NodeConfig, NodeEvent,
    Refusal, RefusalCode, TlsConfig, TlsConfigError, TlsFailure,
};
use locks_testing::certs::{NodeCert, TestCa};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const BOUND: Duration = Duration::from_secs(20);
const COOKIE: &str = "tls-test-cookie";

async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    within(BOUND, what, f).await
}

fn tls(cert: &NodeCert, ca: &TestCa) -> TlsConfig {
    TlsConfig::from_pem(
        cert.cert.as_bytes(),
        cert.key.as_bytes(),
        ca.cert.as_bytes(),
    )
    .expect("valid TLS settings")
}

fn plain(name: &str) -> NodeConfig {
    NodeConfig::new(name)
        .listen(loopback())
        .cookie(COOKIE)
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
}

/// A node of `ca`'s cluster, with a fresh certificate.
fn with_tls(name: &str, ca: &TestCa) -> NodeConfig {
    plain(name).tls(tls(&ca.node(name), ca))
}

async fn start(config: NodeConfig) -> Node {
    bounded("start", Node::start(config)).await.unwrap()
}

fn addr(node: &Node) -> SocketAddr {
    node.local_addr().expect("the node listens")
}

/// The TLS failure behind a failed `connect`, if that is what it was.
fn tls_failure(error: &Error) -> Option<TlsFailure> {
    match error {
        Error::Connect(ConnectError::Net(DialError::Refused {
            refusal: Refusal::Tls(failure),
            ..
        })) => Some(failure.clone()),
        _ => None,
    }
}

/// Waits until `node`'s refusal counters satisfy `done`, and returns them.
async fn refusals(
    node: &Node,
    what: &str,
    done: impl FnMut(&HandshakeRefusals) -> bool,
) -> HandshakeRefusals {
    let mut rx = node.handshake_refusals();
    bounded(what, rx.wait_for(done)).await.unwrap().clone()
}

/// `node` still accepts and connects to a good peer of `ca`'s cluster, and both see it up.
async fn serves_a_good_peer(node: &Node, ca: &TestCa, name: &str) {
    let good = start(with_tls(name, ca)).await;
    let mut events = node.subscribe_nodes();
    let peer = bounded("good peer connects", good.connect(addr(node)))
        .await
        .unwrap();
    assert_eq!(peer.as_str(), node.name());
    bounded("up event", async {
        while let Some(event) = events.recv().await {
            if event == NodeEvent::Up(id(name)) {
                return;
            }
        }
        panic!("the node stopped");
    })
    .await;
    bounded("shutdown", good.shutdown()).await;
}

#[tokio::test]
async fn a_tls_cluster_connects_and_reconnects() {
    init_tracing();
    let ca = TestCa::new("cluster CA");
    let a = start(with_tls("a", &ca)).await;
    let b = start(with_tls("b", &ca).peer(addr(&a))).await;
    let c = start(with_tls("c", &ca)).await;
    let mut ev_b = b.subscribe_nodes();
    assert_eq!(
        bounded("c connects to a", c.connect(addr(&a)))
            .await
            .unwrap(),
        id("a")
    );
    assert_eq!(
        bounded("c connects to b", c.connect(addr(&b)))
            .await
            .unwrap(),
        id("b")
    );
    let names = |n: &Node| n.nodes().iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(names(&c), ["a", "b", "c"]);
    // b dialed a at start: the link is up on b's side too.
    loop {
        let event = bounded("b hears of a", ev_b.recv()).await.unwrap();
        if event == NodeEvent::Up(id("a")) {
            break;
        }
    }
    // a node's death is seen over TLS like over TCP, and the configured peer is dialed again.
    let a_addr = addr(&a);
    bounded("a stops", a.shutdown()).await;
    loop {
        let event = bounded("b hears a is down", ev_b.recv()).await.unwrap();
        if event == NodeEvent::Down(id("a")) {
            break;
        }
    }
    let a2 = start(
        NodeConfig::new("a")
            .listen(a_addr)
            .cookie(COOKIE)
            .tls(tls(&ca.node("a"), &ca)),
    )
    .await;
    loop {
        let event = bounded("b redials a", ev_b.recv()).await.unwrap();
        if event == NodeEvent::Up(id("a")) {
            break;
        }
    }
    // (b's dials of the stopped a were counted as closed connections; no TLS failure.)
    let counted = b.handshake_refusals().borrow().clone();
    assert_eq!(
        (
            counted.tls_not_tls,
            counted.tls_untrusted,
            counted.tls_expired,
            counted.tls_other
        ),
        (0, 0, 0, 0),
    );
    bounded("a2 stops", a2.shutdown()).await;
}

#[tokio::test]
async fn a_certificate_of_another_ca_is_refused() {
    init_tracing();
    let ca = TestCa::new("cluster CA");
    let other = TestCa::new("cluster CA"); // same name, another key
    let a = start(with_tls("a", &ca)).await;
    let m = start(with_tls("m", &other)).await;

    // a dials m: a checks m's certificate and refuses it.
    let err = bounded("a dials m", a.connect(addr(&m))).await.unwrap_err();
    assert_eq!(tls_failure(&err), Some(TlsFailure::Untrusted), "{err}");
    refusals(&a, "a counts it", |r| r.tls_untrusted >= 1).await;

    // m, trusting a's CA but holding the other CA's certificate, dials a: a refuses it.
    let intruder = NodeConfig::new("m2")
        .cookie(COOKIE)
        .tls(tls(&other.node("m2"), &ca));
    let intruder = start(intruder.listen(loopback())).await;
    let err = bounded("m2 dials a", intruder.connect(addr(&a)))
        .await
        .unwrap_err();
    assert!(
        matches!(tls_failure(&err), Some(TlsFailure::RejectedByPeer { .. })),
        "{err}"
    );
    refusals(&a, "a counts it", |r| r.tls_untrusted >= 2).await;
    assert!(a.nodes().iter().all(|n| n.as_str() == "a"));

    serves_a_good_peer(&a, &ca, "b").await;
}

#[tokio::test]
async fn a_plain_tcp_peer_is_refused_both_ways() {
    init_tracing();
    let ca = TestCa::new("cluster CA");
    let a = start(with_tls("a", &ca)).await;
    let p = start(plain("p")).await;

    // A plain node dials the TLS node: refused before the TLS node sends anything.
    assert!(bounded("p dials a", p.connect(addr(&a))).await.is_err());
    refusals(&a, "a counts a plain peer", |r| r.tls_not_tls >= 1).await;

    // The TLS node dials the plain node: the answer is not TLS.
    let err = bounded("a dials p", a.connect(addr(&p))).await.unwrap_err();
    assert_eq!(tls_failure(&err), Some(TlsFailure::NotTls), "{err}");

    // Bytes that are not even a frame: refused the same way.
    let mut raw = bounded("raw connect", TcpStream::connect(addr(&a)))
        .await
        .unwrap();
    raw.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    refusals(&a, "a counts the stranger", |r| r.tls_not_tls >= 2).await;
    drop(raw);

    serves_a_good_peer(&a, &ca, "b").await;
}

#[tokio::test]
async fn an_expired_certificate_is_refused() {
    init_tracing();
    let ca = TestCa::new("cluster CA");
    let a = start(with_tls("a", &ca)).await;
    let old = start(plain("old").tls(tls(&ca.expired_node("old"), &ca))).await;

    // The expired node dials a: a checks the client certificate and refuses it.
    assert!(bounded("old dials a", old.connect(addr(&a))).await.is_err());
    refusals(&a, "a counts the expired certificate", |r| {
        r.tls_expired >= 1
    })
    .await;

    // a dials the expired node: a refuses the server certificate.
    let err = bounded("a dials old", a.connect(addr(&old)))
        .await
        .unwrap_err();
    assert_eq!(tls_failure(&err), Some(TlsFailure::Expired), "{err}");
    refusals(&a, "a counts it", |r| r.tls_expired >= 2).await;

    serves_a_good_peer(&a, &ca, "b").await;
}

/// The refusal behind a failed `connect`, if the handshake was refused.
fn refusal_of(error: &Error) -> Option<&Refusal> {
    match error {
        Error::Connect(ConnectError::Net(DialError::Refused { refusal, .. })) => Some(refusal),
        _ => None,
    }
}

#[tokio::test]
async fn a_node_cannot_take_a_name_its_certificate_does_not_carry() {
    init_tracing();
    let ca = TestCa::new("cluster CA");
    let a = start(with_tls("a", &ca)).await;
    // A member of the cluster (b's certificate and key, the cookie) that calls itself "x":
    // its own start-up check is off, as an impostor's would be.
    let x = start(plain("x").tls(tls(&ca.node("b"), &ca).without_node_names())).await;

    // x dials a: a checks the name x gives against x's certificate, refuses, and says why.
    let err = bounded("x dials a", x.connect(addr(&a))).await.unwrap_err();
    assert_eq!(
        refusal_of(&err),
        Some(&Refusal::ByPeer(RefusalCode::NameNotCertified)),
        "{err}"
    );
    refusals(&a, "a counts it", |r| r.tls_node_name >= 1).await;

    // a dials x: a checks the name x answers with against x's certificate.
    let err = bounded("a dials x", a.connect(addr(&x))).await.unwrap_err();
    assert_eq!(
        tls_failure(&err),
        Some(TlsFailure::NameNotCertified { name: id("x") }),
        "{err}"
    );
    refusals(&a, "a counts it", |r| r.tls_node_name >= 2).await;
    assert!(a.nodes().iter().all(|n| n.as_str() == "a"));

    // With the binding off on a as well, the same peer is let in under its claimed name.
    let lax = start(plain("lax").tls(tls(&ca.node("lax"), &ca).without_node_names())).await;
    assert_eq!(
        bounded("x dials lax", x.connect(addr(&lax))).await.unwrap(),
        id("lax")
    );

    serves_a_good_peer(&a, &ca, "b").await;
}

#[tokio::test]
async fn a_node_whose_certificate_lacks_its_name_does_not_start() {
    let ca = TestCa::new("cluster CA");
    let err = Node::start(plain("y").tls(tls(&ca.node("z"), &ca)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Config(ConfigError::Tls(TlsConfigError::OwnNameNotCertified { name })) if name == "y"),
        "{err}"
    );
    assert!(err.to_string().contains("without_node_names"), "{err}");
    // A name that cannot be a DNS name is carried by no certificate.
    let err = Node::start(plain("y@host").tls(tls(&ca.node("y@host"), &ca)))
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Config(ConfigError::Tls(TlsConfigError::OwnNameNotCertified { .. }))
        ),
        "{err}"
    );
    // Without the binding, the same settings start.
    let node = start(plain("y").tls(tls(&ca.node("z"), &ca).without_node_names())).await;
    bounded("shutdown", node.shutdown()).await;
}

#[test]
fn bad_tls_settings_are_refused_with_a_clear_error() {
    let ca = TestCa::new("cluster CA");
    let a = ca.node("a");
    let b = ca.node("b");
    let err = |r: Result<TlsConfig, TlsConfigError>| r.unwrap_err();
    assert!(matches!(
        err(TlsConfig::from_pem(
            b"not pem",
            a.key.as_bytes(),
            ca.cert.as_bytes()
        )),
        TlsConfigError::NoCertificate {
            what: "certificate"
        }
    ));
    assert!(matches!(
        err(TlsConfig::from_pem(
            a.cert.as_bytes(),
            b"",
            ca.cert.as_bytes()
        )),
        TlsConfigError::NoKey
    ));
    assert!(matches!(
        err(TlsConfig::from_pem(
            a.cert.as_bytes(),
            a.key.as_bytes(),
            b""
        )),
        TlsConfigError::NoCertificate { what: "CA" }
    ));
    // b's key with a's certificate.
    let mismatch = err(TlsConfig::from_pem(
        a.cert.as_bytes(),
        b.key.as_bytes(),
        ca.cert.as_bytes(),
    ));
    assert!(
        matches!(mismatch, TlsConfigError::KeyMismatch(_)),
        "{mismatch}"
    );
    assert!(matches!(
        err(TlsConfig::from_pem_files("/nonexistent/a.pem", "k", "c")),
        TlsConfigError::Read {
            what: "certificate",
            ..
        }
    ));
    let good = tls(&a, &ca);
    assert_eq!(good.server_name(), "locks");
    assert!(matches!(
        good.with_server_name("not a name!").unwrap_err(),
        TlsConfigError::BadServerName(_)
    ));
}

#[test]
fn the_toml_file_takes_tls_settings() {
    let ca = TestCa::new("cluster CA");
    let a = ca.node("a");
    let dir = std::env::temp_dir().join(format!("locks-tls-toml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.pem"), &a.cert).unwrap();
    std::fs::write(dir.join("a.key"), &a.key).unwrap();
    std::fs::write(dir.join("ca.pem"), &ca.cert).unwrap();
    let toml = "name = \"a\"\nlisten = \"127.0.0.1:0\"\ncookie = \"c\"\n\n[tls]\ncert = \"a.pem\"\nkey = \"a.key\"\nca = \"ca.pem\"\nserver_name = \"my-cluster\"\nnode_names = false\n";
    std::fs::write(dir.join("a.toml"), toml).unwrap();
    let config = NodeConfig::from_toml_file(dir.join("a.toml")).unwrap();
    let tls = config.cluster().tls.as_ref().expect("TLS settings");
    assert_eq!(tls.server_name(), "my-cluster");
    assert!(!tls.binds_node_names());

    // A key that does not match the certificate is a configuration error.
    std::fs::write(dir.join("a.key"), ca.node("b").key).unwrap();
    let err = NodeConfig::from_toml_file(dir.join("a.toml")).unwrap_err();
    assert!(
        matches!(err, ConfigError::Tls(TlsConfigError::KeyMismatch(_))),
        "{err}"
    );
    // A missing file names itself.
    std::fs::remove_file(dir.join("ca.pem")).unwrap();
    let err = NodeConfig::from_toml_file(dir.join("a.toml")).unwrap_err();
    assert!(err.to_string().contains("ca.pem"), "{err}");
    // An unknown key in [tls] is refused.
    let err = NodeConfig::from_toml_str(
        "name = \"a\"\n[tls]\ncert = \"x\"\nkey = \"y\"\nca = \"z\"\ncipher = \"q\"\n",
    )
    .unwrap_err();
    assert!(matches!(err, ConfigError::Toml(_)), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
