//! How a herd's cost grows with the cluster: N transactions, one per node, each asking for X
//! on one lock with `All` over the N nodes at the same moment, on the deterministic
//! simulation, run until every one of them has held the lock and ended. The messages sent
//! (agents' and lock servers') and the rounds (the longest chain of messages each sent in
//! answer to the one before) are counted over a few seeds; the test asserts that they grow at
//! most quadratically in N. Counts, not times. With `HERD_STATS` set, each run's messages are
//! also printed by kind.

mod sim;

use locks_agent::{Options, Req};
use locks_core::{AgentId, Mode, ModeTable, NodeId, lock_id};
use locks_testing::sim::{assert_at_most, assert_at_most_quadratic, largest_over_seeds};
use sim::{Ask, Sim};

/// The seeds each size is run with (the largest count is kept).
const SEEDS: u64 = 3;

/// The messages and rounds of a herd of `count` transactions over `count` nodes.
fn herd(seed: u64, count: usize) -> (u64, u64) {
    let mut sim = Sim::new(seed, ModeTable::standard());
    let nodes: Vec<NodeId> = (0..count)
        .map(|i| NodeId::new(format!("n{i}")).unwrap())
        .collect();
    for (i, n) in nodes.iter().enumerate() {
        sim.add_server(n.clone(), i as u64 * 1_000_000);
    }
    let agents: Vec<AgentId> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| AgentId::new(n.clone(), 1, i as u64 + 1))
        .collect();
    for a in &agents {
        let ask = Ask {
            lock: lock_id!["herd"],
            mode: Mode::X,
            nodes: nodes.clone(),
            req: Req::All,
        };
        sim.add_client(a.clone(), Options::default(), vec![vec![ask]]);
    }
    for a in &agents {
        sim.start_phase(a);
    }
    sim.run(50_000_000)
        .unwrap_or_else(|e| panic!("seed {seed}, {count} nodes: {e}\n{}", sim.dump()));
    assert_eq!(
        sim.finished.len(),
        count,
        "seed {seed}, {count} nodes: not every transaction was served\n{}",
        sim.dump()
    );
    let (messages, rounds) = sim.counts();
    if std::env::var_os("HERD_STATS").is_some() {
        let st = &sim.stats;
        println!(
            "  seed {seed}, {count} nodes: {messages} messages ({} to servers, of which {} \
             surrenders ({} stale); {} server notices; {} forwards; {} probes; {} surrendered), \
             {rounds} rounds, {} steps",
            st.to_server,
            st.surrenders,
            st.stale_surrenders,
            st.notices,
            st.forwards,
            st.probes,
            st.surrendered_msgs,
            st.steps,
        );
    }
    (messages, rounds)
}

/// The largest counts over the seeds for each size.
fn measure(sizes: &[usize]) -> Vec<(usize, u64, u64)> {
    largest_over_seeds("herd", sizes, SEEDS, herd)
}

/// The most the protocol may take for 3, 5 and 8 nodes, as measured: (nodes, messages,
/// rounds). A change that needs more fails [`herd_costs_no_more_than_measured`].
const MEASURED: [(usize, u64, u64); 3] = [(3, 52, 15), (5, 164, 24), (8, 464, 45)];

#[test]
fn herd_costs_no_more_than_measured() {
    assert_at_most(&measure(&[3, 5, 8]), &MEASURED);
}

/// Prints the counts up to 16 nodes (slow in a debug build: `cargo test --release -- --ignored`).
#[test]
#[ignore = "slow: a measurement, run by hand"]
fn herd_counts_up_to_16_nodes() {
    measure(&[3, 5, 8, 16]);
}

#[test]
fn herd_messages_and_rounds_grow_at_most_quadratically() {
    assert_at_most_quadratic(&measure(&[3, 5, 8]));
}
