//! W1-threads: uncontended transactions from plain OS threads, beside a bare mutex.
//!
//! Two OS threads (no async runtime) each run `n` transactions (`begin_transaction_blocking`,
//! `blocking_lock([root, t, i], write)`, `blocking_end`) on locks no other thread uses, first
//! each under a root of its own (`w1t-0`, `w1t-1`: disjoint hierarchies, which the node's table
//! keeps in different shards), then both under the shared root `w1t` (whose record, and
//! so whose shard, both threads take their intention locks on); then, in the same round, two
//! threads each lock and unlock their own `parking_lot::Mutex` `n × 400` times. Rows: the
//! aggregate transactions/s of each (p50/p99 of one transaction) and the aggregate mutex
//! lock+unlock/s; the transaction rows note how many times slower a transaction is than a
//! lock+unlock of the mutex (the goal, for disjoint locks: within 100×): the mutex
//! row's median over the transaction row's median. (Each round's transactions over that
//! round's mutex, reported for the median transaction round, let one slow mutex round pass a
//! goal that the medians of the run miss.) As in W1, one transaction in [`TIME_EVERY`] is
//! timed; the rates are over the whole round.
//!
//! Each row also notes its threads' **CPU share**: the CPU time each thread got over its wall
//! time, averaged over the threads, for the median round. Near 1, each thread had a core of its
//! own; near 0.5, the two shared one (on this harness's two-core virtual machine that happens
//! for whole workloads at a time), which halves a round's rate without changing the time of one
//! transaction.

use super::report::short_number;
use super::rig::Rig;
use super::stats::Sample;
use super::uncontended::{TIME_EVERY, fail};
use super::{Check, Ctx, Row, Spec};
use crate::bench::floors::Floor;
use locks_agent::{Options, begin_transaction_blocking};
use locks_core::{Key, LockId, Mode};
use locks_server::Node;
use std::time::{Duration, Instant};

