//! gdict: a dictionary replicated on three nodes with `locks-leader`, through a netsplit.
//!
//! Three in-process nodes on 127.0.0.1 (ephemeral ports) run one replica each. Writes go
//! through the leader; then node `a` is cut off from `b` and `c`, and the split heals. Twice:
//! in majority mode (the default), `a` alone has no leader and refuses writes while `b` and `c`
//! elect one and take them, so no confirmed write is lost; in islands mode (the original's),
//! each side elects its own leader and takes writes, and when the split heals one leader
//! remains and the replicas merge.
//!
//! ```sh
//! cargo run -p examples --example gdict
//! ```

use examples::gdict::Gdict;
use locks_leader::{ElectionMode, GroupOptions};
use locks_server::{Node, NodeConfig};
use std::net::SocketAddr;
use std::time::Duration;

type Dict = Gdict<i64>;

async fn node(name: &str) -> Node {
    let config = NodeConfig::new(name)
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie("gdict-example")
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100));
    Node::start(config).await.expect("node starts")
}

/// Waits (bounded) until every node sees exactly `names`.
async fn sees(nodes: &[&Node], names: &[&str]) {
    for node in nodes {
        examples::sees(node, names).await;
    }
}

/// Waits (bounded) until the replicas agree on a leader; returns a description of it.
async fn leader(dicts: &[&Dict]) -> String {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let terms: Vec<_> = dicts.iter().map(|d| d.member().leader()).collect();
            if let Some(Some(t)) = terms.first()
                && terms.iter().all(|x| x.as_ref() == Some(t))
            {
                return format!("{} (term epoch {})", t.leader.node(), t.epoch);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("a leader is agreed")
}

async fn show(label: &str, dicts: &[(&str, &Dict)]) {
    for (name, d) in dicts {
        println!(
            "  {label} {name}: {:?}",
            d.to_list().await.expect("replica")
        );
    }
}

#[tokio::main]
async fn main() {
    run(ElectionMode::Majority).await;
    run(ElectionMode::Islands).await;
}

async fn run(mode: ElectionMode) {
    println!("== {mode:?} mode");
    let options = GroupOptions::default().with_mode(mode);
    let (a, b, c) = (node("a").await, node("b").await, node("c").await);
    b.connect(a.local_addr().unwrap()).await.unwrap();
    c.connect(a.local_addr().unwrap()).await.unwrap();
    c.connect(b.local_addr().unwrap()).await.unwrap();
    sees(&[&a, &b, &c], &["a", "b", "c"]).await;

    let (da, db, dc) = (
        Dict::with_options(&a, "gdict", options.clone())
            .await
            .unwrap(),
        Dict::with_options(&b, "gdict", options.clone())
            .await
            .unwrap(),
        Dict::with_options(&c, "gdict", options).await.unwrap(),
    );
    println!("leader of a, b, c: {}", leader(&[&da, &db, &dc]).await);
    db.store("apples", 3).await.unwrap();
    dc.store("pears", 5).await.unwrap();
    // The writer's replica has its write once the call returns; the others soon after.
    println!(
        "c fetches pears right after storing: {:?}",
        dc.fetch("pears").await.unwrap()
    );
    show("before the split", &[("a", &da), ("b", &db), ("c", &dc)]).await;

    println!("cutting a off from b and c");
    a.disconnect("b").await.unwrap();
    a.disconnect("c").await.unwrap();
    sees(&[&a], &["a"]).await;
    sees(&[&b, &c], &["b", "c"]).await;
    let expected = match mode {
        ElectionMode::Majority => {
            println!("  a alone stores plums: {:?}", da.store("plums", 7).await);
            3
        }
        ElectionMode::Islands => {
            println!("  leader of a alone: {}", leader(&[&da]).await);
            da.store("plums", 7).await.unwrap();
            4
        }
    };
    println!("  leader of b, c:    {}", leader(&[&db, &dc]).await);
    db.store("figs", 11).await.unwrap();
    show("split", &[("a", &da), ("b", &db), ("c", &dc)]).await;

    println!("healing");
    a.reconnect("b").await.unwrap();
    a.reconnect("c").await.unwrap();
    sees(&[&a, &b, &c], &["a", "b", "c"]).await;
    println!("  leader of a, b, c: {}", leader(&[&da, &db, &dc]).await);
    // Merging takes a few messages after the election.
    let merged = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let lists = [
                da.to_list().await.unwrap(),
                db.to_list().await.unwrap(),
                dc.to_list().await.unwrap(),
            ];
            if lists[0].len() == expected && lists.iter().all(|l| l == &lists[0]) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    merged.expect("the replicas merge");
    show("healed", &[("a", &da), ("b", &db), ("c", &dc)]).await;
    for n in [&a, &b, &c] {
        n.shutdown().await;
    }
}
