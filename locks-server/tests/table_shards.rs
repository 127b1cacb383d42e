//! The node's table in shards (`LocalTable`) decides as one table would: a hierarchy stays in
//! one shard, and what spans shards (a surrender whose cycle crosses them, an agent's removal,
//! an agent found gone) is decided across all of them. The transactions are the node's own,
//! begun as transactions are; what a transaction sends its lock server (a surrender, its
//! removal) goes through its own agent port, and the node's snapshot, answered by the lock
//! server after every request sent before it, says when it was handled.

use locks_core::proto::{EntryState, ServerRequest, Wait};
use locks_core::{AgentId, LockId, Mode, lock_id};
use locks_server::embed::{FastLock, LocalTable, NodeInternals, Presence, Touched};
use locks_server::{Node, NodeConfig};

/// A new transaction of `node` without an actor (notices to it are kept, not taken as its
/// death).
fn agent(node: &Node) -> Presence {
    node.begin_agent()
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
fn cycle(table: &LocalTable, a: &Presence, b: &Presence, r1: &LockId, r2: &LockId) -> [Touched; 2] {
    let (ta, tb) = (Touched::default(), Touched::default());
    granted(table.fast_lock(a, r1, Mode::X, &ta));
    granted(table.fast_lock(b, r2, Mode::X, &tb));
    assert_eq!(table.fast_lock(a, r2, Mode::X, &ta), FastLock::Queued);
    assert_eq!(table.fast_lock(b, r1, Mode::X, &tb), FastLock::Queued);
    [ta, tb]
}

/// Sends `request` to `node`'s lock server as the transaction of `presence`, and returns once
/// the server has handled it.
async fn serve(node: &Node, presence: &Presence, request: ServerRequest) {
    node.router()
        .for_transaction(presence)
        .send_server(node.id(), request)
        .unwrap();
    node.snapshot().await.unwrap();
}

async fn surrender(node: &Node, a: &Presence, b: &AgentId, r1: &LockId, r2: &LockId) {
    let version = node
        .local_table()
        .snapshot()
        .lock(r1)
        .expect("r1 exists")
        .version;
    surrender_at(node, a, b, r1, r2, version).await;
}

/// `a` surrenders `r1` at `version`, with the waits of the cycle of [`cycle`].
async fn surrender_at(
    node: &Node,
    a: &Presence,
    b: &AgentId,
    r1: &LockId,
    r2: &LockId,
    version: u64,
) {
    let request = ServerRequest::Surrender {
        agent: a.id().clone(),
        lock: r1.clone(),
        version,
        waits: vec![
            Wait {
                waiter: a.id().clone(),
                blocker: b.clone(),
                lock: r2.clone(),
            },
            Wait {
                waiter: b.clone(),
                blocker: a.id().clone(),
                lock: r1.clone(),
            },
        ],
    };
    serve(node, a, request).await;
}

/// A node whose transactions `a` and `b` are in a cycle across two shards (see [`cycle`]).
async fn node_with_a_cycle(name: &str) -> (Node, Presence, Presence, LockId, LockId) {
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
    surrender(&node, &a, b.id(), &r1, &r2).await;
    // b is given r1 once a surrenders it.
    holds_and_waits(node.local_table(), b.id(), a.id(), &r1);
}

#[tokio::test]
async fn a_surrender_whose_wait_in_another_shard_is_gone_changes_nothing() {
    let (node, a, b, r1, r2) = node_with_a_cycle("shards2").await;
    let table = node.local_table();
    // b lets r2 go: a is granted it, and the cycle is broken in r2's shard only.
    table.unlock(&b, &r2).unwrap();
    assert!(table.holds(a.id(), &r2).is_some());
    surrender(&node, &a, b.id(), &r1, &r2).await;
    // A stale surrender: a keeps its place.
    holds_and_waits(table, a.id(), b.id(), &r1);
}

#[tokio::test]
async fn a_surrender_whose_cycle_crosses_shards_is_applied_though_its_lock_moved_on() {
    let (node, a, b, r1, r2) = node_with_a_cycle("shards4").await;
    let table = node.local_table();
    let version = table.snapshot().lock(&r1).expect("r1 exists").version;
    // c queues on r1 behind b after a decided: r1's version moves, the cycle stays.
    let c = agent(&node);
    assert_eq!(
        table.fast_lock(&c, &r1, Mode::X, &Touched::default()),
        FastLock::Queued
    );
    assert!(table.snapshot().lock(&r1).expect("r1 exists").version > version);
    surrender_at(&node, &a, b.id(), &r1, &r2, version).await;
    // The waits, one in each shard, are the whole cycle and still hold: applied.
    holds_and_waits(table, b.id(), a.id(), &r1);
}

#[tokio::test]
async fn removing_an_agent_releases_it_in_every_shard() {
    let node = Node::start(NodeConfig::new("shards3")).await.unwrap();
    let table = node.local_table();
    let (r1, r2) = two_shards(table);
    let z = agent(&node);
    let touched = Touched::default();
    granted(table.fast_lock(&z, &r1, Mode::X, &touched));
    granted(table.fast_lock(&z, &r2, Mode::X, &touched));
    // Its removal as a message, which names no shard: the lock server finds them all.
    serve(
        &node,
        &z,
        ServerRequest::RemoveAgent {
            agent: z.id().clone(),
        },
    )
    .await;
    assert!(table.snapshot().locks.is_empty(), "{:?}", table.snapshot());
    assert!(!table.knows(z.id(), &Touched::all()));
}

#[tokio::test]
async fn an_agent_found_gone_in_one_shard_is_forgotten_in_the_others() {
    let node = Node::start(NodeConfig::new("shards4")).await.unwrap();
    let table = node.local_table();
    let (r1, r2) = two_shards(table);
    let (x, y) = (agent(&node), agent(&node));
    let (tx, ty) = (Touched::default(), Touched::default());
    granted(table.fast_lock(&y, &r1, Mode::X, &ty));
    granted(table.fast_lock(&x, &r2, Mode::X, &tx));
    assert_eq!(table.fast_lock(&x, &r1, Mode::X, &tx), FastLock::Queued);
    // x's transaction ends for the router without releasing (as one whose owner vanished):
    // the first message to it fails, as to an agent that ended.
    node.router().end_transaction(&x);
    // y's release grants r1 to x, whose notice cannot be delivered.
    table.release(&y, &ty);
    let snap = table.snapshot();
    assert!(
        snap.locks.is_empty(),
        "x is gone, so it holds nothing in any shard: {snap:?}"
    );
    assert!(!table.knows(x.id(), &Touched::all()));
}
