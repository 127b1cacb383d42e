//! Multi-node requests on the simulated network, with one real lock table per node: deadlocks
//! across nodes (also through the copies of one lock, a request widened to another node while
//! it holds the first), random transactions whose requests name several nodes with every
//! requirement, herds asking for one lock on every node at once with mixed requests, and lock
//! servers that crash and come back (as the Erlang original's agent handles them).

mod sim;

use locks_agent::{Options, Req, TransactionStatus};
use locks_core::{AgentId, Mode, ModeTable, NodeId, lock_id};
use sim::{Ask, Sim};

fn nodes() -> Vec<NodeId> {
    ["n1", "n2", "n3"]
        .into_iter()
        .map(|n| NodeId::new(n).unwrap())
        .collect()
}

fn agent(serial: u64) -> AgentId {
    // Agents live on n1; where they live does not matter to the servers.
    AgentId::new(nodes()[0].clone(), 1, serial)
}

/// The root of lock `i` of a cycle: `c` or `d` in turn, which a node's table keeps in different
/// shards, so the waits of a cycle on one node are in one shard or in two.
fn root(i: usize) -> &'static str {
    if i.is_multiple_of(2) { "c" } else { "d" }
}

fn network(seed: u64) -> Sim {
    let modes = ModeTable::standard();
    let mut sim = Sim::new(seed, modes.clone());
    // Every other seed, the clients with an odd serial take their first locks on the fast
    // path (`sim/fast.rs`).
    sim.fast_path = seed.is_multiple_of(2);
    for (i, n) in nodes().iter().enumerate() {
        sim.add_server(n.clone(), i as u64 * 1_000_000);
    }
    sim
}

fn quiet(sim: &mut Sim) {
    sim.run(200_000)
        .unwrap_or_else(|e| panic!("{e}\n{}", sim.dump()));
}

#[test]
fn cross_node_cycles_in_every_id_order() {
    // Agent at position i holds lock i on node i mod 3 and wants lock i+1 on its node.
    for k in 2..=4usize {
        let mut perms: Vec<Vec<u64>> = vec![(1..=k as u64).collect()];
        // Every rotation and its mirror covers the distinct relative orders for k <= 3; for
        // k = 4 use all 24 permutations.
        if k == 4 {
            perms = permutations(4);
        } else {
            perms.extend(permutations(k));
        }
        for (p, ids) in perms.iter().enumerate() {
            let n = nodes();
            let at = |i: usize| n[i % 3].clone();
            one_cycle((k * 100 + p) as u64, ids, 1..=1, |i| {
                Ask::on(&at(i), lock_id![root(i), i as i64], Mode::X)
            });
        }
    }
}

/// Agent at position `i` of `ids` first gets `ask(i)` granted, then (all at once) asks for
/// `ask(i + 1)`: a cycle through every agent, which must end with every transaction done
/// after as many surrenders as `surrenders` allows.
fn one_cycle(
    seed: u64,
    ids: &[u64],
    surrenders: std::ops::RangeInclusive<u64>,
    ask: impl Fn(usize) -> Ask,
) {
    let k = ids.len();
    let mut sim = network(seed);
    sim.auto_end = false;
    for (i, &id) in ids.iter().enumerate() {
        sim.add_client(agent(id), Options::default(), vec![vec![ask(i)]]);
    }
    for &id in ids {
        sim.start_phase(&agent(id));
    }
    quiet(&mut sim);
    for (i, &id) in ids.iter().enumerate() {
        sim.ask(&agent(id), ask((i + 1) % k)).unwrap();
        sim.clients.get_mut(&agent(id)).unwrap().in_phase = true;
    }
    sim.auto_end = true;
    quiet(&mut sim);
    assert!(
        sim.unfinished().is_empty(),
        "{ids:?}: {:?}\n{}",
        sim.unfinished(),
        sim.dump()
    );
    assert!(
        surrenders.contains(&sim.stats.surrenders),
        "{ids:?}: {} surrenders",
        sim.stats.surrenders
    );
}

#[test]
fn requests_widened_while_held_resolve_their_cycles() {
    // Agent at position i holds `[w]` on node i, then widens that same request to node i+1:
    // the cycle runs through one lock's copies, each granted before the widening. The widened
    // request is no longer held (the client is told it lost it), and the agent whose first
    // node (its gate) another holds leaves its other copy (`core/agent/gate.rs`), which may
    // break the cycle before a surrender does.
    for k in 2..=3usize {
        for (p, ids) in permutations(k).iter().enumerate() {
            let n = nodes();
            one_cycle((k * 1000 + p) as u64, ids, 0..=1, |i| {
                Ask::on(&n[i], lock_id!["w"], Mode::X)
            });
        }
    }
}