const THREADS: u64 = 2;
/// Mutex operations per transaction of the same round, so that both take a similar time
/// (about 1 µs against 2.5 ns): with 100, the mutex round lasted a few milliseconds and its
/// rate moved by 40 % between the rounds of one run, and the ratio with it.
const MUTEX_PER_TXN: u64 = 400;

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`); zero if the clock fails.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock is supported on Linux, and
    // clock_gettime writes nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// What [`on_threads`] measured besides each thread's result.
struct Span {
    /// From the first thread's start to the last one's end, as the threads saw it.
    time: Duration,
    /// Each thread's CPU time over its wall time, averaged over the threads.
    cpu_share: f64,
}

/// Runs `f(thread)` on `THREADS` threads released together; returns each thread's result and
/// the [`Span`]. (Timed on the calling thread, from its own wake-up at the barrier to the last
/// join, it depended on when a third thread got one of the machine's two cores: rounds of one
/// run differed by 2×.)
fn on_threads<T: Send + 'static>(
    f: impl Fn(u64) -> T + Send + Sync + Clone + 'static,
) -> Result<(Vec<T>, Span), String> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(THREADS as usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (f, barrier) = (f.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let (start, cpu) = (Instant::now(), thread_cpu_time());
                let out = f(t);
                let wall = start.elapsed();
                let share = (thread_cpu_time().saturating_sub(cpu)).as_secs_f64()
                    / wall.as_secs_f64().max(f64::MIN_POSITIVE);
                (out, start, Instant::now(), share)
            })
        })
        .collect();
    let mut out = Vec::new();
    let mut span: Option<(Instant, Instant)> = None;
    let mut shares = 0.0;
    for h in handles {
        let (result, start, end, share) = h
            .join()
            .map_err(|_| "a W1-threads thread panicked".to_string())?;
        out.push(result);
        shares += share;
        span = Some(span.map_or((start, end), |(s, e)| (s.min(start), e.max(end))));
    }
    let (start, end) = span.ok_or("no W1-threads thread ran")?;
    let span = Span {
        time: end.duration_since(start),
        cpu_share: shares / THREADS as f64,
    };
    Ok((out, span))
}

/// `n` transactions of thread `t`, on `[w1t-t, t, i]` (`shared`: `[w1t, t, i]`).
fn txn_thread(node: &Node, t: u64, n: u64, shared: bool) -> Result<Vec<u64>, String> {
    let prefix = match shared {
        true => Key::from("w1t"),
        false => Key::from(format!("w1t-{t}")),
    };
    let transaction = |i: u64| -> Result<(), String> {
        let lock = LockId::from([prefix.clone(), Key::Int(t as i64), Key::Int(i as i64)]);
        let txn =
            begin_transaction_blocking(node, Options::default()).map_err(|e| e.to_string())?;
        txn.blocking_lock(lock, Mode::WRITE)
            .map_err(|e| e.to_string())?;
        txn.blocking_end().map_err(|e| e.to_string())
    };
    let mut lat = Vec::with_capacity(n.div_ceil(TIME_EVERY) as usize);
    for i in 0..n {
        if i % TIME_EVERY != 0 {
            transaction(i)?;
            continue;
        }
        let start = Instant::now();
        transaction(i)?;
        lat.push(start.elapsed().as_nanos() as u64);
    }
    Ok(lat)
}

/// One round of transactions on all threads (`shared`: under one root).
fn txn_round(node: &Node, n: u64, shared: bool) -> Result<Sample, String> {
    let txn_node = node.clone();
    let (lats, span) = on_threads(move |t| txn_thread(&txn_node, t, n, shared))?;
    let mut all = Vec::with_capacity((n * THREADS) as usize);
    for lat in lats {
        all.extend(lat?);
    }
    Ok(Sample::new(n * THREADS, span.time, all).with_extra("cpu share", span.cpu_share))
}

fn mutex_thread(n: u64) -> u64 {
    let m = parking_lot::Mutex::new(0u64);
    for _ in 0..n {
        *std::hint::black_box(&m).lock() += 1;
    }
    m.into_inner()
}

/// W1-threads (see the module documentation).
pub fn w1_threads(ctx: &mut Ctx) -> Vec<Row> {
    let specs = vec![
        Spec {
            floor: None,
            ..Spec::rate("W1-threads txn", "txn/s", Floor::ActixSame)
        }
        .goal(
            "goal: within 100x of a bare mutex lock+unlock",
            Check::AfterRounds,
        ),
        Spec {
            floor: None,
            ..Spec::rate("W1-threads shared root", "txn/s", Floor::ActixSame)
        },
        Spec {
            floor: None,
            ..Spec::rate("W1-threads parking_lot", "lock/s", Floor::ActixSame)
        },
    ];
    let rig = match Rig::start(ctx, "w1t") {
        Ok(rig) => rig,
        Err(e) => return fail(&specs, &e),
    };
    let n = ctx.cfg.size(20_000, 2_000);
    let node = rig.node().clone();
    let rows = ctx.run_rounds(&specs, |_| {
        let txn = txn_round(&node, n, false)?;
        let shared = txn_round(&node, n, true)?;
        let m = n * MUTEX_PER_TXN;
        let (counts, span) = on_threads(move |_| mutex_thread(m))?;
        if counts.iter().any(|&c| c != m) {
            return Err("a mutex thread lost updates".into());
        }
        let mutex =
            Sample::new(m * THREADS, span.time, Vec::new()).with_extra("cpu share", span.cpu_share);
        Ok(vec![txn, shared, mutex])
    });
    rig.stop(ctx);
    with_ratios(rows)
}

/// The goal for W1-threads: a transaction within this many mutex lock+unlocks.
const GOAL_RATIO: f64 = 100.0;

/// Notes on the transaction rows (the first two) how many of the mutex row's (the last)
/// lock+unlocks a transaction takes, median over median, and decides the goal by it.
fn with_ratios(mut rows: Vec<Row>) -> Vec<Row> {
    let mutex = rows.last().and_then(Row::measured).map(|m| m.value);
    for row in rows.iter_mut().take(2) {
        let txn = row.measured().map(|m| m.value);
        let (Some(mutex), Some(txn)) = (mutex, txn.filter(|&t| t > 0.0)) else {
            continue;
        };
        let ratio = mutex / txn;
        row.note(format!("x parking_lot={}", short_number(ratio)));
        row.decide_goal(ratio <= GOAL_RATIO);
    }
    rows
}
