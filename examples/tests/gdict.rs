//! The gdict example's dictionary: Erlang's local_dict scenario (its `gdict` test suite) with
//! erase, a netsplit over TCP on 127.0.0.1 whose islands' writes merge on heal (islands mode),
//! and the same netsplit in majority mode, where neither half of two nodes takes writes. Every
//! wait is bounded.

use examples::gdict::{Gdict, GdictError};
use locks_leader::{CallError, GroupOptions};
use locks_server::{Node, NodeConfig};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(30);

async fn bounded<F: Future>(f: F) -> F::Output {
    locks_testing::wait::within(BOUND, "bounded wait", f).await
}

/// Polls `f` until it returns true (bounded).
async fn eventually<Fut: Future<Output = bool>>(f: impl FnMut() -> Fut) {
    locks_testing::wait::until(BOUND, "condition", Duration::from_millis(5), f).await
}

#[tokio::test]
async fn erlang_local_dict_with_erase() {
    let node = Node::start(NodeConfig::new("gdict-local")).await.unwrap();
    let mut dicts: Vec<Gdict<i64>> = Vec::new();
    for _ in 0..3 {
        dicts.push(bounded(Gdict::new(&node, "local")).await.unwrap());
    }
    for (i, d) in dicts.iter().enumerate() {
        bounded(d.store("a", 17 + i as i64)).await.unwrap();
        assert_eq!(d.fetch("a").await.unwrap(), Some(17 + i as i64));
    }
    bounded(dicts[1].store("b", 1)).await.unwrap();
    bounded(dicts[2].erase("a")).await.unwrap();
    assert_eq!(dicts[2].fetch("a").await.unwrap(), None);
    for d in &dicts {
        eventually(|| async { d.keys().await.unwrap() == vec!["b".to_string()] }).await;
    }
    node.shutdown().await;
}

/// A cluster node on 127.0.0.1 whose heartbeat (and so its lease, lock-delay and start-delay,
/// see `locks_server::lease`) is shorter than the default, so that it grants locks, and a
/// dictionary gets a leader, well within a write's timeout after it starts.
async fn cluster_node(name: &str) -> Node {
    let config = NodeConfig::new(name)
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie("gdict-test")
        .heartbeat(Duration::from_millis(200), Duration::from_secs(1))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100));
    Node::start(config).await.unwrap()
}

async fn sees(node: &Node, n: usize) {
    let mut events = node.subscribe_nodes();
    bounded(async {
        while node.nodes().len() != n {
            events.recv().await.expect("node running");
        }
    })
    .await
}

