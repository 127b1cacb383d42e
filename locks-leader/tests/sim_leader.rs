//! Leader election on the deterministic simulation (`tests/sim`): member cores and real lock
//! tables, messages interleaved by a seeded generator, netsplits that drop what is in flight.
//! Each run is a function of its seed; a failure prints the seed and the cluster's state.

mod common;
mod sim;

use locks_core::NodeId;
use locks_leader::{GroupOptions, Role};
use sim::{Rng, Sim};

const STEPS: u64 = 200_000;

/// The seeds of a randomized test: `default` of them, or as many as `LEADER_SIM_SEEDS` says.
fn seeds(default: u64) -> std::ops::Range<u64> {
    sim::seeds_from_env("LEADER_SIM_SEEDS", default)
}

fn quiet(sim: &mut Sim, seed: u64, what: &str) {
    assert!(
        sim.run_quiet(STEPS),
        "seed {seed}: not quiet after {what}\n{}",
        sim.describe()
    );
}

/// Splits `nodes` into two or three random islands (empty ones dropped), gradually.
fn split_at_random(sim: &mut Sim, rng: &mut Rng, nodes: &[NodeId]) {
    let k = 2 + rng.below(2);
    let mut islands = vec![Vec::new(); k];
    for n in nodes {
        islands[rng.below(k)].push(n.clone());
    }
    islands.retain(|i| !i.is_empty());
    sim.islands_gradually(&islands, 30);
}

/// A store of the next value through a member chosen at random.
fn store_through_any_member(sim: &mut Sim, rng: &mut Rng, stores: &mut i64) {
    let members: Vec<_> = sim.members.keys().cloned().collect();
    let m = members[rng.below(members.len())].clone();
    sim.store(&m, &format!("s{stores}"), *stores);
    *stores += 1;
}

/// A new node joins, connected to `peers`, with a candidate (or, one time in three, a worker).
fn join(sim: &mut Sim, rng: &mut Rng, nodes: &mut Vec<NodeId>, peers: &[NodeId]) {
    let n = sim.add_node(&format!("n{}", nodes.len()));
    for p in peers {
        sim.connect(&n, p);
    }
    let role = if rng.chance(3) {
        Role::Worker
    } else {
        Role::Candidate
    };
    sim.add_member(&n, role);
    nodes.push(n);
}

/// `count` connected nodes with a candidate each, in majority mode over those nodes (checked
/// after every step for two leaders), run until quiet.
fn majority_group(seed: u64, group: &str, count: usize) -> (Sim, Vec<NodeId>) {
    let mut sim = Sim::new(seed, group);
    let nodes: Vec<_> = (0..count).map(|i| sim.add_node(&format!("n{i}"))).collect();
    sim.options = GroupOptions::majority().nodes(nodes.clone());
    sim.check_single_leader = true;
    sim.full_mesh();
    for n in &nodes {
        sim.add_member(n, Role::Candidate);
    }
    quiet(&mut sim, seed, "start");
    (sim, nodes)
}

/// Heals every split, then checks that one leader remains and every store reached everyone.
fn heal_and_check(sim: &mut Sim, seed: u64) {
    sim.full_mesh();
    quiet(sim, seed, "final heal");
    sim.check_one_leader_per_component()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    sim.check_stores_everywhere()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
}

