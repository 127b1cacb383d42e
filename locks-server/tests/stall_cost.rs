//! What the node's thread pays for reads and releases of a large table: a measurement, not a
//! check (every test here is `#[ignore]`d and asserts nothing about time). Run in release:
//!
//! ```text
//! STALL_LOCKS=1000000 cargo test --release -p locks-server --test stall_cost -- --ignored --nocapture --test-threads 1
//! ```
//!
//! Each line gives the wall time of one operation and the longest turn the node's thread took
//! meanwhile (a task on that thread ticks every millisecond; the longest gap between its ticks
//! is the longest anything else on the thread, such as a heartbeat, had to wait). The line
//! `nothing` is that gap while the node does nothing: the machine's own noise (on a shared
//! machine, `nice -n -10` in front of the test binary steadies the figures).

use locks_core::{AgentId, LockId, Mode, NodeId};
use locks_server::embed::{FastLock, NodeInternals, Touched, sim};
use locks_server::{ClusterQuery, Node, NodeConfig};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn locks() -> usize {
    std::env::var("STALL_LOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// The 16 sessions of the attack trial, each its own agent of node `of`.
const SESSIONS: u64 = 16;

fn agent(of: &NodeId, session: u64) -> AgentId {
    AgentId::new(of.clone(), 1, 1_000 + session)
}

/// Fills `node` with `n` locks in X, spread over the sessions' agents of node `of`, each under
/// the session's own root (`["s<i>", k]`, as a client's keys under one prefix).
fn fill(node: &Node, of: &NodeId, n: usize, touched: &[Touched]) {
    let per = n.div_ceil(SESSIONS as usize);
    for s in 0..SESSIONS {
        let a = agent(of, s);
        let root = format!("s{s}");
        for k in 0..per {
            let lock = LockId::new(vec![root.clone(), format!("{k:08}")]).unwrap();
            let got = sim::fast_lock(node.local_table(), &a, &lock, Mode::X, &touched[s as usize]);
            assert!(matches!(got, FastLock::Granted { .. }), "{got:?}");
        }
    }
}

/// A task on the node's thread that records the longest gap between its 1 ms ticks.
struct Ticker {
    stop: Arc<AtomicBool>,
    longest_us: Arc<AtomicU64>,
}

impl Ticker {
    fn start(node: &Node) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let longest_us = Arc::new(AtomicU64::new(0));
        let (s, l) = (stop.clone(), longest_us.clone());
        drop(node.spawn(async move {
            let mut last = Instant::now();
            while !s.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let now = Instant::now();
                l.fetch_max(
                    now.duration_since(last).as_micros() as u64,
                    Ordering::Relaxed,
                );
                last = now;
            }
        }));
        Ticker { stop, longest_us }
    }

    fn reset(&self) {
        self.longest_us.store(0, Ordering::Relaxed);
    }

    fn longest(&self) -> Duration {
        Duration::from_micros(self.longest_us.load(Ordering::Relaxed))
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

async fn measure<T, F: std::future::Future<Output = T>>(ticker: &Ticker, what: &str, f: F) -> T {
    // Let the ticker take a turn first, so that its gap starts now.
    tokio::time::sleep(Duration::from_millis(20)).await;
    ticker.reset();
    let t = Instant::now();
    let out = f.await;
    let wall = t.elapsed();
    tokio::time::sleep(Duration::from_millis(20)).await;
    println!(
        "{what:<48} wall {:>10.1} ms   longest node-thread turn {:>10.1} ms",
        wall.as_secs_f64() * 1e3,
        ticker.longest().as_secs_f64() * 1e3
    );
    out
}

fn config(name: &str) -> NodeConfig {
    NodeConfig::new(name)
        .listen(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie("stall-cost")
        .start_delay(Duration::ZERO)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
async fn reads_and_releases_of_a_large_table() {
    let n = locks();
    let nodes = locks_testing::cluster::connected([config("a"), config("b")], BOUND).await;
    let (node, peer) = (nodes[0].clone(), nodes[1].clone());
    let b = peer.id().clone();
    let t = Instant::now();
    // On the node's thread, as the requests of sessions served there are (the allocator
    // then frees the records where they were made).
    let on = node.clone();
    let of = b.clone();
    node.spawn(async move {
        let touched: Vec<Touched> = (0..SESSIONS).map(|_| Touched::default()).collect();
        fill(&on, &of, n, &touched);
    })
    .await
    .unwrap();
    let total = n.div_ceil(SESSIONS as usize) * SESSIONS as usize + SESSIONS as usize;
    println!("filled {total} locks in {:.1} s", t.elapsed().as_secs_f64());
    let ticker = Ticker::start(&node);

    for max in [1000, 10_000] {
        let query = ClusterQuery {
            max_locks_per_node: max,
            ..ClusterQuery::default()
        };
        let view = measure(
            &ticker,
            &format!("Table (cluster_view, {max} locks)"),
            async { node.cluster_view(query).await.unwrap() },
        )
        .await;
        assert_eq!(view.nodes[node.id()].total_locks as usize, total);
        let view = measure(
            &ticker,
            &format!("Table asked by the peer ({max} locks)"),
            async { peer.cluster_view(query).await.unwrap() },
        )
        .await;
        assert!(view.missing.is_empty());
        assert_eq!(view.nodes[node.id()].total_locks as usize, total);
    }
    let modes = node.modes().clone();
    let graph = measure(&ticker, "Graph (cluster_view + wait_for_graph)", {
        let (node, on) = (node.clone(), node.clone());
        async move {
            on.spawn(async move {
                let view = node.cluster_view(ClusterQuery::default()).await.unwrap();
                view.wait_for_graph(&modes)
            })
            .await
            .unwrap()
        }
    })
    .await;
    println!("  graph edges {}", graph.edges.len());
    let snapshot = measure(&ticker, "Node::snapshot", async {
        node.snapshot().await.unwrap()
    })
    .await;
    assert_eq!(snapshot.locks.len(), total);
    drop(snapshot);

    // One session's end: its 1/16 of the table released on the node's thread (the fast path's
    // release, as a gRPC session served there ends).
    let table = node.local_table().clone();
    let one = agent(&b, 0);
    measure(&ticker, &format!("one session ends ({} locks)", n / 16), {
        let node = node.clone();
        let touched = Touched::all();
        async move {
            node.spawn(async move { sim::release(&table, &one, &touched) })
                .await
                .unwrap()
        }
    })
    .await;

    // Node `b` down: every lock of its agents goes to a ghost, and is released once the
    // lock-delay has passed.
    measure(&ticker, "nothing (the machine's noise)", async {
        tokio::time::sleep(Duration::from_millis(300)).await
    })
    .await;
    measure(&ticker, "node down (disconnect)", async {
        node.disconnect("b").await.unwrap();
    })
    .await;
    let left = measure(&ticker, "lock-delay, release", async {
        let t = Instant::now();
        loop {
            // Read on the node's thread, a slice at a time: a reader on another thread would
            // hold the shards' mutexes while its own thread may be preempted.
            let view = node.cluster_view(ClusterQuery::default()).await.unwrap();
            let left = view.nodes[node.id()].total_locks;
            if left == 0 || t.elapsed() > BOUND {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    println!("left {left} locks");
    drop(ticker);
    node.shutdown().await;
    peer.shutdown().await;
}

const BOUND: Duration = Duration::from_secs(120);