#[tokio::test]
async fn gdict_islands_take_writes_and_merge_on_heal() {
    let (a, b) = (cluster_node("gd-a").await, cluster_node("gd-b").await);
    b.connect(a.local_addr().unwrap()).await.unwrap();
    sees(&a, 2).await;
    sees(&b, 2).await;
    let da: Gdict<i64> = bounded(Gdict::with_options(&a, "islands", GroupOptions::islands()))
        .await
        .unwrap();
    let db: Gdict<i64> = bounded(Gdict::with_options(&b, "islands", GroupOptions::islands()))
        .await
        .unwrap();
    for d in [&da, &db] {
        bounded(d.member().wait_for_leader()).await.unwrap();
    }
    bounded(da.store("shared", 1)).await.unwrap();
    eventually(|| async { db.fetch("shared").await.unwrap() == Some(1) }).await;
    a.disconnect("gd-b").await.unwrap();
    sees(&a, 1).await;
    sees(&b, 1).await;
    bounded(da.store("left", 2)).await.unwrap();
    bounded(db.store("right", 3)).await.unwrap();
    assert_eq!(da.fetch("right").await.unwrap(), None);
    assert_eq!(db.fetch("left").await.unwrap(), None);
    a.reconnect("gd-b").await.unwrap();
    sees(&a, 2).await;
    let want = vec![
        ("left".to_string(), 2),
        ("right".to_string(), 3),
        ("shared".to_string(), 1),
    ];
    for d in [&da, &db] {
        eventually(|| async { d.to_list().await.unwrap() == want }).await;
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn gdict_majority_halves_refuse_writes_until_the_heal() {
    let (a, b) = (cluster_node("gm-a").await, cluster_node("gm-b").await);
    b.connect(a.local_addr().unwrap()).await.unwrap();
    sees(&a, 2).await;
    sees(&b, 2).await;
    let da: Gdict<i64> = bounded(Gdict::new(&a, "majority")).await.unwrap();
    let db: Gdict<i64> = bounded(Gdict::new(&b, "majority")).await.unwrap();
    for d in [&da, &db] {
        bounded(d.member().wait_for_leader()).await.unwrap();
    }
    bounded(da.store("shared", 1)).await.unwrap();
    eventually(|| async { db.fetch("shared").await.unwrap() == Some(1) }).await;
    a.disconnect("gm-b").await.unwrap();
    sees(&a, 1).await;
    sees(&b, 1).await;
    // One node of two is no majority: both halves refuse.
    let refused = GdictError::Call(CallError::NoMajority { up: 1, group: 2 });
    assert_eq!(bounded(da.store("left", 2)).await, Err(refused.clone()));
    assert_eq!(bounded(db.store("right", 3)).await, Err(refused));
    a.reconnect("gm-b").await.unwrap();
    sees(&a, 2).await;
    sees(&b, 2).await;
    // Held calls wait for the leader the heal brings (bounded, not timed).
    eventually(|| async { da.store("after", 4).await.is_ok() }).await;
    for d in [&da, &db] {
        eventually(|| async {
            d.to_list().await.unwrap() == vec![("after".to_string(), 4), ("shared".to_string(), 1)]
        })
        .await;
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// Majority mode, three nodes: `c` is cut off holding `gone`, the majority side erases it (a
/// confirmed erase) and overwrites `kept`, then the network heals. The erase and the overwrite
/// must survive `c`'s rejoining with its older copies (entries carry the stamp of the write
/// that made them, and the newer stamp wins; before, `c` merged `gone` back into the leader).
#[tokio::test]
async fn gdict_majority_an_erase_survives_a_stale_replica_rejoining() {
    let a = cluster_node("ge-a").await;
    let b = cluster_node("ge-b").await;
    let c = cluster_node("ge-c").await;
    b.connect(a.local_addr().unwrap()).await.unwrap();
    c.connect(a.local_addr().unwrap()).await.unwrap();
    c.connect(b.local_addr().unwrap()).await.unwrap();
    for n in [&a, &b, &c] {
        sees(n, 3).await;
    }
    let options = || GroupOptions::majority().nodes(["ge-a", "ge-b", "ge-c"].map(node_id));
    let mut dicts: Vec<Gdict<i64>> = Vec::new();
    for n in [&a, &b, &c] {
        dicts.push(
            bounded(Gdict::with_options(n, "erase", options()))
                .await
                .unwrap(),
        );
    }
    for d in &dicts {
        bounded(d.member().wait_for_leader()).await.unwrap();
    }
    bounded(dicts[0].store("gone", 1)).await.unwrap();
    bounded(dicts[0].store("kept", 1)).await.unwrap();
    let both = vec![("gone".to_string(), 1), ("kept".to_string(), 1)];
    for d in &dicts {
        eventually(|| async { d.to_list().await.unwrap() == both }).await;
    }
    c.disconnect("ge-a").await.unwrap();
    c.disconnect("ge-b").await.unwrap();
    sees(&c, 1).await;
    sees(&a, 2).await;
    sees(&b, 2).await;
    // The majority side erases and overwrites (held calls wait for its leader, bounded).
    eventually(|| async { dicts[0].erase("gone").await.is_ok() }).await;
    bounded(dicts[1].store("kept", 2)).await.unwrap();
    assert_eq!(dicts[2].to_list().await.unwrap(), both);
    c.reconnect("ge-a").await.unwrap();
    c.reconnect("ge-b").await.unwrap();
    for n in [&a, &b, &c] {
        sees(n, 3).await;
    }
    let want = vec![("kept".to_string(), 2)];
    for d in &dicts {
        eventually(|| async {
            d.member().leader().is_some() && d.to_list().await.unwrap() == want
        })
        .await;
    }
    // And it stays so once `c` follows the leader and has merged (a write after the heal is
    // answered once a majority applied it, and `c`'s merge was cast before).
    bounded(dicts[2].store("after", 3)).await.unwrap();
    let want = vec![("after".to_string(), 3), ("kept".to_string(), 2)];
    for d in &dicts {
        eventually(|| async { d.to_list().await.unwrap() == want }).await;
    }
    for n in [a, b, c] {
        n.shutdown().await;
    }
}

fn node_id(name: &str) -> locks_core::NodeId {
    locks_core::NodeId::new(name).unwrap()
}