#[test]
fn sim_one_component_elects_one_leader_that_all_follow() {
    for seed in 0..40 {
        let mut sim = Sim::new(seed, "g");
        let nodes: Vec<_> = (0..1 + seed as usize % 5)
            .map(|i| sim.add_node(&format!("n{i}")))
            .collect();
        sim.full_mesh();
        for (i, n) in nodes.iter().enumerate() {
            sim.add_member(n, Role::Candidate);
            if i % 2 == 1 {
                sim.add_member(n, Role::Worker);
            }
        }
        quiet(&mut sim, seed, "start");
        sim.check_one_leader_per_component()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[test]
fn sim_stores_before_any_leader_wait_and_reach_everyone() {
    for seed in 0..20 {
        let mut sim = Sim::new(seed, "g");
        let nodes: Vec<_> = (0..3).map(|i| sim.add_node(&format!("n{i}"))).collect();
        sim.full_mesh();
        let members: Vec<_> = nodes
            .iter()
            .map(|n| sim.add_member(n, Role::Candidate))
            .collect();
        // Stores made at once, before any election is done.
        for (i, m) in members.iter().enumerate() {
            sim.store(m, &format!("k{i}"), i as i64);
        }
        quiet(&mut sim, seed, "stores");
        assert_eq!(sim.acked.len(), 3, "seed {seed}: {:?}", sim.replies);
        sim.check_one_leader_per_component()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        sim.check_stores_everywhere()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[test]
fn sim_islands_mode_netsplit_elects_one_leader_per_island_and_heal_merges() {
    for seed in seeds(30) {
        let mut sim = Sim::new(seed, "g");
        sim.options = GroupOptions::islands();
        let nodes: Vec<_> = (0..5).map(|i| sim.add_node(&format!("n{i}"))).collect();
        sim.full_mesh();
        let members: Vec<_> = nodes
            .iter()
            .map(|n| sim.add_member(n, Role::Candidate))
            .collect();
        quiet(&mut sim, seed, "start");
        let cut = 1 + seed as usize % 4;
        sim.islands(&[nodes[..cut].to_vec(), nodes[cut..].to_vec()]);
        quiet(&mut sim, seed, "split");
        sim.check_one_leader_per_component()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        sim.store(&members[0], "left", 1);
        sim.store(&members[4], "right", 2);
        quiet(&mut sim, seed, "stores");
        assert_eq!(sim.acked.len(), 2, "seed {seed}");
        sim.full_mesh();
        quiet(&mut sim, seed, "heal");
        sim.check_one_leader_per_component()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        sim.check_stores_everywhere()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

/// Erlang's quarantined `random_netsplits` (in the original's test suite), which must pass here in
/// islands mode: a random, bounded sequence of splits, heals, joins of new nodes and stores
/// over five nodes (then up to seven), checking after each that every island agrees on one
/// leader, and ending healed with one leader and every acknowledged store on every member.
#[test]
fn sim_islands_mode_random_netsplits_over_five_nodes() {
    for seed in seeds(30) {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut sim = Sim::new(seed, "ape");
        sim.options = GroupOptions::islands();
        let mut nodes: Vec<_> = (0..5).map(|i| sim.add_node(&format!("n{i}"))).collect();
        sim.full_mesh();
        for n in &nodes {
            sim.add_member(n, Role::Candidate);
        }
        let mut stores = 0;
        for step in 0..25 {
            match rng.below(5) {
                0 => split_at_random(&mut sim, &mut rng, &nodes),
                1 => {
                    let all = sim.nodes();
                    sim.islands_gradually(&[all], 30);
                }
                2 if nodes.len() < 7 => {
                    // A new node joins the island of a random node, with a candidate (or a
                    // worker) on it.
                    let buddy = nodes[rng.below(nodes.len())].clone();
                    let peers = sim.peers(&buddy);
                    join(&mut sim, &mut rng, &mut nodes, &peers);
                }
                _ => store_through_any_member(&mut sim, &mut rng, &mut stores),
            }
            quiet(&mut sim, seed, &format!("step {step}"));
            sim.check_one_leader_per_component()
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
        }
        heal_and_check(&mut sim, seed);
    }
}

/// Majority mode under random netsplits over a fixed group of five nodes (configured on every
/// member): after every step of the simulation at most one member's leases prove that it
/// leads, every leadership's term exceeds every earlier one, each island with a majority of
/// the nodes ends with one leader and the others with none; acknowledged stores survive.
#[test]
fn sim_majority_mode_never_two_leaders_and_terms_grow() {
    for seed in seeds(30) {
        let mut rng = Rng::new(seed ^ 0x3a1);
        let (mut sim, nodes) = majority_group(seed, "maj", 5);
        let mut stores = 0;
        for step in 0..20 {
            match rng.below(4) {
                0 => split_at_random(&mut sim, &mut rng, &nodes),
                1 => {
                    let all = sim.nodes();
                    sim.islands_gradually(&[all], 30);
                }
                _ => store_through_any_member(&mut sim, &mut rng, &mut stores),
            }
            quiet(&mut sim, seed, &format!("step {step}"));
            sim.check_one_leader_per_component()
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
        }
        heal_and_check(&mut sim, seed);
        assert!(!sim.proven_terms.is_empty(), "seed {seed}: nobody ever led");
    }
}

/// Majority mode: the leader's node cut off from the other two. The old leader steps down
/// before anyone else leads (checked after every step), the other two elect a leader with a
/// larger term, and a store made on the cut-off node is refused for lack of a majority.
#[test]
fn sim_majority_mode_cut_off_leader_steps_down_and_the_majority_elects() {
    for seed in seeds(30) {
        let mut sim = Sim::new(seed, "cut");
        let nodes: Vec<_> = (0..3).map(|i| sim.add_node(&format!("n{i}"))).collect();
        sim.check_single_leader = true;
        sim.full_mesh();
        let members: Vec<_> = nodes
            .iter()
            .map(|n| sim.add_member(n, Role::Candidate))
            .collect();
        quiet(&mut sim, seed, "start");
        sim.check_one_leader_per_component()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let first = sim.proven_terms.last().cloned().expect("a leader");
        let old = members
            .iter()
            .position(|m| m == &first.leader)
            .expect("a member leads");
        let rest: Vec<_> = nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != old)
            .map(|(_, n)| n.clone())
            .collect();
        sim.islands(&[vec![nodes[old].clone()], rest]);
        quiet(&mut sim, seed, "cut");
        sim.check_one_leader_per_component()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let old_core = &sim.members[&members[old]].core;
        assert!(
            !old_core.is_leader(),
            "seed {seed}: the old leader still leads"
        );
        assert_eq!(old_core.leader(), None, "seed {seed}");
        assert!(
            old_core.callbacks().stepped_down >= 1,
            "seed {seed}: no stepped_down callback"
        );
        let second = sim.proven_terms.last().cloned().expect("a leader");
        assert_ne!(second.leader, first.leader, "seed {seed}");
        assert!(second > first, "seed {seed}: {second} > {first}");
        let call = sim.store(&members[old], "lost", 1);
        quiet(&mut sim, seed, "store on the cut-off node");
        assert!(
            matches!(
                sim.replies.get(&(members[old].clone(), call)),
                Some(Err(locks_leader::CallError::NoMajority { up: 1, group: 3 }))
            ),
            "seed {seed}: {:?}",
            sim.replies
        );
    }
}

/// The term of the member that leads, if one does.
fn leading(sim: &Sim) -> Option<locks_leader::Term> {
    sim.members
        .values()
        .find(|sm| sm.core.is_leader())
        .and_then(|sm| sm.core.leader().cloned())
}

/// Whether the leader of `term` would still hold the lock on a majority of its group's nodes
/// with `lost` gone and `joining` more nodes in the group.
fn keeps_majority(
    sim: &Sim,
    term: &locks_leader::Term,
    lost: Option<&NodeId>,
    joining: usize,
) -> bool {
    let core = &sim.members[&term.leader].core;
    let locks_leader::state_machine::State::Leader { grants, .. } = core.state() else {
        return false;
    };
    let held = grants.iter().filter(|(n, _)| Some(n) != lost).count();
    held > (core.group_nodes().len() + joining) / 2
}

/// Majority mode: a leader that holds its majority stays put while nodes join, crash and
/// come back, and are cut off and heal; a cut-off leader is replaced, and when its node heals
/// the new leader stays. Checked after every step for two leaders; after each event that
/// leaves the leader the majority it holds, the leadership (its term) is unchanged. (A leader
/// does not ask for the lock on nodes that came up while it leads, so it may hold a bare
/// majority, and then the loss of one of its nodes, or a join, makes it step down.)
#[test]
fn sim_majority_mode_a_leader_stays_put_through_joins_rejoins_and_heals() {
    for seed in seeds(30) {
        let mut rng = Rng::new(seed ^ 0x57a7);
        let (mut sim, mut nodes) = majority_group(seed, "stay", 3 + 2 * (seed as usize % 2));
        for step in 0..8 {
            let before = leading(&sim).expect("a leader");
            let leader_node = before.leader.node().clone();
            let others: Vec<_> = nodes
                .iter()
                .filter(|n| **n != leader_node)
                .cloned()
                .collect();
            let other = others[rng.below(others.len())].clone();
            let event = rng.below(4);
            let stays = match event {
                0 => {
                    let stays = keeps_majority(&sim, &before, Some(&other), 0);
                    sim.crash(&other);
                    quiet(&mut sim, seed, &format!("step {step}: crash {other}"));
                    sim.restart(&other, Role::Candidate);
                    stays
                }
                1 => {
                    let stays = keeps_majority(&sim, &before, Some(&other), 0);
                    sim.islands(&[
                        vec![other.clone()],
                        sim.nodes().into_iter().filter(|n| n != &other).collect(),
                    ]);
                    quiet(&mut sim, seed, &format!("step {step}: cut off {other}"));
                    sim.full_mesh();
                    stays
                }
                2 if nodes.len() < 7 => {
                    // A join grows the group: the leader stays if the nodes it holds are a
                    // majority of the grown group too (it does not ask for the new node).
                    let stays = keeps_majority(&sim, &before, None, 1);
                    let peers = sim.nodes();
                    join(&mut sim, &mut rng, &mut nodes, &peers);
                    stays
                }
                _ => {
                    // The leader's node cut off (as a pause would): another leads, and keeps
                    // leading when the old one's node heals.
                    let rest: Vec<_> = sim
                        .nodes()
                        .into_iter()
                        .filter(|n| n != &leader_node)
                        .collect();
                    sim.islands(&[vec![leader_node.clone()], rest]);
                    quiet(&mut sim, seed, &format!("step {step}: cut off the leader"));
                    let next = leading(&sim).expect("a leader in the majority");
                    assert_ne!(next.leader, before.leader, "seed {seed} step {step}");
                    sim.full_mesh();
                    quiet(&mut sim, seed, &format!("step {step}: heal the old leader"));
                    assert_eq!(
                        leading(&sim),
                        Some(next),
                        "seed {seed} step {step}: the new leader moved"
                    );
                    false
                }
            };
            quiet(&mut sim, seed, &format!("step {step}"));
            sim.check_one_leader_per_component()
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            if stays {
                assert_eq!(
                    leading(&sim),
                    Some(before),
                    "seed {seed} step {step} (event {event}, {other}): the leader moved\n{}",
                    sim.describe()
                );
            }
        }
    }
}

/// Majority mode over a mix of candidates and workers, one member per node and no configured
/// nodes: every member's node counts, so when the leader's node crashes the remaining nodes
/// (a majority) elect another candidate and every member there, workers included, follows
/// it; checked after every step for two leaders. The node comes back with its role.
#[test]
fn sim_majority_mode_workers_nodes_count_and_a_crashed_leader_is_replaced() {
    for seed in seeds(30) {
        let mut rng = Rng::new(seed ^ 0x3012);
        let count = 3 + seed as usize % 3;
        let mut sim = Sim::new(seed, "mix");
        let nodes: Vec<_> = (0..count).map(|i| sim.add_node(&format!("n{i}"))).collect();
        sim.check_single_leader = true;
        sim.full_mesh();
        // Two candidates at least (one to lead, one to take over), the rest at random.
        let roles: Vec<Role> = (0..count)
            .map(|i| {
                if i < 2 || rng.chance(2) {
                    Role::Candidate
                } else {
                    Role::Worker
                }
            })
            .collect();
        let mut order: Vec<usize> = (0..count).collect();
        for i in (1..count).rev() {
            order.swap(i, rng.below(i + 1));
        }
        for &i in &order {
            sim.add_member(&nodes[i], roles[i]);
        }
        quiet(&mut sim, seed, "start");
        sim.check_one_leader_per_component()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for round in 0..3 {
            let before = sim.proven_terms.last().cloned().expect("a leader");
            let victim = before.leader.node().clone();
            let role = roles[nodes.iter().position(|n| n == &victim).expect("a node")];
            sim.crash(&victim);
            quiet(&mut sim, seed, &format!("crash {round} of {victim}"));
            sim.check_one_leader_per_component()
                .unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
            let after = sim.proven_terms.last().cloned().expect("a leader");
            assert_ne!(after.leader.node(), &victim, "seed {seed} round {round}");
            assert!(
                after > before,
                "seed {seed} round {round}: {after} > {before}"
            );
            sim.restart(&victim, role);
            quiet(&mut sim, seed, &format!("restart {round} of {victim}"));
            sim.check_one_leader_per_component()
                .unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
        }
    }
}

/// Majority mode with crashes: stores through random members, then, a random number of steps
/// later (mid-broadcast, often), the leader's node (or another) crashes and loses its state,
/// and comes back empty later. A store acknowledged before a crash is on a majority of the
/// nodes, so it survives every single crash: at the end every member has every acknowledged
/// store (the nemesis suite's `leader-kill` scenario, in the simulation).
#[test]
fn sim_majority_mode_acknowledged_stores_survive_a_crashed_leader() {
    for seed in seeds(40) {
        let mut rng = Rng::new(seed ^ 0xc4a5);
        let (mut sim, nodes) = majority_group(seed, "crash", 3 + 2 * (seed as usize % 2));
        let mut stores = 0;
        for round in 0..6 {
            for _ in 0..rng.below(4) {
                store_through_any_member(&mut sim, &mut rng, &mut stores);
                sim.run_steps(rng.below(40));
            }
            // Most often the crash comes right after a store is acknowledged (at once, for a
            // store through the leader's own member): the moment a leader that answered before
            // a majority had the store would lose it.
            let acked = sim.acked.len();
            store_through_any_member(&mut sim, &mut rng, &mut stores);
            if rng.chance(4) {
                sim.run_steps(rng.below(20));
            } else {
                for _ in 0..STEPS {
                    if sim.acked.len() > acked || !sim.step() {
                        break;
                    }
                }
            }
            let leader = sim
                .members
                .iter()
                .find(|(_, sm)| sm.core.is_leader())
                .map(|(m, _)| m.node().clone());
            let victim = match leader {
                Some(l) if !rng.chance(4) => l,
                _ => nodes[rng.below(nodes.len())].clone(),
            };
            sim.crash(&victim);
            quiet(&mut sim, seed, &format!("crash {round} of {victim}"));
            sim.check_one_leader_per_component()
                .unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
            sim.restart(&victim, Role::Candidate);
            quiet(&mut sim, seed, &format!("restart {round} of {victim}"));
        }
        heal_and_check(&mut sim, seed);
        assert!(
            sim.acked.len() > 3,
            "seed {seed}: {} stores acked",
            sim.acked.len()
        );
    }
}

/// A candidate or, one time in three, a worker.
fn any_role(rng: &mut Rng) -> Role {
    if rng.chance(3) {
        Role::Worker
    } else {
        Role::Candidate
    }
}

/// Majority mode over a group configured on nodes some of which run no member: one candidate
/// and members on a random number of the other nodes (often none), then members that come
/// late, nodes that crash (the leader's, often) and come back with a member or without one,
/// splits, heals and stores. The election lock decides: a candidate that holds it on a
/// majority of the nodes leads whether or not members run there. Nodes start from random
/// version bases, as nodes started at different times do, so a leader's term is often above
/// every version of the nodes without members. Checked after every step: at most one member's
/// leases prove it leads, and every new leadership's term exceeds the earlier ones; once
/// quiet, each component with a majority of the nodes and a candidate has one leader.
#[test]
fn sim_majority_mode_nodes_without_members_and_members_that_come_late() {
    let mut raised = 0;
    for seed in seeds(30) {
        let mut rng = Rng::new(seed ^ 0x1a7e);
        let count = 3 + seed as usize % 3;
        let mut sim = Sim::new(seed, "late");
        sim.random_clocks = true;
        sim.kinds = Some(Default::default());
        let nodes: Vec<_> = (0..count).map(|i| sim.add_node(&format!("n{i}"))).collect();
        sim.options = GroupOptions::majority().nodes(nodes.clone());
        sim.check_single_leader = true;
        sim.full_mesh();
        let mut order = nodes.clone();
        rng.shuffle(&mut order);
        sim.add_member(&order[0], Role::Candidate);
        for n in &order[1..1 + rng.below(count)] {
            let role = any_role(&mut rng);
            sim.add_member(n, role);
        }
        quiet(&mut sim, seed, "start");
        sim.check_one_leader_per_component()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(leading(&sim).is_some(), "seed {seed}: nobody leads");
        let mut down: Vec<NodeId> = Vec::new();
        let mut stores = 0;
        for step in 0..16 {
            let up: Vec<NodeId> = nodes
                .iter()
                .filter(|n| !down.contains(n))
                .cloned()
                .collect();
            match rng.below(7) {
                0 | 1 => {
                    let role = any_role(&mut rng);
                    sim.add_member(&up[rng.below(up.len())], role);
                }
                2 if up.len() > 1 => {
                    let victim = match leading(&sim) {
                        Some(t) if !rng.chance(3) => t.leader.node().clone(),
                        _ => up[rng.below(up.len())].clone(),
                    };
                    sim.crash(&victim);
                    down.push(victim);
                }
                3 if !down.is_empty() => {
                    // Into the island of a node up, with a member or without one.
                    let back = down.swap_remove(rng.below(down.len()));
                    let peers = sim.peers(&up[rng.below(up.len())]);
                    sim.revive(&back, &peers);
                    if rng.chance(2) {
                        let role = any_role(&mut rng);
                        sim.add_member(&back, role);
                    }
                }
                4 => split_at_random(&mut sim, &mut rng, &up),
                5 => sim.islands_gradually(&[up], 30),
                _ if !sim.members.is_empty() => {
                    store_through_any_member(&mut sim, &mut rng, &mut stores)
                }
                _ => {}
            }
            quiet(&mut sim, seed, &format!("step {step}"));
            sim.check_one_leader_per_component()
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
        }
        for n in down {
            sim.revive(&n, &nodes);
        }
        sim.full_mesh();
        quiet(&mut sim, seed, "final heal");
        sim.check_one_leader_per_component()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let kinds = sim.kinds.as_ref().expect("counted");
        raised += kinds.get("agent Raised").copied().unwrap_or(0);
    }
    // The runs went through nodes where no member ran.
    assert!(raised > 0, "no lock server ever raised its versions");
}
