//! SCALE: a cluster of N `node` processes on 127.0.0.1 (N = 8, 16, 32, 64; 8 and 16 with
//! `--quick`), run only when named (`bench scale`): it starts up to 64 processes.
//!
//! Per N, in this order: the time until every node sees every other (from the first process
//! started); each node's idle CPU and resident memory; `Majority` and `All` locks over the N
//! nodes from node 0's stdin (one at a time: p50 and p99 of the time from the command to its
//! `granted` line); an election (`gdict` started on every node at once, until every node's
//! replica prints the same leader); a herd (every node asks for X on one lock with `All` over
//! the N nodes at once, each ending as soon as it is granted, until all were granted); and a
//! failover (the leader's node killed with SIGKILL, until every other node prints the same new
//! leader). Each row's note `x2=` is its growth over the row of half as many nodes. Lines are
//! stamped as they arrive from each process's stdout, so every time includes one pipe hop.
//!
//! To measure a part only: `SCALE_SIZES=8,16,32` chooses the sizes, and `SCALE_ONLY=herd` runs
//! the `All` locks (the uncontended figure a herd compares with) and the herd alone,
//! `SCALE_ONLY=election` the idle figures, the election and the failover alone. `SCALE_LOGS=DIR` keeps every
//! node's log (at `RUST_LOG`, default `info`) in `DIR/<name>.log`.

mod fleet;

use super::Ctx;
use super::row::{Measured, Outcome, Row};
use super::stats::{RankBy, percentiles};
use fleet::Fleet;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The figures of one N.
struct Figures {
    mesh_ms: f64,
    idle_cpu_pct: f64,
    rss_mb: f64,
    majority: Vec<u64>,
    all: Vec<u64>,
    election_ms: Result<f64, String>,
    herd_ms: Result<f64, String>,
    /// Envelopes sent between nodes during the herd, per grant.
    herd_msgs_per_grant: Option<f64>,
    failover_ms: Result<f64, String>,
}

/// SCALE (module documentation).
pub fn run(ctx: &mut Ctx) -> Vec<Row> {
    let sizes: Vec<usize> = match std::env::var("SCALE_SIZES") {
        Ok(list) => list
            .split(',')
            .filter_map(|n| n.trim().parse().ok())
            .collect(),
        Err(_) if ctx.cfg.quick => vec![8, 16],
        Err(_) => vec![8, 16, 32, 64],
    };
    let only = std::env::var("SCALE_ONLY").ok();
    let samples = ctx.cfg.size(200, 50) as usize;
    let limit = Duration::from_secs(if ctx.cfg.quick { 60 } else { 180 });
    let mut rows = Vec::new();
    let mut before: BTreeMap<&'static str, f64> = BTreeMap::new();
    for &n in &sizes {
        eprintln!("  SCALE {n} nodes ...");
        match measure(n, samples, limit, only.as_deref()) {
            Ok(f) => rows.extend(rows_of(n, &f, &mut before)),
            Err(e) => rows.push(Row::failed(format!("SCALE {n} nodes"), "ms", e)),
        }
    }
    rows
}

fn measure(
    n: usize,
    samples: usize,
    limit: Duration,
    only: Option<&str>,
) -> Result<Figures, String> {
    let mut fleet = Fleet::start(&format!("s{n}n"), n, limit)?;
    let mut f = Figures {
        mesh_ms: ms(fleet.meshed_in),
        idle_cpu_pct: 0.0,
        rss_mb: 0.0,
        majority: Vec::new(),
        all: Vec::new(),
        election_ms: Err("not run".into()),
        herd_ms: Err("not run".into()),
        herd_msgs_per_grant: None,
        failover_ms: Err("not run".into()),
    };
    let nodes = fleet.all_names();
    match only {
        Some("herd") => {
            f.all = locks(&mut fleet, &nodes, "all", samples, limit)?;
            (f.herd_ms, f.herd_msgs_per_grant) = counted_herd(&mut fleet, &nodes, limit);
            return Ok(f);
        }
        Some("election") => {
            idle(&fleet, &mut f)?;
            let elected = elect(&mut fleet, limit);
            f.election_ms = elected.as_ref().map(|(_, d)| ms(*d)).map_err(Clone::clone);
            if let Ok((leader, _)) = &elected {
                f.failover_ms = failover(&mut fleet, leader, limit).map(ms);
            }
            return Ok(f);
        }
        _ => {}
    }
    idle(&fleet, &mut f)?;
    f.majority = locks(&mut fleet, &nodes, "majority", samples, limit)?;
    f.all = locks(&mut fleet, &nodes, "all", samples, limit)?;
    let elected = elect(&mut fleet, limit);
    f.election_ms = elected.as_ref().map(|(_, d)| ms(*d)).map_err(Clone::clone);
    (f.herd_ms, f.herd_msgs_per_grant) = counted_herd(&mut fleet, &nodes, limit);
    if let Ok((leader, _)) = &elected {
        f.failover_ms = failover(&mut fleet, leader, limit).map(ms);
    }
    Ok(f)
}

