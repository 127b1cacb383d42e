//! Deadlock cycles of length 2 to 6, in every ordering of the agents' ids, through direct locks
//! and through parent/child locks, on the simulated network with the real lock table: every one
//! is resolved and every transaction then gets all its locks.
//!
//! Agent `i` of a cycle first takes lock `i`; when every agent has its first lock, each asks for
//! lock `i + 1` (mod k). The agent ids follow a permutation of the cycle positions, so every
//! relative order of the ids around the cycle is covered (the Erlang original misses some of
//! them). Run with `--nocapture` to see message counts per
//! resolution.

mod sim;

use locks_agent::Options;
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId, lock_id};
use sim::{Ask, Sim, Stats};

fn node() -> NodeId {
    NodeId::new("n1").unwrap()
}

fn agent(serial: u64) -> AgentId {
    AgentId::new(node(), 1, serial)
}

#[derive(Clone, Copy, Debug)]
enum Shape {
    /// (`c` stands for the agent's root, `c` or `d`: see [`root`].)
    /// Hold `[c, i]` (X), want `[c, i+1]` (X).
    Direct,
    /// Hold `[c, i]` (X), want `[c, i+1, x]` (X): the wait is on the IX of the parent.
    Child,
    /// Hold `[c, i, x]` (X), want `[c, i+1]` (S): a read of a parent waits for a write below.
    Parent,
}

/// The root of agent `i`'s locks: `c` or `d` in turn, which a node's table keeps in different
/// shards, so the waits of one cycle are in one shard or in two.
fn root(i: i64) -> &'static str {
    if i % 2 == 0 { "c" } else { "d" }
}

fn asks(shape: Shape, i: usize, k: usize) -> (Ask, Ask) {
    let (i, j) = (i as i64, ((i + 1) % k) as i64);
    let (ri, rj) = (root(i), root(j));
    let (first, second, mode): (LockId, LockId, Mode) = match shape {
        Shape::Direct => (lock_id![ri, i], lock_id![rj, j], Mode::X),
        Shape::Child => (lock_id![ri, i], lock_id![rj, j, "x"], Mode::X),
        Shape::Parent => (lock_id![ri, i, "x"], lock_id![rj, j], Mode::S),
    };
    (
        Ask::on(&node(), first, Mode::X),
        Ask::on(&node(), second, mode),
    )
}

/// Runs one cycle: position `i` is held by agent `ids[i]`.
fn run_cycle(ids: &[u64], shape: Shape, seed: u64) -> Result<Stats, String> {
    let k = ids.len();
    let modes = ModeTable::standard();
    let mut sim = Sim::new(seed, modes.clone());
    // Every other seed, the clients with an odd serial take their first lock on the fast path
    // and hold it without an agent until they ask for the next one (`sim/fast.rs`), as W5's
    // transactions do.
    sim.fast_path = seed.is_multiple_of(2);
    sim.add_server(node(), 0);
    sim.auto_end = false;
    let mut seconds = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let (first, second) = asks(shape, i, k);
        sim.add_client(agent(id), Options::default(), vec![vec![first]]);
        seconds.push((agent(id), second));
    }
    for &id in ids {
        sim.start_phase(&agent(id));
    }
    sim.run(10_000)?;
    for &id in ids {
        if !sim.status(&agent(id)).have_all_locks() {
            return Err(format!("{} did not get its first lock", agent(id)));
        }
    }
    let before = sim.stats.clone();
    // Everybody asks for the next lock at once; the order of delivery is the simulation's.
    let mut order: Vec<usize> = (0..k).collect();
    sim.rng().shuffle(&mut order);
    // A few steps between two asks (none, every other time): the agents that already wait
    // forward what they know while the holders that ask later may still have no agent.
    for i in order {
        let (id, ask) = seconds[i].clone();
        sim.ask(&id, ask).map_err(|e| e.to_string())?;
        sim.clients.get_mut(&id).expect("a client").in_phase = true;
        let steps = sim.rng().below(8);
        for _ in 0..steps {
            sim.step()?;
        }
    }
    sim.auto_end = true;
    sim.run(100_000)
        .map_err(|e| format!("{e}\n{}", sim.dump()))?;
    let unfinished = sim.unfinished();
    if !unfinished.is_empty() {
        return Err(format!(
            "{ids:?} {shape:?} seed {seed}: {unfinished:?} never got all locks\n{}",
            sim.dump()
        ));
    }
    if sim.stats.surrenders == 0 {
        return Err(format!("{ids:?} {shape:?}: no surrender, so no deadlock?"));
    }
    let mut s = sim.stats.clone();
    s.steps -= before.steps;
    s.to_server -= before.to_server;
    s.notices -= before.notices;
    s.forwards -= before.forwards;
    Ok(s)
}

