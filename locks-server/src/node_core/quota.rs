//! Per-peer quotas: how much of a node's lock table the agents of one other node may take.
//!
//! [`PeerQuotas`] are the limits (set in [`NodeConfig::peer_quotas`](crate::NodeConfig) or the
//! TOML file); [`QuotaBook`] is the pure accounting the node's table shell
//! (`crate::local::LocalTable`) keeps beside its shards. Per peer node it counts its agents'
//! **entries** on this node's table: one per agent and lock id it has an entry on, a direct
//! lock or the intention mode an ancestor of one needs, granted or not (so a lock at depth 3
//! taken by one agent counts 3, and a second lock under the same parent 1 more); of those the
//! entries **queued** (waiting or converting); and the **bytes** of their lock ids (each entry
//! counts the payload of every key of its id: see [`entry_bytes`]).
//!
//! The book learns what the table holds the way the agents do: from the notices the table
//! sends them. Every change of an agent's own entry is told to it (the table's rule 1), and the
//! exceptions are exactly the book's other inputs: an agent removed (`RemoveAgent`, or found
//! gone when a message to it failed) is told nothing, and a node that goes down has its
//! agents' entries given to ghosts or removed. A message that could not be sent because it
//! was too large makes the table withdraw the agent's requests on that lock and below without
//! telling it: the book drops those entries ([`QuotaBook::withdrawn`]); an intention entry on
//! an ancestor that the withdrawal removed stays counted until the agent ends. Ghosts count for
//! nobody: a node that went down and came back starts from zero while its old locks wait out
//! the lock-delay.
//!
//! Only `Lock` requests are checked ([`QuotaBook::admit`]): the others release, convert down,
//! or re-queue what a deadlock resolution asks for, none of which may be refused without
//! breaking the protocol. A `Lock` is admitted when even its worst outcome stays within every
//! quota: the entries it may create (its lock and the ancestors its agent has no entry on yet)
//! within the locks and bytes quotas, and every entry of its path queued within the queued
//! quota. So an admitted request never takes a count past its limit (a surrender re-queueing
//! a held lock is the one way past the queued quota, and then only `Lock`s are refused until
//! the count is back). The node's own agents are not counted: they are the node's own
//! program, which its own configuration trusts.
//!
//! Invariants: every count is the sum over the entries the book holds for that peer; a peer
//! with no entries has no record.

use crate::table::DEFAULT_MAX_DEPTH;
use locks_core::proto::{EntryState, Quota};
use locks_core::{AgentId, LockId, NodeId};
use serde::Deserialize;
use std::collections::HashMap;

/// Per-peer limits on a node's lock table (see the module documentation for what counts).
/// The defaults are far above what a program's transactions take: a peer whose agents reach
/// them is a runaway or an attacker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeerQuotas {
    /// Entries of one peer's agents, granted or queued (default 65,536).
    pub locks: u64,
    /// Entries of one peer's agents waiting or converting (default 16,384).
    pub queued: u64,
    /// Bytes of the lock ids of one peer's entries (default 32 MiB).
    pub bytes: u64,
}

impl Default for PeerQuotas {
    fn default() -> Self {
        PeerQuotas {
            locks: 65_536,
            queued: 16_384,
            bytes: 32 << 20,
        }
    }
}

impl PeerQuotas {
    /// The limit of `quota`.
    pub fn limit(&self, quota: Quota) -> u64 {
        match quota {
            Quota::Locks => self.locks,
            Quota::Queued => self.queued,
            Quota::Bytes => self.bytes,
        }
    }
}

/// What one peer's agents take now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Entries.
    pub locks: u64,
    /// Entries waiting or converting.
    pub queued: u64,
    /// Bytes of the entries' lock ids.
    pub bytes: u64,
}

/// The bytes an entry on `lock` counts: the payload of every key of its id.
pub(crate) fn entry_bytes(lock: &LockId) -> u64 {
    lock.keys().iter().map(|k| k.payload_len() as u64).sum()
}

/// One entry as the book knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    bytes: u64,
    queued: bool,
}

/// One peer: its usage and its agents' entries.
#[derive(Debug, Default)]
struct Peer {
    usage: Usage,
    agents: HashMap<AgentId, HashMap<LockId, Entry>>,
}

impl Peer {
    fn add(&mut self, e: Entry) {
        self.usage.locks += 1;
        self.usage.bytes += e.bytes;
        self.usage.queued += u64::from(e.queued);
    }

    fn sub(&mut self, e: Entry) {
        self.usage.locks -= 1;
        self.usage.bytes -= e.bytes;
        self.usage.queued -= u64::from(e.queued);
    }
}

/// The per-peer accounting of one node's table (see the module documentation).
#[derive(Debug)]
pub(crate) struct QuotaBook {
    own: NodeId,
    limits: PeerQuotas,
    peers: HashMap<NodeId, Peer>,
}

impl QuotaBook {
    /// An empty book for the table of node `own`, with `limits`.
    pub fn new(own: NodeId, limits: PeerQuotas) -> QuotaBook {
        QuotaBook {
            own,
            limits,
            peers: HashMap::new(),
        }
    }

