//! W3, W4 and W5: several clients against each other. Every client is a task on the node's own
//! thread (the fastest place for a client; the same condition as the Erlang original, where
//! clients and servers share one VM).
//!
//! - **W3** (hot lock): 8 clients, each 2,000 transactions of `begin`, `lock([w3, hot], write)`,
//!   `end`. Total transactions/s, and the hand-off latency: from the moment the holder calls
//!   `end` to the moment the next holder's `lock` returns, counted only for grants whose request
//!   was made before that release (a grant to a client that found the lock free is no hand-off).
//! - **W4** (hierarchy): 8 clients each repeat `lock([w4, tab, i], write)` on their own child
//!   `i`, while a 9th repeats `lock([w4, tab], read)` on the parent, each in a transaction of its
//!   own, for a fixed time (1 s). Throughput of each kind, p50/p99 of one transaction of each.
//! - **W5** (deadlock resolution): transaction `A` locks `[w5, a, k]` and `B` locks
//!   `[w5, b, k]` (both granted); then `A` asks for `[w5, b, k]` and `B` for `[w5, a, k]`, with
//!   `lock_nowait`; both call `await_all_locks`, and each ends as soon as it holds everything.
//!   The time is from just before the second (cycle-closing) request until the later of the two
//!   holds everything (which includes the first one's `end`). 1,000 repetitions per round with
//!   fresh `k`; p50/p99. The 3-cycle is the same with `A -> B -> C -> A`. A cycle not resolved
//!   within 2 s is counted as unresolved (and its transactions dropped); more than 3 in a round
//!   end the round.

use super::floors::Floor;
use super::rig::{ClientResult, Rig, err};
use super::stats::{Sample, percentiles};
use super::uncontended::fail;
use super::{Check, Ctx, Row, Spec};
use futures::future::join_all;
use locks_agent::{Options, Transaction, begin_transaction};
use locks_core::{Key, LockId, Mode, lock_id};
use locks_server::Node;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Clients of W3 and writers of W4.
pub const CLIENTS: usize = 8;

async fn join_clients<T: 'static>(
    handles: Vec<tokio::task::JoinHandle<ClientResult<T>>>,
) -> ClientResult<Vec<T>> {
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.map_err(err)??);
    }
    Ok(out)
}

/// One W3 round; `yield_holding`: each client yields once while it holds the lock, so that
/// the others queue behind it and every grant is a hand-off through the agents.
async fn w3_round(node: Node, per_client: u64, yield_holding: bool) -> ClientResult<Sample> {
    let base = Instant::now();
    let since = move || base.elapsed().as_nanos() as u64;
    // When the current holder called `end` (ns since `base`; 0: nobody yet).
    let released = Arc::new(AtomicU64::new(0));
    let hot: LockId = lock_id!["w3", "hot"];
    let handles = (0..CLIENTS)
        .map(|_| {
            let (node, released, hot) = (node.clone(), released.clone(), hot.clone());
            actix::spawn(async move {
                let mut handoffs = Vec::with_capacity(per_client as usize);
                for _ in 0..per_client {
                    let asked = since();
                    let txn = begin_transaction(&node, Options::default())
                        .await
                        .map_err(err)?;
                    txn.lock(hot.clone(), Mode::WRITE).await.map_err(err)?;
                    let granted = since();
                    let release = released.load(Ordering::Relaxed);
                    if release != 0 && release >= asked {
                        handoffs.push(granted.saturating_sub(release));
                    }
                    if yield_holding {
                        tokio::task::yield_now().await;
                    }
                    released.store(since(), Ordering::Relaxed);
                    txn.end().await.map_err(err)?;
                }
                Ok(handoffs)
            })
        })
        .collect();
    let handoffs: Vec<u64> = join_clients(handles).await?.concat();
    let elapsed = base.elapsed();
    let total = CLIENTS as u64 * per_client;
    let share = handoffs.len() as f64 / total as f64;
    Ok(Sample::new(total, elapsed, handoffs).with_extra("hand-off share", share))
}

