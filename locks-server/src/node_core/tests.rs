//! The node layer's rules as effect lists: inputs in, the exact effects out.

use super::*;
use locks_core::proto::ServerRequest;
use locks_core::{LockId, Mode};
use std::collections::HashSet;

const LOCK_DELAY: Duration = Duration::from_secs(4);
const START_DELAY: Duration = Duration::from_secs(6);

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn agent(on: &str, serial: u64) -> AgentId {
    AgentId::new(node(on), 1, serial)
}

fn lock(agent: &AgentId, key: &str) -> ServerRequest {
    ServerRequest::Lock {
        agent: agent.clone(),
        lock: LockId::new([key]).unwrap(),
        mode: Mode::X,
    }
}

fn unlock(agent: &AgentId, key: &str) -> ServerRequest {
    ServerRequest::Unlock {
        agent: agent.clone(),
        lock: LockId::new([key]).unwrap(),
    }
}

fn watch(agent: &AgentId, key: &str) -> ServerRequest {
    ServerRequest::Watch {
        watcher: agent.clone(),
        lock: LockId::new([key]).unwrap(),
    }
}

/// The connected nodes, this one ("a") included.
struct Connected(HashSet<NodeId>);

impl Connected {
    fn of(names: &[&str]) -> Connected {
        Connected(names.iter().map(|n| node(n)).collect())
    }
}

impl Peers for Connected {
    fn connected(&self, node: &NodeId) -> bool {
        self.0.contains(node)
    }
}

/// Asserts that `core` serves `request` now.
fn serves(core: &mut NodeCore, request: ServerRequest, peers: &Connected) {
    assert_eq!(
        core.step(NodeInput::Request(request.clone()), peers),
        vec![NodeEffect::Admit(request)]
    );
}

/// Asserts that `core` does nothing now with `request` (keeps it, or ignores it).
fn holds_or_ignores(core: &mut NodeCore, request: ServerRequest, peers: &Connected) {
    assert_eq!(core.step(NodeInput::Request(request), peers), vec![]);
}

fn clustered() -> NodeCore {
    NodeCore::new(node("a"), LOCK_DELAY, START_DELAY)
}

fn alone() -> NodeCore {
    NodeCore::new(node("a"), Duration::ZERO, Duration::ZERO)
}

#[test]
fn a_node_without_delays_serves_at_once_and_schedules_nothing() {
    let mut core = alone();
    let peers = Connected::of(&["a"]);
    assert_eq!(core.step(NodeInput::Started, &peers), vec![]);
    assert!(!core.in_start_delay());
    serves(&mut core, lock(&agent("a", 1), "l"), &peers);
}

#[test]
fn requests_during_the_start_delay_are_kept_and_served_in_order_before_the_fast_path() {
    let mut core = clustered();
    let peers = Connected::of(&["a", "b"]);
    assert_eq!(
        core.step(NodeInput::Started, &peers),
        vec![NodeEffect::Schedule {
            after: START_DELAY,
            timer: Timer::StartDelayOver,
        }]
    );
    let (first, second) = (lock(&agent("b", 1), "l"), unlock(&agent("a", 2), "m"));
    assert_eq!(core.step(NodeInput::Request(first.clone()), &peers), vec![]);
    assert_eq!(
        core.step(NodeInput::Request(second.clone()), &peers),
        vec![]
    );
    assert!(core.in_start_delay());
    assert_eq!(
        core.step(NodeInput::Timer(Timer::StartDelayOver), &peers),
        vec![
            NodeEffect::Admit(first),
            NodeEffect::Admit(second),
            NodeEffect::OpenFastPath,
        ]
    );
    assert!(!core.in_start_delay());
    serves(&mut core, lock(&agent("a", 3), "l"), &peers);
    // A second firing changes nothing.
    assert_eq!(
        core.step(NodeInput::Timer(Timer::StartDelayOver), &peers),
        vec![]
    );
}

#[test]
fn a_lock_or_watch_of_a_disconnected_nodes_agent_is_ignored_but_its_releases_are_served() {
    let mut core = alone();
    let peers = Connected::of(&["a"]);
    let gone = agent("c", 1);
    holds_or_ignores(&mut core, lock(&gone, "l"), &peers);
    holds_or_ignores(&mut core, watch(&gone, "l"), &peers);
    serves(&mut core, unlock(&gone, "l"), &peers);
    serves(&mut core, lock(&agent("a", 1), "l"), &peers);
}

#[test]
fn a_request_kept_during_the_start_delay_is_checked_when_served() {
    let mut core = clustered();
    let before = Connected::of(&["a", "b"]);
    let _ = core.step(NodeInput::Started, &before);
    holds_or_ignores(&mut core, lock(&agent("b", 1), "l"), &before);
    // b went down before the start-delay ended.
    let after = Connected::of(&["a"]);
    assert_eq!(
        core.step(NodeInput::Timer(Timer::StartDelayOver), &after),
        vec![NodeEffect::OpenFastPath]
    );
}