fn permutations(k: usize) -> Vec<Vec<u64>> {
    fn go(rest: &mut Vec<u64>, cur: &mut Vec<u64>, out: &mut Vec<Vec<u64>>) {
        if rest.is_empty() {
            out.push(cur.clone());
            return;
        }
        for i in 0..rest.len() {
            let x = rest.remove(i);
            cur.push(x);
            go(rest, cur, out);
            cur.pop();
            rest.insert(i, x);
        }
    }
    let mut out = Vec::new();
    go(&mut (1..=k as u64).collect(), &mut Vec::new(), &mut out);
    out
}

/// Every permutation of ids for cycles of length `k`, `seeds` delivery orders each.
fn all_orderings(k: usize, shape: Shape, seeds: u64) {
    let mut total = Stats::default();
    let mut runs = 0u64;
    let mut max_surrenders = 0;
    for (p, ids) in permutations(k).into_iter().enumerate() {
        for s in 0..seeds {
            let seed = (k as u64) << 40 | (p as u64) << 8 | s;
            match run_cycle(&ids, shape, seed) {
                Ok(st) => {
                    runs += 1;
                    max_surrenders = max_surrenders.max(st.surrenders);
                    total.forwards += st.forwards;
                    total.probes += st.probes;
                    total.surrenders += st.surrenders;
                    total.surrendered_msgs += st.surrendered_msgs;
                    total.notices += st.notices;
                    total.to_server += st.to_server;
                    total.steps += st.steps;
                }
                Err(e) => panic!("cycle {ids:?} ({shape:?}, seed {seed}): {e}"),
            }
        }
    }
    let avg = |x: u64| x as f64 / runs as f64;
    eprintln!(
        "{k}-cycles {shape:?}: {runs} runs ({} id orderings x {seeds} seeds); per resolution: \
         {:.1} forwards, {:.1} probe msgs, {:.2} surrenders (max {max_surrenders}), \
         {:.1} surrendered msgs, {:.1} notices, {:.1} server requests",
        runs / seeds,
        avg(total.forwards),
        avg(total.probes),
        avg(total.surrenders),
        avg(total.surrendered_msgs),
        avg(total.notices),
        avg(total.to_server),
    );
}

#[test]
fn two_cycles_in_every_id_order() {
    for shape in [Shape::Direct, Shape::Child, Shape::Parent] {
        all_orderings(2, shape, 20);
    }
}

#[test]
fn three_cycles_in_every_id_order() {
    for shape in [Shape::Direct, Shape::Child, Shape::Parent] {
        all_orderings(3, shape, 50);
    }
}

#[test]
fn four_cycles_in_every_id_order() {
    for shape in [Shape::Direct, Shape::Child, Shape::Parent] {
        all_orderings(4, shape, 10);
    }
}

#[test]
fn five_cycles_in_every_id_order() {
    for shape in [Shape::Direct, Shape::Child, Shape::Parent] {
        all_orderings(5, shape, 1);
    }
}

#[test]
fn six_cycles_in_every_id_order() {
    for shape in [Shape::Direct, Shape::Child, Shape::Parent] {
        all_orderings(6, shape, 1);
    }
}