/// W3.
pub fn w3(ctx: &mut Ctx) -> Vec<Row> {
    let specs = vec![
        Spec::rate("W3 hot lock (p: hand-off)", "txn/s", Floor::ActixSame).goal(
            "orig 13-19k/s; goal >=130k/s, ahead of Redis R-HOT",
            Check::RateAtLeast(130_000.0),
        ),
        // Every grant a hand-off through the agents: the row the goal is really about.
        Spec::rate(
            "W3 hot lock, holder yields (p: hand-off)",
            "txn/s",
            Floor::ActixSame,
        )
        .goal(
            "orig 13-19k/s, every grant a hand-off; goal >=130k/s",
            Check::RateAtLeast(130_000.0),
        ),
    ];
    let rig = match Rig::start(ctx, "w3") {
        Ok(rig) => rig,
        Err(e) => return fail(&specs, &e),
    };
    let per_client = ctx.cfg.size(2_000, 200);
    let rows = ctx.run_rounds(&specs, |_| {
        Ok(vec![
            rig.on_node(ctx, w3_round(rig.node().clone(), per_client, false))?,
            rig.on_node(ctx, w3_round(rig.node().clone(), per_client, true))?,
        ])
    });
    rig.stop(ctx);
    rows
}

async fn repeat_transactions(
    node: Node,
    lock: LockId,
    mode: Mode,
    deadline: Instant,
) -> ClientResult<Vec<u64>> {
    let mut lat = Vec::new();
    while Instant::now() < deadline {
        let t = Instant::now();
        let txn = begin_transaction(&node, Options::default())
            .await
            .map_err(err)?;
        txn.lock(lock.clone(), mode).await.map_err(err)?;
        txn.end().await.map_err(err)?;
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Ok(lat)
}

async fn w4_round(node: Node, duration: Duration) -> ClientResult<Vec<Sample>> {
    let start = Instant::now();
    let deadline = start + duration;
    let tab = Key::from("tab");
    let writers = (0..CLIENTS)
        .map(|i| {
            let child = LockId::from([Key::from("w4"), tab.clone(), Key::Int(i as i64)]);
            actix::spawn(repeat_transactions(
                node.clone(),
                child,
                Mode::WRITE,
                deadline,
            ))
        })
        .collect();
    let reader = actix::spawn(repeat_transactions(
        node.clone(),
        lock_id!["w4", "tab"],
        Mode::READ,
        deadline,
    ));
    let writes: Vec<u64> = join_clients(writers).await?.concat();
    let reads = reader.await.map_err(err)??;
    let elapsed = start.elapsed();
    Ok(vec![
        Sample::new(writes.len() as u64, elapsed, writes),
        Sample::new(reads.len() as u64, elapsed, reads),
    ])
}

/// W4.
pub fn w4(ctx: &mut Ctx) -> Vec<Row> {
    let specs = vec![
        Spec::rate("W4 child writes (8)", "txn/s", Floor::ActixSame).goal(
            "orig 14k/s; goal >=5x (70k/s)",
            Check::RateAtLeast(70_000.0),
        ),
        Spec::rate("W4 parent reads (1)", "txn/s", Floor::ActixSame)
            .goal("orig 1.8k/s; goal >=5x (9k/s)", Check::RateAtLeast(9_000.0)),
    ];
    let rig = match Rig::start(ctx, "w4") {
        Ok(rig) => rig,
        Err(e) => return fail(&specs, &e),
    };
    let duration = Duration::from_millis(ctx.cfg.size(1_000, 200));
    let rows = ctx.run_rounds(&specs, |_| {
        rig.on_node(ctx, w4_round(rig.node().clone(), duration))
    });
    rig.stop(ctx);
    rows
}

/// How long a deadlock may take before it counts as never resolved.
pub const UNRESOLVED_AFTER: Duration = Duration::from_secs(2);
/// Unresolved cycles after which a round gives up.
const MAX_UNRESOLVED: u64 = 3;

/// One cycle of `size` transactions on fresh names `k`: the time from the cycle-closing
/// request until every transaction has held everything, and until the first did; `None` when
/// the cycle was not resolved within [`UNRESOLVED_AFTER`].
async fn cycle(node: &Node, size: usize, k: u64) -> ClientResult<Option<(u64, u64)>> {
    let names: Vec<Key> = ["a", "b", "c"]
        .iter()
        .take(size)
        .map(|n| Key::from(*n))
        .collect();
    let lock =
        |j: usize| LockId::from([Key::from("w5"), names[j % size].clone(), Key::Int(k as i64)]);
    let mut txns: Vec<Transaction> = Vec::with_capacity(size);
    for j in 0..size {
        let txn = begin_transaction(node, Options::default())
            .await
            .map_err(err)?;
        txn.lock(lock(j), Mode::WRITE).await.map_err(err)?;
        txns.push(txn);
    }
    for (j, txn) in txns.iter().enumerate().take(size - 1) {
        txn.lock_nowait(lock(j + 1), Mode::WRITE)
            .await
            .map_err(err)?;
    }
    let t0 = Instant::now();
    txns[size - 1]
        .lock_nowait(lock(0), Mode::WRITE)
        .await
        .map_err(err)?;
    let finishing = txns.into_iter().map(|txn| async move {
        txn.await_all_locks().await.map_err(err)?;
        let at = Instant::now();
        txn.end().await.map_err(err)?;
        Ok::<_, String>(at)
    });
    match tokio::time::timeout(UNRESOLVED_AFTER, join_all(finishing)).await {
        Err(_) => Ok(None),
        Ok(done) => {
            let done = done.into_iter().collect::<Result<Vec<Instant>, String>>()?;
            let ns = |at: &Instant| at.duration_since(t0).as_nanos() as u64;
            let all = done.iter().map(ns).max().unwrap_or(0);
            let first = done.iter().map(ns).min().unwrap_or(0);
            Ok(Some((all, first)))
        }
    }
}

async fn w5_round(node: Node, size: usize, reps: u64, round: u64) -> ClientResult<Sample> {
    let (mut all, mut first, mut unresolved) = (Vec::new(), Vec::new(), 0u64);
    let start = Instant::now();
    for rep in 0..reps {
        match cycle(&node, size, round * reps + rep).await? {
            Some((a, f)) => {
                all.push(a);
                first.push(f);
            }
            None => {
                unresolved += 1;
                if unresolved > MAX_UNRESOLVED {
                    break;
                }
            }
        }
    }
    let elapsed = start.elapsed();
    let first_p50 = percentiles(&first).map_or(0.0, |p| p.p50 / 1e3);
    Ok(Sample::new(all.len() as u64, elapsed, all)
        .with_extra("p50 first holds all (us)", first_p50)
        .with_extra("unresolved", unresolved as f64))
}

/// W5, 2- and 3-cycles.
pub fn w5(ctx: &mut Ctx) -> Vec<Row> {
    let specs = vec![
        Spec::latency("W5 2-cycle resolved", "cycle/s", Floor::ActixSame).goal(
            "orig p50 120us; goal >=5x (24us), none unresolved",
            Check::P50AtMostUs(24.0),
        ),
        Spec::latency("W5 3-cycle resolved", "cycle/s", Floor::ActixSame).goal(
            "orig: ~5% never resolved; goal: none unresolved",
            Check::NoneUnresolved,
        ),
    ];
    let rig = match Rig::start(ctx, "w5") {
        Ok(rig) => rig,
        Err(e) => return fail(&specs, &e),
    };
    let reps = ctx.cfg.size(1_000, 100);
    let unresolved = [AtomicU64::new(0), AtomicU64::new(0)];
    let mut rows = ctx.run_rounds(&specs, |round| {
        let mut samples = Vec::new();
        for (i, size) in [2usize, 3].into_iter().enumerate() {
            let s = rig.on_node(ctx, w5_round(rig.node().clone(), size, reps, round as u64))?;
            let lost = s
                .extras
                .iter()
                .find(|(name, _)| *name == "unresolved")
                .map_or(0, |(_, v)| *v as u64);
            unresolved[i].fetch_add(lost, Ordering::Relaxed);
            samples.push(s);
        }
        Ok(samples)
    });
    rig.stop(ctx);
    for (row, lost) in rows.iter_mut().zip(&unresolved) {
        let lost = lost.load(Ordering::Relaxed);
        row.note(format!("unresolved in all rounds={lost}"));
        if lost > 0 {
            row.goal_missed();
        }
    }
    rows
}
