//! GRAPH: building the wait-for graph of a hot lock's queue, the work a waiting agent does on the
//! node's thread each time it analyses that queue.
//!
//! One view of one lock `[graph, hot]` on node `g` (`locks_core::proto::LockView`): `holders`
//! agents hold it in `IS` (readers and writers of its children), one agent waits for `X` (a
//! writer of the whole tree), and 8 more wait for `IS` behind it. Every waiter behind the writer
//! waits for it and for every holder (they block the writer ahead of them), so one build has
//! `9 × holders + 8` edges. Timed: `ViewGraph::build` with the standard mode table, one build
//! per operation, each build timed on its own; a round builds until 200 ms have passed (at least
//! once, at most 10,000 times). Reported per variant: builds per second, the p50/p99 of one
//! build, and the edges and agents of the graph built. Variants: 1,000 holders and 10,000
//! (100 and 1,000 with `--quick`). There is no floor: the figure is meant to be compared across
//! commits (BENCHMARKS.md, "Lock table").

use super::stats::{RankBy, Sample};
use super::{Ctx, Row, Spec};
use locks_agent::state_machine::ViewGraph;
use locks_core::proto::{LockView, QueueEntry};
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId, lock_id};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// How many agents wait for `IS` behind the writer.
const BEHIND: u64 = 8;

/// The hot queue: `holders` in `IS`, then one `X` waiter and `BEHIND` `IS` waiters.
pub fn hot_view(node: &NodeId, holders: u64) -> LockView {
    let entry = |serial: u64, mode: Mode| QueueEntry {
        agent: AgentId::new(node.clone(), 1, serial),
        mode,
    };
    let granted = (0..holders).map(|i| entry(i, Mode::IS)).collect();
    let waiting = std::iter::once(entry(holders, Mode::X))
        .chain((1..=BEHIND).map(|i| entry(holders + i, Mode::IS)))
        .collect();
    LockView {
        version: 1,
        group: Some(Mode::IS),
        granted,
        converting: Vec::new(),
        waiting,
    }
}

fn round(modes: &ModeTable, lock: &LockId, node: &NodeId, view: &LockView) -> Sample {
    let limit = Duration::from_millis(200);
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut shape = (0, 0);
    while latencies.is_empty() || (started.elapsed() < limit && latencies.len() < 10_000) {
        let t = Instant::now();
        let graph = ViewGraph::build(modes, [(lock, node, view)]);
        latencies.push(t.elapsed().as_nanos() as u64);
        shape = (graph.edge_count(), graph.agent_count());
        black_box(graph);
    }
    Sample::new(latencies.len() as u64, started.elapsed(), latencies)
        .with_extra("edges", shape.0 as f64)
        .with_extra("agents", shape.1 as f64)
}

/// GRAPH.
pub fn run(ctx: &mut Ctx) -> Vec<Row> {
    let sizes = [ctx.cfg.size(1_000, 100), ctx.cfg.size(10_000, 1_000)];
    let modes = ModeTable::standard();
    let lock = lock_id!["graph", "hot"];
    let node = NodeId::new("g").expect("a valid node name");
    let views: Vec<LockView> = sizes.iter().map(|&n| hot_view(&node, n)).collect();
    let specs: Vec<Spec> = sizes
        .iter()
        .map(|n| Spec {
            name: format!("GRAPH build, {n} holders"),
            unit: "build/s",
            rank: RankBy::P50,
            floor: None,
            goal: None,
        })
        .collect();
    ctx.run_rounds(&specs, |_| {
        Ok(views
            .iter()
            .map(|v| round(&modes, &lock, &node, v))
            .collect())
    })
}
