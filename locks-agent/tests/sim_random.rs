//! Randomized transactions on the simulated network with the real lock table: 16 agents take
//! random sets of read and write locks on a small tree, one lock at a time in random orders (so
//! deadlocks are frequent), and end when they have them all. Every transaction must finish,
//! within a bound on the number of steps, and the oracles of the simulation (no two
//! incompatible holders; "have all locks" only when the table agrees) hold after every step.

mod sim;

use locks_agent::Options;
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId, lock_id};
use sim::{Ask, Audit, Rng, Sim, Stats, table_server_audited};

fn node() -> NodeId {
    NodeId::new("n1").unwrap()
}

/// A lock of the tree `[t]`, `[t, i]`, `[t, i, j]` (i, j < 4), leaves more likely.
fn random_lock(rng: &mut Rng) -> LockId {
    let (i, j) = (rng.below(4) as i64, rng.below(4) as i64);
    match rng.below(10) {
        0 => lock_id!["t"],
        1..=3 => lock_id!["t", i],
        _ => lock_id!["t", i, j],
    }
}

/// A script of 1 to 5 blocking lock calls, sometimes asking for the same lock twice (a read
/// then a write is an upgrade).
fn random_script(rng: &mut Rng) -> Vec<Vec<Ask>> {
    let n = 1 + rng.below(5);
    (0..n)
        .map(|_| {
            let mode = if rng.below(2) == 0 { Mode::S } else { Mode::X };
            vec![Ask::on(&node(), random_lock(rng), mode)]
        })
        .collect()
}

fn run(seed: u64, agents: u64, options: &Options) -> Result<(Stats, Audit), String> {
    let modes = ModeTable::standard();
    let mut sim = Sim::new(seed, modes.clone());
    let (server, audit) = table_server_audited(&node(), &modes, 1000);
    sim.add_server(node(), server);
    let mut ids = Vec::new();
    for serial in 1..=agents {
        let script = random_script(sim.rng());
        let id = AgentId::new(node(), 1, serial);
        sim.add_client(id.clone(), options.clone(), script);
        ids.push(id);
    }
    sim.rng().shuffle(&mut ids);
    for id in &ids {
        sim.start_phase(id);
    }
    sim.run(200_000)
        .map_err(|e| format!("seed {seed}: {e}\n{}", sim.dump()))?;
    let unfinished = sim.unfinished();
    if !unfinished.is_empty() {
        return Err(format!(
            "seed {seed}: {unfinished:?} never finished\n{}",
            sim.dump()
        ));
    }
    let audit = audit.borrow().clone();
    Ok((sim.stats.clone(), audit))
}

#[test]
fn sixteen_agents_random_locks_all_finish() {
    let mut total = Stats::default();
    let seeds = sim::seeds(40);
    let runs = seeds.end - seeds.start;
    let (mut real, mut needless) = (0, 0);
    for seed in seeds {
        let (s, a) = run(seed, 16, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
        real += a.real;
        needless += a.needless;
        total.surrenders += s.surrenders;
        total.stale_surrenders += s.stale_surrenders;
        total.forwards += s.forwards;
        total.steps += s.steps;
        total.notices += s.notices;
    }
    eprintln!(
        "16 agents x {runs} seeds: {} surrenders ({} stale), {} forwards, {} notices, {} steps in all",
        total.surrenders, total.stale_surrenders, total.forwards, total.notices, total.steps
    );
    eprintln!("applied surrenders: {real} on a real cycle, {needless} needless");
    assert!(
        total.surrenders > 0,
        "the workload should deadlock now and then"
    );
}

#[test]
fn sixteen_agents_with_abort_on_deadlock_all_end() {
    // Aborted transactions end too; the others must still get all their locks.
    let options = Options {
        abort_on_deadlock: true,
        ..Options::default()
    };
    let mut aborts = 0;
    for seed in 100..120 {
        let (s, _) = run(seed, 16, &options).unwrap_or_else(|e| panic!("{e}"));
        aborts += s.aborts;
    }
    eprintln!("abort_on_deadlock: {aborts} aborts in 20 runs");
}