/// The herd, with the envelopes the nodes sent each other meanwhile, per grant (`None` when a
/// count could not be read).
fn counted_herd(
    fleet: &mut Fleet,
    nodes: &str,
    limit: Duration,
) -> (Result<f64, String>, Option<f64>) {
    let before = fleet.messages_sent(Instant::now() + limit).ok();
    let time = herd(fleet, nodes, limit).map(ms);
    let after = fleet.messages_sent(Instant::now() + limit).ok();
    let per_grant = match (&time, before, after) {
        (Ok(_), Some(b), Some(a)) => Some(a.saturating_sub(b) as f64 / fleet.len() as f64),
        _ => None,
    };
    (time, per_grant)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Every node's CPU over two idle seconds, and its resident memory.
fn idle(fleet: &Fleet, f: &mut Figures) -> Result<(), String> {
    let window = Duration::from_secs(2);
    let first: Vec<_> = (0..fleet.len()).map(|i| fleet.usage(i)).collect();
    std::thread::sleep(window);
    let (mut cpu, mut rss) = (0.0, 0u64);
    for (i, before) in first.into_iter().enumerate() {
        let (b, a) = before
            .zip(fleet.usage(i))
            .ok_or("cannot read /proc for a node")?;
        cpu += (a.0 - b.0) / window.as_secs_f64() * 100.0;
        rss += a.1;
    }
    let n = fleet.len() as f64;
    f.idle_cpu_pct = cpu / n;
    f.rss_mb = rss as f64 / n / (1 << 20) as f64;
    Ok(())
}

/// `samples` locks one after the other from node 0 with `req` over every node: each one's time
/// from the command to its `granted` line, in ns.
fn locks(
    fleet: &mut Fleet,
    nodes: &str,
    req: &str,
    samples: usize,
    limit: Duration,
) -> Result<Vec<u64>, String> {
    let deadline = Instant::now() + limit;
    let mut lat = Vec::with_capacity(samples);
    for k in 0..samples {
        let txn = format!("{req}{k}");
        let t = Instant::now();
        fleet.send(0, &format!("lock {txn} scale/{req}/{k} X {nodes} {req}"))?;
        let granted = format!("granted {txn} ");
        let failed = format!("error {txn} ");
        let at = fleet.wait_for(deadline, |(who, at, line)| {
            (*who == 0 && (line.starts_with(&granted) || line.starts_with(&failed)))
                .then(|| (*at, line.clone()))
        })?;
        if at.1.starts_with(&failed) {
            return Err(at.1);
        }
        lat.push(at.0.duration_since(t).as_nanos() as u64);
        fleet.send(0, &format!("end {txn}"))?;
        let ended = format!("ended {txn}");
        fleet.wait_for(deadline, |(who, _, line)| {
            (*who == 0 && *line == ended).then_some(())
        })?;
    }
    Ok(lat)
}

/// The leader each node prints for dictionary `d` (`leader d <node> <epoch> ...`).
fn leader_of(d: &str, line: &str) -> Option<Option<(String, String)>> {
    let rest = line
        .strip_prefix("leader ")?
        .strip_prefix(d)?
        .strip_prefix(' ')?;
    let mut words = rest.split_whitespace();
    Some(match (words.next(), words.next()) {
        (Some("none"), _) | (None, _) => None,
        (Some(node), Some(epoch)) => Some((node.to_owned(), epoch.to_owned())),
        (Some(_), None) => None,
    })
}

/// Waits until every node in `who` prints the same leader of `d`, other than `not`.
fn agreed(
    fleet: &Fleet,
    d: &str,
    who: &[usize],
    not: Option<&str>,
    deadline: Instant,
) -> Result<(String, Instant), String> {
    let mut latest: BTreeMap<usize, Option<(String, String)>> = BTreeMap::new();
    fleet.wait_for(deadline, |(i, at, line)| {
        if let Some(l) = leader_of(d, line) {
            latest.insert(*i, l);
        }
        let first = latest.get(who.first()?)?.clone()?;
        let all = who
            .iter()
            .all(|w| latest.get(w) == Some(&Some(first.clone())));
        (all && not != Some(first.0.as_str())).then(|| (first.0.clone(), *at))
    })
}

/// A gdict replica started on every node at once: the leader's node, and the time until every
/// node printed the same leader.
fn elect(fleet: &mut Fleet, limit: Duration) -> Result<(String, Duration), String> {
    let t = Instant::now();
    for i in 0..fleet.len() {
        fleet.send(i, "gdict g")?;
    }
    let who: Vec<usize> = (0..fleet.len()).collect();
    let (leader, at) = agreed(fleet, "g", &who, None, t + limit)?;
    Ok((leader, at.duration_since(t)))
}

/// Every node asks for X on one lock with `All` over every node at once and ends as soon as
/// it is granted: the time until every one was granted.
fn herd(fleet: &mut Fleet, nodes: &str, limit: Duration) -> Result<Duration, String> {
    let t = Instant::now();
    for i in 0..fleet.len() {
        fleet.send(i, &format!("lock herd scale/herd X {nodes} all"))?;
    }
    let mut granted = vec![false; fleet.len()];
    let mut last = t;
    while granted.iter().any(|g| !g) {
        let (who, at) = fleet.wait_for(t + limit, |(who, at, line)| {
            if line.starts_with("error herd ") {
                return Some(Err(line.clone()));
            }
            line.starts_with("granted herd ").then_some(Ok((*who, *at)))
        })??;
        granted[who] = true;
        last = at;
        fleet.send(who, "end herd")?;
    }
    Ok(last.duration_since(t))
}

/// The leader's node killed with SIGKILL: the time until every other node prints the same
/// new leader.
fn failover(fleet: &mut Fleet, leader: &str, limit: Duration) -> Result<Duration, String> {
    let dead = (0..fleet.len())
        .find(|&i| fleet.name(i) == leader)
        .ok_or_else(|| format!("the leader {leader} is not a node of the fleet"))?;
    let t = Instant::now();
    fleet.kill(dead);
    let who: Vec<usize> = (0..fleet.len()).filter(|&i| i != dead).collect();
    let (_, at) = agreed(fleet, "g", &who, Some(leader), t + limit)?;
    Ok(at.duration_since(t))
}

/// The rows of one N, each with its growth over the same row of the previous N.
fn rows_of(n: usize, f: &Figures, before: &mut BTreeMap<&'static str, f64>) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut add = |key: &'static str,
                   unit: &'static str,
                   value: &Result<f64, String>,
                   lat: Option<&[u64]>,
                   note: String| {
        let value = match value {
            Ok(v) => *v,
            Err(e) => {
                rows.push(Row::failed(format!("SCALE {n} {key}"), unit, e.clone()));
                return;
            }
        };
        let p = lat.and_then(percentiles);
        let growth = before
            .insert(key, value)
            .filter(|b| *b > 0.0)
            .map(|b| format!("x2={:.2}", value / b))
            .unwrap_or_default();
        rows.push(Row {
            name: format!("SCALE {n} {key}"),
            unit,
            outcome: Outcome::Measured(Measured {
                value,
                rank: RankBy::P50,
                min: value,
                max: value,
                p50_ns: p.as_ref().map(|p| p.p50),
                p99_ns: p.as_ref().map(|p| p.p99),
                ops: lat.map_or(1, |l| l.len() as u64),
                rounds: 1,
                floor: None,
                goal: None,
                notes: [note, growth]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect(),
            }),
        });
    };
    let none = String::new;
    add("mesh", "ms", &Ok(f.mesh_ms), None, none());
    let rss = format!("rss/node={:.1}MB", f.rss_mb);
    add("idle CPU/node", "%", &Ok(f.idle_cpu_pct), None, rss);
    let p50 = |l: &[u64]| Ok(percentiles(l).map_or(0.0, |p| p.p50 / 1e3));
    add(
        "Majority lock",
        "us p50",
        &p50(&f.majority),
        Some(&f.majority),
        none(),
    );
    add("All lock", "us p50", &p50(&f.all), Some(&f.all), none());
    add("election", "ms", &f.election_ms, None, none());
    let note = match f.herd_msgs_per_grant {
        Some(m) => format!("msgs/grant={m:.0}"),
        None => "msgs/grant=not read".to_string(),
    };
    add("herd", "ms", &f.herd_ms, None, note);
    add("failover SIGKILL", "ms", &f.failover_ms, None, none());
    rows
}