fn permutations(k: usize) -> Vec<Vec<u64>> {
    let mut out = vec![vec![]];
    for x in 1..=k as u64 {
        out = out
            .into_iter()
            .flat_map(|p: Vec<u64>| {
                (0..=p.len()).map(move |i| {
                    let mut q = p.clone();
                    q.insert(i, x);
                    q
                })
            })
            .collect();
    }
    out
}

#[test]
fn random_multi_node_transactions_all_finish() {
    let (surrenders, _) = random_multi_node(false);
    eprintln!("random multi-node transactions: {surrenders} surrenders in 30 runs");
}

#[test]
fn random_multi_node_transactions_dropping_calls_all_finish() {
    // Calls dropped at every point of a request's life, on one to three nodes each.
    let (surrenders, drops) = random_multi_node(true);
    eprintln!("random multi-node transactions: {drops} calls dropped, {surrenders} surrenders");
    assert!(drops > 0);
}

/// Twelve agents, each with up to three requests on random sets of nodes; with `drops`, the
/// clients drop some of their calls (`sim/drops.rs`). Returns the surrenders and the drops.
fn random_multi_node(drops: bool) -> (u64, u64) {
    let reqs = [Req::All, Req::Majority, Req::Any, Req::AllAlive];
    let (mut surrenders, mut dropped) = (0, 0);
    for seed in sim::seeds(30) {
        let mut sim = network(seed);
        sim.drops = drops;
        for serial in 1..=12 {
            let steps = 1 + sim.rng().below(3);
            let mut script = Vec::new();
            for _ in 0..steps {
                let rng = sim.rng();
                // Two roots, in different shards of a node's table.
                let root = if rng.below(2) == 0 { "m" } else { "t" };
                let lock = lock_id![root, rng.below(4) as i64];
                let mode = if rng.below(2) == 0 { Mode::S } else { Mode::X };
                let mut ns = nodes();
                rng.shuffle(&mut ns);
                ns.truncate(1 + rng.below(3));
                // One requirement per lock per agent: the same lock asked again keeps it.
                let req = reqs[(serial as usize + lock.last().payload_len()) % reqs.len()];
                script.push(vec![Ask {
                    lock,
                    mode,
                    nodes: ns,
                    req,
                }]);
            }
            sim.add_client(agent(serial), Options::default(), script);
        }
        run_to_the_end(seed, &mut sim);
        surrenders += sim.stats.surrenders;
        dropped += sim.stats.drops;
    }
    (surrenders, dropped)
}

/// Starts every client's first phase and runs until all is quiet: every transaction must have
/// finished.
fn run_to_the_end(seed: u64, sim: &mut Sim) {
    let ids: Vec<AgentId> = sim.clients.keys().cloned().collect();
    for id in &ids {
        sim.start_phase(id);
    }
    if let Err(e) = sim.run(200_000) {
        panic!("seed {seed}: {e}\n{}", sim.dump());
    }
    assert!(
        sim.unfinished().is_empty(),
        "seed {seed}: {:?}\n{}",
        sim.unfinished(),
        sim.dump()
    );
}

/// Herds: three to six agents, living on any node, ask for `[h]` on every node at once, most
/// with `All` (which leave their other copies while they wait on the first node:
/// `core/agent/gate.rs`), some with `Majority`, in `X` or `S`; some hold a lock first that
/// keeps them from leaving (`[h, 1]`, under `[h]`) or that others may wait on (`[g]`), and
/// some ask for `[h]` over two nodes only (another first node). Every transaction must finish.
#[test]
fn herds_with_mixed_requests_all_finish() {
    let reqs = [Req::All, Req::All, Req::AllAlive, Req::Majority];
    let (mut surrenders, mut real, mut needless) = (0, 0, 0);
    for seed in sim::seeds(30) {
        let mut sim = network(seed);
        let count = 3 + sim.rng().below(4) as u64;
        for serial in 1..=count {
            let rng = sim.rng();
            let home = nodes()[rng.below(3)].clone();
            let req = reqs[rng.below(reqs.len())];
            let mode = if rng.below(4) == 0 { Mode::S } else { Mode::X };
            let mut script = Vec::new();
            match rng.below(5) {
                0 => script.push(vec![Ask::on(&home, lock_id!["h", 1], Mode::X)]),
                1 => script.push(vec![Ask::on(&home, lock_id!["g"], Mode::X)]),
                _ => {}
            }
            let mut ns = nodes();
            if rng.below(4) == 0 {
                ns.remove(rng.below(3));
            }
            let mut last = vec![Ask {
                lock: lock_id!["h"],
                mode,
                nodes: ns,
                req,
            }];
            if rng.below(3) == 0 {
                last.push(Ask::on(&nodes()[rng.below(3)], lock_id!["g"], Mode::X));
            }
            script.push(last);
            sim.add_client(AgentId::new(home, 1, serial), Options::default(), script);
        }
        run_to_the_end(seed, &mut sim);
        surrenders += sim.stats.surrenders;
        let audit = sim.audit();
        (real, needless) = (real + audit.real, needless + audit.needless);
    }
    eprintln!(
        "herds with mixed requests: {surrenders} surrenders, applied {real} on a real cycle, \
         {needless} needless"
    );
}

