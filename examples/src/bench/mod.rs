//! The benchmark harness: the standard workloads, the floors of this machine measured
//! in the same run, and the Redis mutex a user would otherwise pick.
//!
//! The program is `examples/src/bin/bench.rs`; this module owns the workloads and the report.
//! Every workload is defined exactly (in BENCHMARKS.md and in the docs of its module), so that
//! the same workload can be run against other lock managers. Figures are printed, never asserted.
//!
//! How a workload is run: one warm-up round, then `rounds` timed rounds (5 by default); each
//! reported quantity shows its median round with the lowest and highest round beside it. The
//! ratio column divides the quantity's p50 (or its mean time per operation when it has no
//! latencies) by the p50 of the floor named beside it, measured earlier in the same run.
//!
//! Workloads that need a working lock path first run one probe transaction; if that is not
//! granted within a few seconds (the lock table or the agent core is still a stand-in), they are
//! reported as failed at once instead of each waiting for its own time limit.

pub mod client;
pub mod client_etcd;
pub mod client_python;
pub mod cluster;
pub mod contended;
pub mod election;
pub mod fleet;
pub mod floors;
pub mod graph;
pub mod mem;
pub mod metrics;
pub mod redis;
pub mod report;
pub mod rig;
pub mod row;
pub mod scale;
pub mod soak;
pub mod stats;
pub mod threads;
pub mod uncontended;
pub mod word;

pub use row::{Check, Goal, Measured, Outcome, Row, Spec};

use floors::Floor;
use stats::{RankBy, Sample};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A workload that can be named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Workload {
    /// The floors (always measured when anything else runs: the ratios need them).
    Floors,
    /// W1: uncontended transactions (node runtime and a foreign runtime).
    W1,
    /// W2: 10,000 locks in one transaction (one by one, and nowait + await_all_locks).
    W2,
    /// W3: 8 clients on one hot lock.
    W3,
    /// W4: child writes against parent reads.
    W4,
    /// W5: deadlock resolution, 2- and 3-transaction cycles.
    W5,
    /// W6: a three-node cluster in this process.
    W6,
    /// W7: leader election (first leader with 3 and 5 nodes, failovers).
    W7,
    /// MEM: resident bytes per held lock.
    Mem,
    /// WORD: the lock word and `RwuLock` beside parking_lot.
    Word,
    /// GRAPH: building the wait-for graph of a hot lock's queue (1,000 and 10,000 holders).
    Graph,
    /// The Redis mutex (with `--redis` only).
    Redis,
    /// CLIENT: lock+unlock through the gRPC API, to node processes.
    Client,
    /// SCALE: 8 to 64 `node` processes (only when named: it starts up to 64 processes).
    Scale,
    /// SOAK: the client port's attacks against a `node` process while good clients lock and
    /// unlock, for `--soak-secs` (only when named: it runs 10 minutes by default).
    Soak,
    /// W1-metrics: W1 without and then with the Prometheus recorder (last in a full run: the
    /// recorder stays installed).
    #[value(name = "w1-metrics")]
    W1Metrics,
}

impl Workload {
    /// Every workload in the order of a full run.
    pub const ALL: [Workload; 14] = [
        Workload::Floors,
        Workload::W1,
        Workload::W2,
        Workload::W3,
        Workload::W4,
        Workload::W5,
        Workload::W6,
        Workload::W7,
        Workload::Mem,
        Workload::Word,
        Workload::Graph,
        Workload::Redis,
        Workload::Client,
        Workload::W1Metrics,
    ];
}

/// How the harness runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Smoke-run sizes: one round, no warm-up, workloads a tenth of their size or less.
    pub quick: bool,
    /// Warm-up rounds before the timed ones.
    pub warmup: usize,
    /// Timed rounds.
    pub rounds: usize,
    /// The longest one round of a lock workload may take before it is reported as failed.
    pub round_limit: Duration,
    /// The time one workload should take at most: no round starts that would end past it
    /// (at least one timed round always runs).
    pub budget: Duration,
    /// W6 also with two of its nodes in processes of their own.
    pub processes: bool,
    /// The address of a Redis server the user started, if any.
    pub redis: Option<String>,
    /// The address of an etcd server the user started, if any (the CLIENT workload measures
    /// its lock and election services beside the gRPC API's).
    pub etcd: Option<String>,
    /// A Python interpreter with the `locks-client` package installed, if any (the CLIENT
    /// workload measures the Python client through it).
    pub python: Option<std::path::PathBuf>,
    /// The workloads to run (empty: all).
    pub workloads: Vec<Workload>,
    /// Where the rig's nodes keep their data directories (`<dir>/<name>`), if anywhere.
    pub data_dir: Option<std::path::PathBuf>,
    /// How long SOAK runs its attacks, in seconds.
    pub soak_secs: u64,
}

