//! Randomized transactions on the simulated network with the real lock table: 16 agents take
//! random sets of read and write locks on a small tree, one lock at a time in random orders (so
//! deadlocks are frequent), and end when they have them all. Now and then a phase takes a
//! stronger lock on a lock already held, or a lock below it, and converts the held lock down in
//! the same phase: the conversion may reach the server while the entry converts up for the new
//! lock. Every transaction must finish, within a bound on the number of steps, and the oracles
//! of the simulation (no two incompatible holders; "have all locks" only when the table agrees;
//! an agent and the table agree on its modes whenever nothing is in flight between them) hold
//! after every step.

mod sim;

use locks_agent::Options;
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId, lock_id};
use sim::{Act, Ask, Audit, Rng, Sim, Stats};
use std::collections::BTreeMap;

fn node() -> NodeId {
    NodeId::new("n1").unwrap()
}

/// A lock of the tree `[t]`, `[t, i]`, `[t, i, j]` (i, j < 4), leaves more likely; one time in
/// three of the tree `[u]` instead (a node's table puts the two in different shards, so
/// waits, cycles and removals cross shards).
fn random_lock(rng: &mut Rng) -> LockId {
    let root = if rng.below(3) == 0 { "u" } else { "t" };
    let (i, j) = (rng.below(4) as i64, rng.below(4) as i64);
    match rng.below(10) {
        0 => lock_id![root],
        1..=3 => lock_id![root, i],
        _ => lock_id![root, i, j],
    }
}

/// A script of 1 to 5 blocking lock calls, sometimes asking for the same lock twice (a read
/// then a write is an upgrade). One phase in three after the first, if it can, converts an
/// earlier lock down together with a request that makes its entry convert up (see
/// [`up_and_down`]).
fn random_script(rng: &mut Rng) -> Vec<Vec<Act>> {
    let modes = ModeTable::standard();
    // The mode of each request, as the agent will have it when the phase starts.
    let mut asked: BTreeMap<LockId, Mode> = BTreeMap::new();
    let n = 1 + rng.below(5);
    (0..n)
        .map(|_| {
            if !asked.is_empty()
                && rng.chance(3)
                && let Some(phase) = up_and_down(rng, &modes, &mut asked)
            {
                return phase;
            }
            let mode = if rng.below(2) == 0 { Mode::S } else { Mode::X };
            let ask = Ask::on(&node(), random_lock(rng), mode);
            let m = asked.get(&ask.lock).map_or(mode, |d| modes.group(mode, *d));
            asked.insert(ask.lock.clone(), m);
            vec![Act::Lock(ask)]
        })
        .collect()
}

/// A phase that converts some earlier request on `l` down while its entry may convert up: a
/// lock below `l` (the entry on `l` needs its intention mode too), or a stronger lock on `l`
/// itself, then `convert(l)` to a random mode weaker than the request's mode then. `None` if
/// the chosen request allows neither.
fn up_and_down(
    rng: &mut Rng,
    modes: &ModeTable,
    asked: &mut BTreeMap<LockId, Mode>,
) -> Option<Vec<Act>> {
    let locks: Vec<LockId> = asked.keys().cloned().collect();
    let l = locks[rng.below(locks.len())].clone();
    let below = l.depth() < 3 && rng.chance(2);
    let (target, mode) = if below {
        let mut t = l.child(rng.below(4) as i64);
        if t.depth() < 3 && rng.chance(2) {
            t = t.child(rng.below(4) as i64);
        }
        (t, if rng.chance(2) { Mode::S } else { Mode::X })
    } else {
        // A stronger lock on `l`: X, unless it is X already.
        (l.clone(), Mode::X)
    };
    let up = asked.get(&target).map_or(mode, |d| modes.group(mode, *d));
    if target == l && up == asked[&l] {
        return None;
    }
    asked.insert(target.clone(), up);
    let now = asked[&l];
    let weaker: Vec<Mode> = Mode::ALL
        .into_iter()
        .filter(|m| *m != now && modes.covers(now, *m))
        .collect();
    let mut phase = vec![Act::Lock(Ask::on(&node(), target, mode))];
    if !weaker.is_empty() {
        let down = weaker[rng.below(weaker.len())];
        asked.insert(l.clone(), down);
        phase.push(Act::Convert(l, down));
    }
    Some(phase)
}

