//! How an election's cost grows with the group: N candidates on N nodes (majority mode over
//! those nodes), all started at once on the deterministic simulation, run until every member
//! follows one leader. The messages sent (members', agents' and lock servers') and the rounds
//! (the longest chain of messages each sent in answer to the one before) are counted over a
//! few seeds; the test asserts that they grow at most quadratically in N. Counts, not times.

mod common;
mod sim;

use locks_leader::{GroupOptions, Role};
use sim::Sim;

/// The seeds each size is run with (the largest count is kept).
const SEEDS: u64 = 3;

/// The messages and rounds of an election among `count` candidates on `count` nodes.
fn election(seed: u64, count: usize) -> (u64, u64) {
    let mut sim = Sim::new(seed, "scale");
    let nodes: Vec<_> = (0..count).map(|i| sim.add_node(&format!("n{i}"))).collect();
    sim.options = GroupOptions::majority().nodes(nodes.clone());
    sim.full_mesh();
    sim.run_quiet(1_000_000);
    sim.reset_counts();
    for n in &nodes {
        sim.add_member(n, Role::Candidate);
    }
    assert!(
        sim.run_quiet(50_000_000),
        "seed {seed}, {count} nodes: not quiet\n{}",
        sim.describe()
    );
    sim.check_one_leader_per_component()
        .unwrap_or_else(|e| panic!("seed {seed}, {count} nodes: {e}"));
    sim.counts()
}

/// The largest counts over the seeds for each size.
fn measure(sizes: &[usize]) -> Vec<(usize, u64, u64)> {
    sizes
        .iter()
        .map(|&n| {
            let (m, r) = (0..SEEDS)
                .map(|seed| election(seed, n))
                .fold((0, 0), |(m, r), (m2, r2)| (m.max(m2), r.max(r2)));
            println!("election, {n:2} candidates on {n:2} nodes: {m:7} messages, {r:5} rounds");
            (n, m, r)
        })
        .collect()
}

/// The most the protocol may take for 3, 5, 8 and 16 nodes, as measured: (nodes, messages,
/// rounds). A change that needs more fails [`election_costs_no_more_than_measured`].
const MEASURED: [(usize, u64, u64); 4] = [(3, 58, 11), (5, 150, 14), (8, 355, 16), (16, 1233, 20)];

#[test]
fn election_costs_no_more_than_measured() {
    for ((n, m, r), (_, m0, r0)) in measure(&[3, 5, 8, 16]).into_iter().zip(MEASURED) {
        assert!(
            m <= m0 && r <= r0,
            "{n} nodes: {m} messages and {r} rounds, above {m0} and {r0}"
        );
    }
}

/// Prints the counts up to 32 nodes (slow in a debug build: `cargo test --release -- --ignored`).
#[test]
#[ignore = "slow: a measurement, run by hand"]
fn election_counts_up_to_32_nodes() {
    measure(&[3, 5, 8, 16, 32]);
}

#[test]
fn election_messages_and_rounds_grow_at_most_quadratically() {
    let rows = measure(&[3, 5, 8, 16]);
    let (n0, m0, r0) = rows[0];
    for &(n, m, r) in &rows[1..] {
        // Quadratic growth from the smallest size, with a factor 2 of slack for the constant
        // terms a small group hides.
        let bound = |base: u64| 2 * base * (n * n) as u64 / (n0 * n0) as u64;
        assert!(
            m <= bound(m0),
            "{n} nodes: {m} messages, above quadratic growth from {m0}"
        );
        assert!(
            r <= bound(r0),
            "{n} nodes: {r} rounds, above quadratic growth from {r0}"
        );
    }
}