    /// The limits.
    pub fn limits(&self) -> &PeerQuotas {
        &self.limits
    }

    /// What the agents of `peer` take now.
    #[cfg(test)]
    pub fn usage(&self, peer: &NodeId) -> Usage {
        self.peers.get(peer).map_or(Usage::default(), |p| p.usage)
    }

    /// Whether `agent` may ask for `lock`: `Err` names the first quota (locks, queued, bytes)
    /// whose limit the request's worst outcome would pass. Changes nothing.
    ///
    /// An id deeper than the table's depth limit is let through uncounted: the table refuses it
    /// before it adds anything, and counting its prefixes here would take time quadratic in its
    /// depth, on the node's thread.
    pub fn admit(&self, agent: &AgentId, lock: &LockId) -> Result<(), Quota> {
        if agent.node() == &self.own || lock.depth() > DEFAULT_MAX_DEPTH {
            return Ok(());
        }
        let peer = self.peers.get(agent.node());
        let usage = peer.map_or(Usage::default(), |p| p.usage);
        let entries = peer.and_then(|p| p.agents.get(agent));
        let (mut new_locks, mut new_bytes, mut may_queue) = (0u64, 0u64, 0u64);
        let mut bytes = 0u64;
        for (depth, key) in lock.keys().iter().enumerate() {
            bytes += key.payload_len() as u64;
            let known = entries.and_then(|e| {
                let prefix = lock.prefix(depth + 1)?;
                e.get(&prefix).copied()
            });
            match known {
                Some(e) => may_queue += u64::from(!e.queued),
                None => {
                    new_locks += 1;
                    new_bytes += bytes;
                    may_queue += 1;
                }
            }
        }
        let over = |quota: Quota, now: u64, more: u64| {
            (now.saturating_add(more) > self.limits.limit(quota)).then_some(quota)
        };
        match over(Quota::Locks, usage.locks, new_locks)
            .or_else(|| over(Quota::Queued, usage.queued, may_queue))
            .or_else(|| over(Quota::Bytes, usage.bytes, new_bytes))
        {
            Some(quota) => Err(quota),
            None => Ok(()),
        }
    }

    /// The table told `agent` its entry on `lock` is now `state`.
    pub fn notice(&mut self, agent: &AgentId, lock: &LockId, state: EntryState) {
        if agent.node() == &self.own {
            return;
        }
        if state == EntryState::Absent {
            self.drop_entry(agent, lock);
            return;
        }
        let peer = self.peers.entry(agent.node().clone()).or_default();
        let entries = peer.agents.entry(agent.clone()).or_default();
        let new = Entry {
            bytes: entry_bytes(lock),
            queued: state.is_waiting(),
        };
        if let Some(old) = entries.insert(lock.clone(), new) {
            peer.sub(old);
        }
        peer.add(new);
    }

    /// The table withdrew `agent`'s requests on `lock` and below without telling it.
    pub fn withdrawn(&mut self, agent: &AgentId, lock: &LockId) {
        self.drop_entries(agent, |id| id == lock || id.is_descendant_of(lock));
    }

    /// `agent` was removed from the table.
    pub fn remove_agent(&mut self, agent: &AgentId) {
        self.drop_entries(agent, |_| true);
    }

    /// `node` went down: its agents' entries are ghosts' or gone.
    pub fn node_down(&mut self, node: &NodeId) {
        self.peers.remove(node);
    }

    /// Drops `agent`'s entry on `lock`, if the book has one (without visiting its others).
    fn drop_entry(&mut self, agent: &AgentId, lock: &LockId) {
        let Some(peer) = self.peers.get_mut(agent.node()) else {
            return;
        };
        let Some(entries) = peer.agents.get_mut(agent) else {
            return;
        };
        if let Some(e) = entries.remove(lock) {
            peer.sub(e);
        }
        self.forget_empty(agent);
    }

    /// Removes the records of `agent` and of its peer if they hold nothing any more.
    fn forget_empty(&mut self, agent: &AgentId) {
        if let Some(peer) = self.peers.get_mut(agent.node()) {
            if peer.agents.get(agent).is_some_and(|e| e.is_empty()) {
                peer.agents.remove(agent);
            }
            if peer.agents.is_empty() {
                self.peers.remove(agent.node());
            }
        }
    }

    /// Drops `agent`'s entries whose lock `which` picks, and the records left empty.
    fn drop_entries(&mut self, agent: &AgentId, which: impl Fn(&LockId) -> bool) {
        let Some(peer) = self.peers.get_mut(agent.node()) else {
            return;
        };
        let Some(entries) = peer.agents.get_mut(agent) else {
            return;
        };
        let mut dropped = Vec::new();
        entries.retain(|id, e| {
            let keep = !which(id);
            if !keep {
                dropped.push(*e);
            }
            keep
        });
        for e in dropped {
            peer.sub(e);
        }
        self.forget_empty(agent);
    }
}

#[cfg(test)]
mod tests;