/// Four agents want `[m]` for writing on all three nodes with `req`, one after the other.
fn contended(seed: u64, req: Req, options: Options) -> Sim {
    let mut sim = network(seed);
    sim.auto_end = false;
    for serial in 1..=4 {
        let ask = Ask {
            lock: lock_id!["m"],
            mode: Mode::X,
            nodes: nodes(),
            req,
        };
        sim.add_client(agent(serial), options.clone(), vec![vec![ask]]);
        sim.start_phase(&agent(serial));
    }
    quiet(&mut sim);
    sim
}

#[test]
fn majority_survives_a_server_crash_and_stays_exclusive() {
    for seed in sim::seeds(20) {
        let mut sim = contended(seed, Req::Majority, Options::default());
        let n3 = nodes()[2].clone();
        // n3 loses its table: whoever held [m] there loses it.
        sim.crash_server(&n3, 50_000_000);
        sim.node_down(&n3);
        sim.auto_end = true;
        quiet(&mut sim);
        // The oracles checked all along that no two agents held a majority at once. With two
        // nodes left out of three, a majority is still possible: everybody finishes.
        assert!(sim.unfinished().is_empty(), "seed {seed}\n{}", sim.dump());
        sim.node_up(&n3);
        quiet(&mut sim);
    }
}

#[test]
fn all_without_await_nodes_cannot_be_served_after_a_crash() {
    let mut sim = contended(7, Req::All, Options::default());
    let n2 = nodes()[1].clone();
    sim.crash_server(&n2, 50_000_000);
    sim.node_down(&n2);
    quiet(&mut sim);
    for serial in 1..=4 {
        assert_eq!(
            sim.status(&agent(serial)),
            TransactionStatus::CannotServe {
                locks: vec![lock_id!["m"]],
                nodes: vec![n2.clone()]
            }
        );
    }
}

#[test]
fn all_with_await_nodes_asks_again_when_the_node_returns() {
    for seed in sim::seeds(20) {
        let options = Options {
            await_nodes: true,
            ..Options::default()
        };
        let mut sim = contended(seed, Req::All, options);
        let n2 = nodes()[1].clone();
        sim.crash_server(&n2, 50_000_000);
        sim.node_down(&n2);
        sim.auto_end = true;
        quiet(&mut sim);
        for serial in 1..=4 {
            assert_eq!(sim.status(&agent(serial)), TransactionStatus::Waiting);
        }
        sim.node_up(&n2);
        quiet(&mut sim);
        assert!(sim.unfinished().is_empty(), "seed {seed}\n{}", sim.dump());
    }
}

/// A herd over the three nodes (`All`, waiting for nodes that go down) whose first node, the
/// gate every request asks plainly, crashes at a random step of the start (some copies tried
/// and found busy, some granted, some requests queued on the gate or retreated), and comes back
/// once the rest is quiet: every transaction must finish.
#[test]
fn herds_whose_gate_crashes_at_any_step_all_finish() {
    let options = Options {
        await_nodes: true,
        ..Options::default()
    };
    for seed in sim::seeds(40) {
        let mut sim = network(seed);
        for serial in 1..=4 {
            let ask = Ask {
                lock: lock_id!["m"],
                mode: Mode::X,
                nodes: nodes(),
                req: Req::All,
            };
            sim.add_client(agent(serial), options.clone(), vec![vec![ask]]);
            sim.start_phase(&agent(serial));
        }
        let steps = sim.rng().below(60);
        for _ in 0..steps {
            match sim.step() {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => panic!("seed {seed}: {e}\n{}", sim.dump()),
            }
        }
        let gate = nodes()[0].clone();
        sim.crash_server(&gate, 50_000_000);
        sim.node_down(&gate);
        quiet(&mut sim);
        sim.node_up(&gate);
        quiet(&mut sim);
        assert!(
            sim.unfinished().is_empty(),
            "seed {seed}: {:?}\n{}",
            sim.unfinished(),
            sim.dump()
        );
    }
}
