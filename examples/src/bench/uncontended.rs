//! W1 and W2: one client, no contention.
//!
//! - **W1** (uncontended transaction): one client, 20,000 iterations of
//!   `begin_transaction`, `lock([w1, i], write)`, `end`. Transactions/s over the round, and the
//!   p50/p99 of one iteration and of each of the three calls, timed in one iteration of
//!   [`TIME_EVERY`]. Variant `node-rt`: the client is a task on the
//!   node's own thread (`Node::spawn`); variant `foreign-rt`: the client is a task of a separate
//!   multi-thread tokio runtime (2 workers), so every call crosses threads.
//! - **W2** (many locks in one transaction): one transaction takes 10,000 distinct write locks
//!   `[w2, i]`, `i` ascending, one by one (`lock` awaited each time), then ends; and again with
//!   `lock_nowait` for all and then one `await_all_locks`. Locks/s over the whole transaction
//!   (begin to end). The one-by-one variant also reports `growth`: the mean time of a lock in
//!   the last tenth over the first tenth (1 when the cost does not grow with the locks held).
//!   Both clients run on the node's thread.

use super::floors::Floor;
use super::rig::{ClientResult, Rig, err};
use super::stats::{Sample, growth};
use super::{Check, Ctx, Row, Spec};
use locks_agent::{Options, begin_transaction};
use locks_core::{Key, LockId, Mode};
use locks_server::Node;
use std::time::Instant;

fn ns(since: Instant) -> u64 {
    since.elapsed().as_nanos() as u64
}

/// `[prefix, i]` with the prefix key shared (as an interned atom would be).
pub fn id(prefix: &Key, i: u64) -> LockId {
    LockId::from([prefix.clone(), Key::Int(i as i64)])
}

/// One transaction in this many is timed call by call. Timing every call took four clock reads
/// and four stores per transaction, about a fifth of a transaction that costs one microsecond;
/// the rate is taken over the whole round either way. Odd, so that the timed transactions do
/// not fall in step with the power-of-two periods of the code under test (a thread's block of
/// 64 agent ids, tokio's budget of 128 calls): with 16, every fourth timed transaction was the
/// one that takes a new block of ids, and the p99 showed it.
pub const TIME_EVERY: u64 = 17;

/// One round of W1: `n` transactions; samples for the transaction, begin, lock and end (the
/// latencies of every [`TIME_EVERY`]th transaction, the rate of all).
async fn w1_client(node: Node, n: u64) -> ClientResult<Vec<Sample>> {
    let prefix = Key::from("w1");
    let timed = n.div_ceil(TIME_EVERY) as usize;
    let mut lat: [Vec<u64>; 4] = std::array::from_fn(|_| Vec::with_capacity(timed));
    let start = Instant::now();
    for i in 0..n {
        if i % TIME_EVERY != 0 {
            let txn = begin_transaction(&node, Options::default())
                .await
                .map_err(err)?;
            txn.lock(id(&prefix, i), Mode::WRITE).await.map_err(err)?;
            txn.end().await.map_err(err)?;
            continue;
        }
        let t0 = Instant::now();
        let txn = begin_transaction(&node, Options::default())
            .await
            .map_err(err)?;
        let t1 = Instant::now();
        txn.lock(id(&prefix, i), Mode::WRITE).await.map_err(err)?;
        let t2 = Instant::now();
        txn.end().await.map_err(err)?;
        let t3 = Instant::now();
        lat[0].push((t3 - t0).as_nanos() as u64);
        lat[1].push((t1 - t0).as_nanos() as u64);
        lat[2].push((t2 - t1).as_nanos() as u64);
        lat[3].push((t3 - t2).as_nanos() as u64);
    }
    let elapsed = start.elapsed();
    Ok(lat
        .into_iter()
        .map(|l| Sample::new(n, elapsed, l))
        .collect())
}

