//! The node's table in shards (`LocalTable`) decides as one table would: a hierarchy stays in
//! one shard, and what spans shards (a surrender whose cycle crosses them, an agent's removal,
//! an agent found gone) is decided across all of them.

use locks_core::proto::{EntryState, ServerRequest, Wait};
use locks_core::{AgentId, LockId, Mode, lock_id};
use locks_server::embed::sim;
use locks_server::embed::{FastLock, LocalTable, NodeInternals, Touched};
use locks_server::{Node, NodeConfig};

/// A new agent id of `node`, registered as a transaction without an actor (so that notices to
/// it are kept, not taken as its death).
fn agent(node: &Node) -> AgentId {
    let id = sim::next_agent_id(node);
    sim::router(node).register_idle_agent(id.clone());
    id
}

/// Two root locks in different shards of `table`.
fn two_shards(table: &LocalTable) -> (LockId, LockId) {
    let first = lock_id!["s0"];
    let other = (1..1000)
        .map(|i| lock_id![format!("s{i}")])
        .find(|l| table.shard(l) != table.shard(&first))
        .expect("some root among a thousand hashes to another shard");
    (first, other)
}

fn granted(got: FastLock) {
    assert!(matches!(got, FastLock::Granted { .. }), "{got:?}");
}

/// `a` holds `r1` and waits for `r2`, `b` holds `r2` and waits for `r1`: a cycle across two
/// shards. Returns each one's touched shards.
fn cycle(table: &LocalTable, a: &AgentId, b: &AgentId, r1: &LockId, r2: &LockId) -> [Touched; 2] {
    let (ta, tb) = (Touched::default(), Touched::default());
    granted(sim::fast_lock(table, a, r1, Mode::X, &ta));
    granted(sim::fast_lock(table, b, r2, Mode::X, &tb));
    assert_eq!(sim::fast_lock(table, a, r2, Mode::X, &ta), FastLock::Queued);
    assert_eq!(sim::fast_lock(table, b, r1, Mode::X, &tb), FastLock::Queued);
    [ta, tb]
}

fn surrender(table: &LocalTable, a: &AgentId, b: &AgentId, r1: &LockId, r2: &LockId) {
    let version = table.snapshot().lock(r1).expect("r1 exists").version;
    surrender_at(table, a, b, r1, r2, version);
}

/// `a` surrenders `r1` at `version`, with the waits of the cycle of [`cycle`].
fn surrender_at(
    table: &LocalTable,
    a: &AgentId,
    b: &AgentId,
    r1: &LockId,
    r2: &LockId,
    version: u64,
) {
    sim::admit(
        table,
        ServerRequest::Surrender {
            agent: a.clone(),
            lock: r1.clone(),
            version,
            waits: vec![
                Wait {
                    waiter: a.clone(),
                    blocker: b.clone(),
                    lock: r2.clone(),
                },
                Wait {
                    waiter: b.clone(),
                    blocker: a.clone(),
                    lock: r1.clone(),
                },
            ],
        },
    );
}

/// A node whose agents `a` and `b` are in a cycle across two shards (see [`cycle`]).
async fn node_with_a_cycle(name: &str) -> (Node, AgentId, AgentId, LockId, LockId) {
    let node = Node::start(NodeConfig::new(name)).await.unwrap();
    let (r1, r2) = two_shards(node.local_table());
    let (a, b) = (agent(&node), agent(&node));
    let _touched = cycle(node.local_table(), &a, &b, &r1, &r2);
    (node, a, b, r1, r2)
}

/// `holder` holds `lock` and `waiter` waits for it in `X`.
fn holds_and_waits(table: &LocalTable, holder: &AgentId, waiter: &AgentId, lock: &LockId) {
    let snap = table.snapshot();
    assert!(
        table.holds(holder, lock).is_some(),
        "{holder} holds {lock}: {snap:?}"
    );
    assert_eq!(snap.state(waiter, lock), EntryState::Waiting(Mode::X));
}

#[tokio::test]
async fn a_surrender_breaks_a_cycle_whose_waits_are_in_two_shards() {
    let (node, a, b, r1, r2) = node_with_a_cycle("shards1").await;
    let table = node.local_table();
    surrender(table, &a, &b, &r1, &r2);
    // b is given r1 once a surrenders it.
    holds_and_waits(table, &b, &a, &r1);
}

#[tokio::test]
async fn a_surrender_whose_wait_in_another_shard_is_gone_changes_nothing() {
    let (node, a, b, r1, r2) = node_with_a_cycle("shards2").await;
    let table = node.local_table();
    // b lets r2 go: a is granted it, and the cycle is broken in r2's shard only.
    sim::unlock(table, &b, &r2).unwrap();
    assert!(table.holds(&a, &r2).is_some());
    surrender(table, &a, &b, &r1, &r2);
    // A stale surrender: a keeps its place.
    holds_and_waits(table, &a, &b, &r1);
}

#[tokio::test]
async fn a_surrender_whose_cycle_crosses_shards_is_applied_though_its_lock_moved_on() {
    let (node, a, b, r1, r2) = node_with_a_cycle("shards4").await;
    let table = node.local_table();
    let version = table.snapshot().lock(&r1).expect("r1 exists").version;
    // c queues on r1 behind b after a decided: r1's version moves, the cycle stays.
    let c = agent(&node);
    assert_eq!(
        sim::fast_lock(table, &c, &r1, Mode::X, &Touched::default()),
        FastLock::Queued
    );
    assert!(table.snapshot().lock(&r1).expect("r1 exists").version > version);
    surrender_at(table, &a, &b, &r1, &r2, version);
    // The waits, one in each shard, are the whole cycle and still hold: applied.
    holds_and_waits(table, &b, &a, &r1);
}

#[tokio::test]
async fn removing_an_agent_releases_it_in_every_shard() {
    let node = Node::start(NodeConfig::new("shards3")).await.unwrap();
    let table = node.local_table();
    let (r1, r2) = two_shards(table);
    let z = agent(&node);
    let touched = Touched::default();
    granted(sim::fast_lock(table, &z, &r1, Mode::X, &touched));
    granted(sim::fast_lock(table, &z, &r2, Mode::X, &touched));
    sim::admit(table, ServerRequest::RemoveAgent { agent: z.clone() });
    assert!(table.snapshot().locks.is_empty(), "{:?}", table.snapshot());
    assert!(!table.knows(&z, &Touched::all()));
}

#[tokio::test]
async fn an_agent_found_gone_in_one_shard_is_forgotten_in_the_others() {
    let node = Node::start(NodeConfig::new("shards4")).await.unwrap();
    let table = node.local_table();
    let (r1, r2) = two_shards(table);
    // x is not registered with the router: the first message to it fails, as to an agent
    // that ended.
    let (x, y) = (sim::next_agent_id(&node), agent(&node));
    let (tx, ty) = (Touched::default(), Touched::default());
    granted(sim::fast_lock(table, &y, &r1, Mode::X, &ty));
    granted(sim::fast_lock(table, &x, &r2, Mode::X, &tx));
    assert_eq!(
        sim::fast_lock(table, &x, &r1, Mode::X, &tx),
        FastLock::Queued
    );
    // y's release grants r1 to x, whose notice cannot be delivered.
    sim::release(table, &y, &ty);
    let snap = table.snapshot();
    assert!(
        snap.locks.is_empty(),
        "x is gone, so it holds nothing in any shard: {snap:?}"
    );
    assert!(!table.knows(&x, &Touched::all()));
}