#[test]
fn a_node_down_with_a_lock_delay_gives_its_locks_to_ghosts_until_the_delay_has_passed() {
    let mut core = clustered();
    let peers = Connected::of(&["a"]);
    assert_eq!(
        core.step(NodeInput::LinkDown(node("b")), &peers),
        vec![NodeEffect::Table(TableInput::NodeDown {
            node: node("b"),
            ghosts: true,
        })]
    );
    let ghosts = vec![AgentId::ghost(node("b"), 1), AgentId::ghost(node("b"), 2)];
    assert_eq!(
        core.step(NodeInput::Ghosts(ghosts.clone()), &peers),
        vec![NodeEffect::Schedule {
            after: LOCK_DELAY,
            timer: Timer::LockDelayOver(ghosts.clone()),
        }]
    );
    assert_eq!(
        core.step(
            NodeInput::Timer(Timer::LockDelayOver(ghosts.clone())),
            &peers
        ),
        vec![NodeEffect::Table(TableInput::DelayOver(ghosts))]
    );
    // A node down whose agents had nothing here starts no delay.
    assert_eq!(core.step(NodeInput::Ghosts(vec![]), &peers), vec![]);
}

#[test]
fn a_node_down_without_a_lock_delay_releases_at_once() {
    let mut core = alone();
    let peers = Connected::of(&["a"]);
    assert_eq!(
        core.step(NodeInput::LinkDown(node("b")), &peers),
        vec![NodeEffect::Table(TableInput::NodeDown {
            node: node("b"),
            ghosts: false,
        })]
    );
}

#[test]
fn this_node_is_never_down_to_itself() {
    let mut core = clustered();
    let peers = Connected::of(&["a"]);
    assert_eq!(core.step(NodeInput::LinkDown(node("a")), &peers), vec![]);
}

/// Two peers go down one after the other, with locks on different shards of this node: the end
/// of the first one's lock-delay releases its ghosts only, and the second one's locks stay with
/// their ghosts until their own delay has passed.
#[test]
fn the_end_of_one_peers_lock_delay_releases_no_other_peers_ghosts_on_another_shard() {
    use crate::node_core::sharding::{Delivery, Sharding};
    use crate::table::{LockTable, TableInput};
    let sharding = Sharding::new(16);
    let mut shards =
        sharding.tables(|| LockTable::new(node("n"), locks_core::ModeTable::standard(), 0));
    // A key of shard `s` other than `not`.
    let key_on_another_shard = |not: usize| {
        (0..1000)
            .map(|i| format!("k{i}"))
            .find(|k| sharding.shard_of(&LockId::new([k.as_str()]).unwrap()) != not)
            .unwrap()
    };
    let b_key = "k0".to_owned();
    let b_shard = sharding.shard_of(&LockId::new([b_key.as_str()]).unwrap());
    let c_key = key_on_another_shard(b_shard);
    let apply = |shards: &mut Vec<LockTable>, input: TableInput| {
        sharding.apply(shards.as_mut_slice(), input, &mut |_: &AgentId, _| {
            Delivery::Sent
        })
    };
    apply(
        &mut shards,
        TableInput::Request(lock(&agent("b", 1), &b_key)),
    );
    apply(
        &mut shards,
        TableInput::Request(lock(&agent("c", 1), &c_key)),
    );
    let b_ghosts = apply(
        &mut shards,
        TableInput::NodeDown {
            node: node("b"),
            ghosts: true,
        },
    );
    let c_ghosts = apply(
        &mut shards,
        TableInput::NodeDown {
            node: node("c"),
            ghosts: true,
        },
    );
    let all: HashSet<AgentId> = b_ghosts
        .iter()
        .chain(&c_ghosts)
        .flatten()
        .cloned()
        .collect();
    assert_eq!(
        all.len(),
        2,
        "ghost ids repeat across shards: {b_ghosts:?} {c_ghosts:?}"
    );
    for ghosts in b_ghosts {
        apply(&mut shards, TableInput::DelayOver(ghosts));
    }
    let held = |shards: &Vec<LockTable>, key: &str| {
        let id = LockId::new([key]).unwrap();
        shards[sharding.shard_of(&id)]
            .view(&id)
            .is_some_and(|v| !v.granted.is_empty())
    };
    assert!(
        !held(&shards, &b_key),
        "b's delay is over: its lock is free"
    );
    assert!(
        held(&shards, &c_key),
        "c's lock was released with b's ghosts"
    );
}