impl Config {
    /// The default run (or the quick one).
    pub fn new(quick: bool) -> Config {
        Config {
            quick,
            warmup: if quick { 0 } else { 1 },
            rounds: if quick { 1 } else { 5 },
            round_limit: Duration::from_secs(if quick { 10 } else { 90 }),
            budget: Duration::from_secs(if quick { 10 } else { 40 }),
            processes: false,
            redis: None,
            etcd: None,
            python: None,
            workloads: Vec::new(),
            data_dir: None,
            soak_secs: 600,
        }
    }

    /// `full` in a full run, `quick` in quick mode.
    pub fn size(&self, full: u64, quick: u64) -> u64 {
        if self.quick { quick } else { full }
    }

    /// Whether `w` is selected.
    pub fn selected(&self, w: Workload) -> bool {
        (self.workloads.is_empty() && !matches!(w, Workload::Scale | Workload::Soak))
            || self.workloads.contains(&w)
    }
}

/// What every workload shares: the configuration, the driver runtime, the floors so far.
pub struct Ctx {
    /// The configuration.
    pub cfg: Config,
    /// A multi-thread tokio runtime (2 workers): drives the workloads and hosts the clients of
    /// the "foreign runtime" variants.
    pub rt: tokio::runtime::Runtime,
    /// The p50 of every floor measured so far, in ns.
    pub floors: BTreeMap<FloorKey, f64>,
    /// Whether the lock path works (checked once, before the first lock workload).
    pub lock_path: Option<Result<(), String>>,
}

/// A floor as a map key.
pub type FloorKey = u8;

fn key(floor: Floor) -> FloorKey {
    floor as u8
}

impl Ctx {
    /// A context for `cfg`.
    pub fn new(cfg: Config) -> Result<Ctx, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("bench-driver")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Ctx {
            cfg,
            rt,
            floors: BTreeMap::new(),
            lock_path: None,
        })
    }

    /// The p50 of `floor` in ns, if it was measured.
    pub fn floor(&self, floor: Floor) -> Option<f64> {
        self.floors.get(&key(floor)).copied()
    }

    /// Runs warm-up and timed rounds of one workload and reduces them to rows (one per spec).
    /// `round(i)` must return one sample per spec, in order; the first error ends the
    /// workload and every spec reports it.
    pub fn run_rounds(
        &self,
        specs: &[Spec],
        mut round: impl FnMut(usize) -> Result<Vec<Sample>, String>,
    ) -> Vec<Row> {
        let mut kept: Vec<Vec<Sample>> = vec![Vec::new(); specs.len()];
        let started = Instant::now();
        let mut notes = Vec::new();
        let mut timed = 0;
        let mut i = 0;
        while timed < self.cfg.rounds {
            let warmup = i < self.cfg.warmup;
            let round_started = Instant::now();
            let samples = match round(i) {
                Ok(s) if s.len() == specs.len() => s,
                Ok(s) => {
                    let e = format!("harness bug: {} samples for {} rows", s.len(), specs.len());
                    return specs
                        .iter()
                        .map(|s| Row::failed(&s.name, s.unit, e.clone()))
                        .collect();
                }
                Err(e) => {
                    let round = if warmup {
                        "warm-up".to_string()
                    } else {
                        format!("round {}", timed + 1)
                    };
                    return specs
                        .iter()
                        .map(|s| Row::failed(&s.name, s.unit, format!("{round}: {e}")))
                        .collect();
                }
            };
            i += 1;
            let took = round_started.elapsed();
            // A round this long needs no warm-up: keep it rather than run another.
            let keep = !warmup || took > self.cfg.budget / 4;
            if warmup && keep {
                notes.push("warm-up kept (slow rounds)".to_string());
            }
            if keep {
                timed += 1;
                for (k, s) in kept.iter_mut().zip(samples) {
                    k.push(s);
                }
            }
            let spent = started.elapsed();
            if timed > 0 && timed < self.cfg.rounds && spent + took > self.cfg.budget {
                notes.push(format!(
                    "{timed} of {} rounds (time budget {} s)",
                    self.cfg.rounds,
                    self.cfg.budget.as_secs()
                ));
                break;
            }
        }
        specs
            .iter()
            .zip(kept)
            .map(|(spec, rounds)| {
                let mut row = self.reduce(spec, rounds);
                for note in &notes {
                    row.note(note.clone());
                }
                row
            })
            .collect()
    }

    fn reduce(&self, spec: &Spec, rounds: Vec<Sample>) -> Row {
        let Some(r) = stats::reduce(rounds, spec.rank) else {
            return Row::failed(&spec.name, spec.unit, "no rounds");
        };
        let value = r.median.rate();
        let p50 = r.percentiles.map(|p| p.p50);
        let basis = p50.or((value > 0.0).then(|| 1e9 / value));
        let floor = spec.floor.and_then(|f| {
            let floor_ns = self.floor(f)?;
            Some((f, basis? / floor_ns))
        });
        let goal = spec.goal.map(|g| {
            let met = match g.check {
                Check::RateAtLeast(min) => value >= min,
                Check::P50AtMostUs(max) => p50.is_some_and(|p| p / 1e3 <= max),
                Check::ValueAtMost(max) => value <= max,
                Check::FloorRatioAtMost(max) => floor.is_some_and(|(_, r)| r <= max),
                Check::NoneUnresolved => true,
                Check::AfterRounds => false,
            };
            (g.text, met)
        });
        let notes = r
            .median
            .extras
            .iter()
            .map(|(name, v)| format!("{name}={}", report::short_number(*v)))
            .collect();
        Row {
            name: spec.name.clone(),
            unit: spec.unit,
            outcome: Outcome::Measured(Measured {
                value,
                rank: spec.rank,
                min: r.min,
                max: r.max,
                p50_ns: p50,
                p99_ns: r.percentiles.map(|p| p.p99),
                ops: r.median.ops,
                rounds: r.rounds,
                floor,
                goal,
                notes,
            }),
        }
    }
}

