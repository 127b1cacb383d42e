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

use actix::prelude::*;
use locks_core::proto::{AgentMessage, EntryState, ServerRequest};
use locks_core::{LockId, Mode};
use locks_server::embed::{Deliver, FastLock, NodeInternals, Presence, Touched};
use locks_server::{ClusterQuery, Node, NodeConfig, PeerQuotas};
use locks_testing::wait::within;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

fn locks() -> usize {
    std::env::var("STALL_LOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// The 16 sessions of the attack trial, each under a root of its own (`["s<i>", k]`, as a
/// client's keys under one prefix): session 0 a transaction of the node (a client session
/// served there), the others agents of the peer, whose requests come over the link.
const SESSIONS: u64 = 16;

/// Requests of the peer's sessions on their way at most. A ping between two nodes waits
/// behind the requests sent before it and their notices: with a few thousand on their way, a
/// slow (debug) build on a busy machine took longer than the lease to answer one, and the peer
/// declared the node down mid-fill. (Also far under what a link queues before it closes a
/// connection that falls behind, `cluster::remote::MAX_OVERFLOW`.)
const IN_FLIGHT: u64 = 1024;

fn lock(session: u64, k: usize) -> LockId {
    LockId::new(vec![format!("s{session}"), format!("{k:08}")]).unwrap()
}

/// Fills session 0 with `per` locks in X, on `node`'s thread, as the requests of sessions
/// served there are (the allocator then frees the records where they were made). The thread
/// is given up every 1024 locks, as between a session's requests: its links answer their
/// pings meanwhile, so the peer does not see the node's lease run out during the fill.
async fn fill_local(node: &Node, per: usize) -> (Presence, Touched) {
    let on = node.clone();
    node.spawn(async move {
        let session = on.begin_agent();
        let touched = Touched::default();
        for k in 0..per {
            let got = on
                .local_table()
                .fast_lock(&session, &lock(0, k), Mode::X, &touched);
            assert!(matches!(got, FastLock::Granted { .. }), "{got:?}");
            if k % 1024 == 1023 {
                tokio::task::yield_now().await;
            }
        }
        (session, touched)
    })
    .await
    .unwrap()
}

/// A session agent of the peer: passes on each grant it is told of, and a node down (which
/// would lose the requests on their way: the fill then fails at once rather than at its bound).
struct Counter(mpsc::UnboundedSender<Result<(), String>>);

impl Actor for Counter {
    type Context = Context<Self>;
}

impl Handler<Deliver> for Counter {
    type Result = ();

    fn handle(&mut self, msg: Deliver, _ctx: &mut Self::Context) {
        match msg {
            Deliver::Message(AgentMessage::Notice(n))
                if matches!(n.state, EntryState::Granted(_)) =>
            {
                let _ = self.0.send(Ok(()));
            }
            Deliver::NodeDown(node, cause) => {
                let _ = self.0.send(Err(format!("{node} down ({cause:?})")));
            }
            _ => {}
        }
    }
}

/// Fills `node` with `per` locks in X for each of the other sessions, agents of `peer` whose
/// requests go over the link (at most [`IN_FLIGHT`] at a time, each batch waited for by its
/// grants). Returns the agents' actors, which must outlive the measurement.
async fn fill_remote(node: &Node, peer: &Node, per: usize) -> Vec<Addr<Counter>> {
    let (tx, mut grants) = mpsc::unbounded_channel();
    let mut sessions = Vec::new();
    let mut actors = Vec::new();
    for s in 1..SESSIONS {
        let fresh = peer.next_agent_id();
        let port = peer.router().for_agent(&fresh);
        let tx = tx.clone();
        let addr = Counter::start_in_arbiter(peer.arbiter(), move |_| Counter(tx));
        peer.router()
            .register_agent(fresh, addr.clone().recipient(), None);
        sessions.push((s, port));
        actors.push(addr);
    }
    let (mut sent, mut granted) = (0u64, 0u64);
    let mut wait_for = async |target: u64, granted: &mut u64| {
        within(BOUND, "the peer's sessions granted", async {
            while *granted < target {
                match grants.recv().await.expect("the counters run") {
                    Ok(()) => *granted += 1,
                    Err(down) => panic!("the peer saw {down} during the fill"),
                }
            }
        })
        .await;
    };
    for (s, port) in &sessions {
        for k in 0..per {
            let request = ServerRequest::Lock {
                agent: port.agent().clone(),
                lock: lock(*s, k),
                mode: Mode::X,
            };
            port.send_server(node.id(), request).unwrap();
            sent += 1;
            if sent - granted >= IN_FLIGHT {
                wait_for(sent - IN_FLIGHT / 2, &mut granted).await;
            }
        }
    }
    wait_for(sent, &mut granted).await;
    actors
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

/// A node of the trial; its peer's agents may take the whole table.
fn config(name: &str) -> NodeConfig {
    NodeConfig::new(name)
        .listen(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie("stall-cost")
        .start_delay(Duration::ZERO)
        .peer_quotas(PeerQuotas {
            locks: u64::MAX,
            queued: u64::MAX,
            bytes: u64::MAX,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
async fn reads_and_releases_of_a_large_table() {
    let n = locks();
    let nodes = locks_testing::cluster::connected([config("a"), config("b")], BOUND).await;
    let (node, peer) = (nodes[0].clone(), nodes[1].clone());
    let t = Instant::now();
    let per = n.div_ceil(SESSIONS as usize);
    let (session, touched) = fill_local(&node, per).await;
    let _counters = fill_remote(&node, &peer, per).await;
    let total = per * SESSIONS as usize + SESSIONS as usize;
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
    measure(&ticker, &format!("one session ends ({per} locks)"), {
        let node = node.clone();
        async move {
            node.spawn(async move { table.release(&session, &touched) })
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
