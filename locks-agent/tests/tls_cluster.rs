//! Distributed locks over mutual TLS: the same scenarios as `erlang_distributed.rs` (a lock on
//! every node, a node that dies under a held lock) on a three-node cluster whose links are TLS
//! sessions, with certificates made at test time. Every wait is bounded by `BOUND`.

mod common;

use common::{COOKIE, Harness, bounded, cluster_with};
use locks_agent::Req;
use locks_core::{LockId, Mode, NodeId, lock_id};
use locks_server::{NodeConfig, TlsConfig};
use locks_testing::certs::TestCa;
use std::net::SocketAddr;
use std::time::Duration;

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn l(name: &str) -> LockId {
    lock_id![name]
}

/// A TLS node of `ca`'s cluster on 127.0.0.1 (ephemeral port).
fn config(name: &str, ca: &TestCa) -> NodeConfig {
    let cert = ca.node(name);
    let tls = TlsConfig::from_pem(
        cert.cert.as_bytes(),
        cert.key.as_bytes(),
        ca.cert.as_bytes(),
    )
    .expect("valid TLS settings");
    NodeConfig::new(name)
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie(COOKIE)
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .tls(tls)
}

/// Nodes with the given names, every pair connected over TLS.
async fn tls_cluster(names: &[&str], ca: &TestCa) -> Vec<Harness> {
    cluster_with(names, |name| config(name, ca)).await
}

#[tokio::test]
async fn a_lock_on_every_node_over_tls() {
    let ca = TestCa::new("cluster CA");
    let hs = tls_cluster(&["a", "b", "c"], &ca).await;
    let c1 = hs[0].client().await;
    let nodes = [n("a"), n("b"), n("c")];
    bounded(c1.txn().lock_on(l("A"), Mode::WRITE, &nodes, Req::All))
        .await
        .unwrap();
    for h in &hs {
        h.wait_granted(&c1.id(), &l("A")).await;
    }
    // A second client on another node waits for it, and gets it once the first ends.
    let mut c2 = hs[1].client().await;
    let waiting =
        c2.call(move |t| async move { t.lock_on(l("A"), Mode::WRITE, &nodes, Req::All).await });
    // Queued on the first node (its gate: it leaves its place on the others until it holds
    // that one).
    hs[0].wait_blocked(&c2.id(), &l("A")).await;
    c1.kill();
    waiting.result().await.unwrap();
    for h in &hs {
        h.wait_granted(&c2.id(), &l("A")).await;
    }
    for h in &hs {
        let refusals = h.node.handshake_refusals().borrow().clone();
        assert_eq!(refusals.total(), 0, "{}: {refusals:?}", h.node.name());
    }
}

#[tokio::test]
async fn a_node_that_dies_under_a_lock_over_tls() {
    let ca = TestCa::new("cluster CA");
    common::a_node_dies_under_a_lock(tls_cluster(&["a", "b", "c"], &ca).await).await;
}
