//! How an election's cost grows with the group: N candidates on N nodes (majority mode over
//! those nodes), all started at once on the deterministic simulation, run until every member
//! follows one leader. The messages sent (members', agents' and lock servers') and the rounds
//! (the longest chain of messages each sent in answer to the one before) are counted over a
//! few seeds; the test asserts that they grow at most quadratically in N. Counts, not times.
//! With `SIM_KINDS` set, each run also prints the messages delivered by kind (where an
//! election's messages go: `SIM_KINDS=1 cargo test -p locks-leader --test sim_scale --
//! --nocapture`).

mod common;
mod sim;

use locks_leader::{GroupOptions, Role};
use locks_testing::sim::{assert_at_most, assert_at_most_quadratic, largest_over_seeds};
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
    if std::env::var_os("SIM_KINDS").is_some() {
        sim.kinds = Some(Default::default());
    }
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
    if let Some(kinds) = &sim.kinds {
        println!("seed {seed}, {count} nodes, delivered by kind: {kinds:?}");
    }
    sim.counts()
}

/// The largest counts over the seeds for each size.
fn measure(sizes: &[usize]) -> Vec<(usize, u64, u64)> {
    largest_over_seeds("election", sizes, SEEDS, election)
}

/// The most the protocol may take for 3, 5, 8 and 16 nodes, as measured: (nodes, messages,
/// rounds). A change that needs more fails [`election_costs_no_more_than_measured`].
const MEASURED: [(usize, u64, u64); 4] = [(3, 50, 12), (5, 90, 10), (8, 161, 10), (16, 388, 12)];

#[test]
fn election_costs_no_more_than_measured() {
    assert_at_most(&measure(&[3, 5, 8, 16]), &MEASURED);
}

/// Prints the counts up to 32 nodes (slow in a debug build: `cargo test --release -- --ignored`).
#[test]
#[ignore = "slow: a measurement, run by hand"]
fn election_counts_up_to_32_nodes() {
    measure(&[3, 5, 8, 16, 32]);
}

/// The goal: candidates queue on the first node (`core/first_node.rs`), whose holder alone asks the other
/// nodes, so an election is no knot of N-way deadlocks.
#[test]
fn election_messages_and_rounds_grow_at_most_quadratically() {
    assert_at_most_quadratic(&measure(&[3, 5, 8, 16]));
}