/// How busy the machine's CPUs were over `window` (0 to 1), from `/proc/stat`; `None` where
/// there is no `/proc`. Printed before a run: figures taken on a busy machine are not
/// comparable with figures from an idle one (wake-ups between vCPUs cost far less when both
/// are awake).
pub fn busy_fraction(window: Duration) -> Option<f64> {
    fn read() -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().next()?.strip_prefix("cpu ")?;
        let v: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal ...
        let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
        Some((v.iter().take(8).sum(), idle))
    }
    let (total0, idle0) = read()?;
    std::thread::sleep(window);
    let (total1, idle1) = read()?;
    let total = total1.saturating_sub(total0);
    (total > 0).then(|| 1.0 - idle1.saturating_sub(idle0) as f64 / total as f64)
}

/// One step of a run: a workload that yields its rows.
type Step = fn(&mut Ctx) -> Vec<Row>;

/// Runs every selected workload, printing a progress line for each on stderr.
pub fn run(cfg: Config) -> Result<Vec<Row>, String> {
    let mut ctx = Ctx::new(cfg)?;
    let mut plan: Vec<(&'static str, Step)> = vec![("floors", run_floors)];
    let sel = |w| ctx.cfg.selected(w);
    let redis = ctx.cfg.redis.is_some();
    if sel(Workload::W1) {
        plan.push((
            "W1 uncontended, client on the node's runtime",
            uncontended::w1_node,
        ));
        plan.push((
            "W1 uncontended, client on a foreign runtime",
            uncontended::w1_foreign,
        ));
        plan.push((
            "W1-threads uncontended, 2 OS threads through the blocking API",
            threads::w1_threads,
        ));
    }
    if redis && (sel(Workload::W1) || sel(Workload::Redis)) {
        plan.push(("R-SEQ Redis mutex, one client", run_redis_seq));
    }
    if sel(Workload::W2) {
        plan.push(("W2 10,000 locks in one transaction", uncontended::w2));
    }
    if sel(Workload::W3) {
        plan.push(("W3 hot lock, 8 clients", contended::w3));
    }
    if redis && (sel(Workload::W3) || sel(Workload::Redis)) {
        plan.push(("R-HOT Redis mutex, 8 clients on one key", run_redis_hot));
    }
    if sel(Workload::W4) {
        plan.push(("W4 hierarchy, child writes and parent reads", contended::w4));
    }
    if sel(Workload::W5) {
        plan.push(("W5 deadlock resolution", contended::w5));
    }
    if sel(Workload::W6) {
        plan.push(("W6 cluster of 3 nodes in this process", cluster::w6));
    }
    if sel(Workload::W7) {
        plan.push(("W7 leader election", election::w7));
    }
    if sel(Workload::Mem) {
        plan.push(("MEM resident bytes per held lock", mem::run));
    }
    if sel(Workload::Word) {
        plan.push(("WORD lock word, RwuLock and parking_lot", word::run));
    }
    if sel(Workload::Graph) {
        plan.push(("GRAPH wait-for graph of a hot queue", graph::run));
    }
    if sel(Workload::Client) {
        plan.push(("CLIENT lock+unlock through the gRPC API", client::run));
    }
    if sel(Workload::Scale) {
        plan.push(("SCALE 8 to 64 node processes", scale::run));
    }
    if sel(Workload::Soak) {
        plan.push((
            "SOAK the client port's attacks, good clients served",
            soak::run,
        ));
    }
    // Last: the recorder it installs stays for the rest of the process.
    if sel(Workload::W1Metrics) {
        plan.push((
            "W1-metrics W1 without and with the Prometheus recorder",
            metrics::w1_metrics,
        ));
    }
    let total = plan.len();
    let mut rows = Vec::new();
    for (i, (title, workload)) in plan.into_iter().enumerate() {
        eprintln!("[{}/{total}] {title} ...", i + 1);
        let started = Instant::now();
        let new_rows = workload(&mut ctx);
        eprintln!(
            "[{}/{total}] {title}: {} ({:.1} s)",
            i + 1,
            report::progress_summary(&new_rows),
            started.elapsed().as_secs_f64()
        );
        rows.extend(new_rows);
    }
    Ok(rows)
}

/// Measures every floor and records their p50s in the context.
pub fn run_floors(ctx: &mut Ctx) -> Vec<Row> {
    let mut rows = Vec::new();
    for floor in Floor::ALL {
        let (full, quick) = floor.round_trips();
        let n = ctx.cfg.size(full, quick);
        let spec = Spec {
            name: floor.label().to_string(),
            unit: "rt/s",
            rank: RankBy::Rate,
            floor: None,
            goal: None,
        };
        let row = ctx
            .run_rounds(std::slice::from_ref(&spec), |_| Ok(vec![floor.measure(n)?]))
            .remove(0);
        if let Some(p50) = row.measured().and_then(|m| m.p50_ns) {
            ctx.floors.insert(key(floor), p50);
        }
        rows.push(row);
    }
    rows
}

fn redis_rows(
    ctx: &Ctx,
    spec: Spec,
    round: impl FnMut(usize) -> Result<Sample, String>,
) -> Vec<Row> {
    let Some(addr) = ctx.cfg.redis.clone() else {
        return Vec::new();
    };
    if let Err(e) = redis::check(&addr) {
        return vec![Row::failed(&spec.name, spec.unit, e)];
    }
    let mut round = round;
    ctx.run_rounds(std::slice::from_ref(&spec), |i| Ok(vec![round(i)?]))
}

fn run_redis_seq(ctx: &mut Ctx) -> Vec<Row> {
    let addr = ctx.cfg.redis.clone().unwrap_or_default();
    let cycles = ctx.cfg.size(5_000, 500);
    let spec = Spec::rate("R-SEQ redis 1 client", "cycle/s", Floor::Tcp);
    redis_rows(ctx, spec, |i| redis::sequential(&addr, i, cycles))
}

fn run_redis_hot(ctx: &mut Ctx) -> Vec<Row> {
    let addr = ctx.cfg.redis.clone().unwrap_or_default();
    let duration = Duration::from_millis(ctx.cfg.size(1_000, 200));
    let spec = Spec::rate("R-HOT redis 8 clients 1 key", "cycle/s", Floor::Tcp);
    redis_rows(ctx, spec, |i| redis::hot(&addr, i, duration))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quick mode of the floors alone: every floor is measured and reported (no timing is
    /// checked; CI does not run the harness itself).
    #[test]
    fn quick_floors_only() {
        let mut cfg = Config::new(true);
        cfg.workloads = vec![Workload::Floors];
        let rows = run(cfg).unwrap();
        assert_eq!(rows.len(), Floor::ALL.len());
        for row in &rows {
            let m = row.measured().unwrap_or_else(|| panic!("{row:?}"));
            assert!(m.ops > 0 && m.p50_ns.is_some(), "{row:?}");
        }
        let json = report::json(&rows, true);
        assert_eq!(json.matches("\"status\":\"measured\"").count(), rows.len());
    }
}