fn run(seed: u64, agents: u64, options: &Options) -> Result<(Stats, Audit), String> {
    run_with(seed, agents, options, false)
}

/// [`run`], with clients that drop some of their `lock` calls when `drops` is set
/// (`sim/drops.rs`).
fn run_with(
    seed: u64,
    agents: u64,
    options: &Options,
    drops: bool,
) -> Result<(Stats, Audit), String> {
    let modes = ModeTable::standard();
    let mut sim = Sim::new(seed, modes.clone());
    sim.drops = drops;
    // Every other seed, the clients with an odd serial take their first locks on the fast
    // path (`sim/fast.rs`).
    sim.fast_path = seed.is_multiple_of(2);
    sim.add_server(node(), 1000);
    sim.inspect_table(node());
    let mut ids = Vec::new();
    for serial in 1..=agents {
        let script = random_script(sim.rng());
        let id = AgentId::new(node(), 1, serial);
        sim.add_client_acts(id.clone(), options.clone(), script);
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
    Ok((sim.stats.clone(), sim.audit()))
}

/// Seeds that found a hole once, run in every CI run whatever `AGENT_SIM_SEEDS` says.
/// - 135: a holder that converted up behind a waiting converter and back down was told only
///   its own state, dropped the waiter's forwarded view and refused it from then on; the waiter
///   sent nothing new, and the cycle the holder then closed on `[u]` was never resolved. Fixed
///   by rule 4 of the table's notices: a holder of a lock others convert or wait on gets the
///   queue with its notice.
/// - 1743: a client converted a child lock down (its ancestor's group had been `SIX` only for
///   the child's sake) and then asked the ancestor for `SIX` itself; the agent counted the old
///   notice of the ancestor and told the client it held `SIX`, while the server, having applied
///   the conversion first, held `S`. Fixed by capping the ancestors' copies until the
///   conversion (or an unlock) is answered (`knowledge/answers.rs`).
const FOUND_HOLES: &[u64] = &[135, 1743];

#[test]
fn seeds_that_found_holes_all_finish() {
    for &seed in FOUND_HOLES {
        run(seed, 16, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
    }
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
        total.probes += s.probes;
        total.steps += s.steps;
        total.notices += s.notices;
        total.converts_granted += s.converts_granted;
        total.converts_converting += s.converts_converting;
        total.converts_waiting += s.converts_waiting;
        total.agreements += s.agreements;
        total.fast += s.fast;
    }
    eprintln!("{} requests taken on the fast path", total.fast);
    assert!(
        total.fast > 0,
        "some clients take their first locks on the fast path"
    );
    eprintln!(
        "16 agents x {runs} seeds: {} surrenders ({} stale), {} forwards, {} probe msgs, {} \
         notices, {} steps in all",
        total.surrenders,
        total.stale_surrenders,
        total.forwards,
        total.probes,
        total.notices,
        total.steps
    );
    let applied = (real + needless).max(1);
    eprintln!(
        "applied surrenders: {real} on a real cycle, {needless} needless ({:.2}%)",
        100.0 * needless as f64 / applied as f64
    );
    eprintln!(
        "conversions down of entries granted {}, converting up {}, waiting {}; {} agreement checks",
        total.converts_granted, total.converts_converting, total.converts_waiting, total.agreements
    );
    assert!(
        total.surrenders > 0,
        "the workload should deadlock now and then"
    );
    assert!(
        total.converts_converting > 0 && total.converts_granted > 0,
        "the workload should convert down entries that convert up, and granted ones"
    );
    assert!(total.agreements > 0, "agents and the table were compared");
}

#[test]
fn sixteen_agents_dropping_calls_all_finish() {
    // Calls dropped at every point of a request's life (not sent yet, queued, granted and not
    // settled, answered, taken over from the fast path), among deadlocks and conversions: the
    // oracles hold, the tables keep nothing of a withdrawn request, and everybody finishes.
    let (mut drops, mut fast, mut surrenders) = (0, 0, 0);
    for seed in sim::seeds(40) {
        let (s, _) =
            run_with(seed, 16, &Options::default(), true).unwrap_or_else(|e| panic!("{e}"));
        drops += s.drops;
        fast += s.fast;
        surrenders += s.surrenders;
    }
    eprintln!("{drops} calls dropped, {fast} fast-path requests, {surrenders} surrenders");
    assert!(drops > 0 && fast > 0 && surrenders > 0);
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
