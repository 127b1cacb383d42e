//! Refused TLS connections cannot flood the log either: many plain-TCP connections and many
//! dials with another CA's certificate against a TLS node (127.0.0.1, ephemeral ports) write a
//! bounded number of WARN lines, the rest at DEBUG, and every one is counted by cause. The
//! whole output of the test binary is captured (a global subscriber with a writer of its
//! own), so this file holds one test.

mod common;

use common::logs::{Capture, send_and_wait_closed};
use common::net::{loopback, within};
use locks_server::{Node, NodeConfig, TlsConfig};
use locks_testing::certs::{NodeCert, TestCa};
use std::time::{Duration, Instant};

const BOUND: Duration = Duration::from_secs(20);
/// Bad connections of each kind.
const N: usize = 30;

fn tls(cert: &NodeCert, ca: &TestCa) -> TlsConfig {
    TlsConfig::from_pem(
        cert.cert.as_bytes(),
        cert.key.as_bytes(),
        ca.cert.as_bytes(),
    )
    .unwrap()
}

#[tokio::test]
async fn an_attack_of_bad_tls_connections_writes_a_bounded_number_of_warnings() {
    let capture = Capture::install();
    let started = Instant::now();

    let ca = TestCa::new("cluster CA");
    let other = TestCa::new("other CA");
    let start = |config: NodeConfig| async move {
        within(BOUND, "start", Node::start(config)).await.unwrap()
    };
    let a = start(
        NodeConfig::new("a")
            .listen(loopback())
            .cookie("secret")
            .tls(tls(&ca.node("a"), &ca)),
    )
    .await;
    let addr = a.local_addr().unwrap();
    let mut refusals = a.handshake_refusals();
    // Trusts a's CA (so it goes on to present its own certificate) but holds another's.
    let intruder = start(
        NodeConfig::new("m")
            .cookie("secret")
            .reconnect_backoff(Duration::from_secs(60), Duration::from_secs(60))
            .tls(tls(&other.node("m"), &ca)),
    )
    .await;

    for _ in 0..N {
        // A plain node's first frame, and plain garbage.
        send_and_wait_closed(addr, &[0, 0, 0, 5, 0xde, 0xad, 0xbe, 0xef, 0x01]).await;
        send_and_wait_closed(addr, b"GET / HTTP/1.1\r\n\r\n").await;
        assert!(
            within(BOUND, "intruder dials", intruder.connect(addr))
                .await
                .is_err()
        );
    }
    let seen = within(
        BOUND,
        "every bad connection refused",
        refusals.wait_for(|r| r.tls_not_tls >= 2 * N as u64 && r.tls_untrusted >= N as u64),
    )
    .await
    .map(|r| r.clone())
    .expect("the node runs");
    within(BOUND, "shutdown", intruder.shutdown()).await;
    within(BOUND, "shutdown", a.shutdown()).await;

    // At most one warning per reason per interval, however many connections there were: two
    // reasons here (not TLS, untrusted), each warned about at least once.
    let intervals = 1 + started.elapsed().as_secs() / locks_server::embed::WARN_INTERVAL.as_secs();
    let warnings: Vec<String> = capture
        .lines("WARN", "a")
        .into_iter()
        .filter(|l| l.contains("handshake refused"))
        .collect();
    assert!(
        (2..=3 * intervals).contains(&(warnings.len() as u64)),
        "{} warnings for {seen:?}:\n{}",
        warnings.len(),
        warnings.join("\n")
    );
    // The rest are still there, at DEBUG.
    let refused = capture
        .lines("DEBUG", "a")
        .iter()
        .filter(|l| l.contains("handshake refused"))
        .count();
    assert!(
        refused + warnings.len() >= 3 * N,
        "{refused} at DEBUG, {} warnings",
        warnings.len()
    );
}