/// The rows of one W1 variant, named `{workload} {variant} ...`.
pub(super) fn w1_specs(
    variant: &str,
    floor: Floor,
    goal: Option<(&'static str, f64)>,
    workload: &str,
) -> Vec<Spec> {
    let name = |part: &str| format!("{workload} {variant} {part}");
    let txn = Spec::rate(name("txn"), "txn/s", floor);
    vec![
        match goal {
            Some((text, rate)) => txn.goal(text, Check::RateAtLeast(rate)),
            None => txn,
        },
        Spec::latency(name("  begin"), "call/s", floor),
        Spec::latency(name("  lock"), "call/s", floor),
        Spec::latency(name("  end"), "call/s", floor),
    ]
}

/// W1 with the client on the node's own runtime.
pub fn w1_node(ctx: &mut Ctx) -> Vec<Row> {
    let specs = w1_specs(
        "node-rt",
        Floor::ActixSame,
        Some(("orig 44-53k/s; goal >=1M/s", 1_000_000.0)),
        "W1",
    );
    w1(ctx, specs, true)
}

/// W1 with the client on a separate multi-thread tokio runtime.
pub fn w1_foreign(ctx: &mut Ctx) -> Vec<Row> {
    let specs = w1_specs(
        "foreign-rt",
        Floor::ActixFromTokio,
        Some(("orig 44-53k/s; goal >=500k/s, p50 <=2us", 500_000.0)),
        "W1",
    );
    w1(ctx, specs, false)
}

/// Runs W1's rounds with the client on the node's runtime or a foreign one.
pub(super) fn w1(ctx: &mut Ctx, specs: Vec<Spec>, on_node: bool) -> Vec<Row> {
    let rig = match Rig::start(ctx, "w1") {
        Ok(rig) => rig,
        Err(e) => return fail(&specs, &e),
    };
    let n = ctx.cfg.size(20_000, 2_000);
    let rows = ctx.run_rounds(&specs, |_| {
        let client = w1_client(rig.node().clone(), n);
        if on_node {
            rig.on_node(ctx, client)
        } else {
            rig.on_runtime(ctx, client)
        }
    });
    rig.stop(ctx);
    rows
}

/// Failed rows for every spec.
pub fn fail(specs: &[Spec], why: &str) -> Vec<Row> {
    specs
        .iter()
        .map(|s| Row::failed(&s.name, s.unit, why))
        .collect()
}

async fn w2_one_by_one(node: Node, n: u64) -> ClientResult<Sample> {
    let prefix = Key::from("w2");
    let mut lat = Vec::with_capacity(n as usize);
    let start = Instant::now();
    let txn = begin_transaction(&node, Options::default())
        .await
        .map_err(err)?;
    for i in 0..n {
        let t = Instant::now();
        txn.lock(id(&prefix, i), Mode::WRITE).await.map_err(err)?;
        lat.push(ns(t));
    }
    txn.end().await.map_err(err)?;
    let elapsed = start.elapsed();
    let grown = growth(&lat).unwrap_or(0.0);
    Ok(Sample::new(n, elapsed, lat).with_extra("growth", grown))
}

async fn w2_nowait(node: Node, n: u64) -> ClientResult<Sample> {
    let prefix = Key::from("w2");
    let start = Instant::now();
    let txn = begin_transaction(&node, Options::default())
        .await
        .map_err(err)?;
    for i in 0..n {
        txn.lock_nowait(id(&prefix, i), Mode::WRITE)
            .await
            .map_err(err)?;
    }
    let queued = start.elapsed();
    txn.await_all_locks().await.map_err(err)?;
    txn.end().await.map_err(err)?;
    let elapsed = start.elapsed();
    Ok(Sample::new(n, elapsed, Vec::new()).with_extra(
        "queueing share",
        queued.as_secs_f64() / elapsed.as_secs_f64(),
    ))
}

/// W2, both variants.
pub fn w2(ctx: &mut Ctx) -> Vec<Row> {
    let goal = "orig 2.6k/s ascending; goal >=100x (260k/s), linear";
    let specs = vec![
        Spec::rate("W2 one-by-one", "lock/s", Floor::ActixSame)
            .goal(goal, Check::RateAtLeast(260_000.0)),
        Spec::rate("W2 nowait+await_all", "lock/s", Floor::ActixSame)
            .goal(goal, Check::RateAtLeast(260_000.0)),
    ];
    let rig = match Rig::start(ctx, "w2") {
        Ok(rig) => rig,
        Err(e) => return fail(&specs, &e),
    };
    let n = ctx.cfg.size(10_000, 1_000);
    let rows = ctx.run_rounds(&specs, |_| {
        let one = rig.on_node(ctx, w2_one_by_one(rig.node().clone(), n))?;
        let nowait = rig.on_node(ctx, w2_nowait(rig.node().clone(), n))?;
        Ok(vec![one, nowait])
    });
    rig.stop(ctx);
    rows
}
