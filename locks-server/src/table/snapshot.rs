//! A serde-serializable picture of the whole table, for tools and tests.
//!
//! Everything is sorted: locks by id, holders in grant order (grant version, then agent id),
//! queues in FIFO order, entries and watchers by agent id. Two tables that went through the same
//! requests give equal snapshots.

use super::record::LockRecord;
use super::{LockTable, SNAPSHOT_SLICE, notify};
use locks_core::proto::{Conversion, EntryState, LockView, QueueEntry};
use locks_core::{AgentId, LockId, Mode, NodeId};
use serde::{Deserialize, Serialize};

/// Every lock of a table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSnapshot {
    /// The node of the table.
    pub node: NodeId,
    /// The name of its mode table.
    pub modes: String,
    /// The last version handed out.
    pub version: u64,
    /// Every lock record, by lock id.
    pub locks: Vec<LockSnapshot>,
}

impl TableSnapshot {
    /// The snapshot of one lock.
    pub fn lock(&self, lock: &LockId) -> Option<&LockSnapshot> {
        self.locks
            .binary_search_by(|l| l.lock.cmp(lock))
            .ok()
            .map(|i| &self.locks[i])
    }

    /// `agent`'s entry on `lock`.
    pub fn state(&self, agent: &AgentId, lock: &LockId) -> EntryState {
        self.lock(lock)
            .and_then(|l| l.entry(agent))
            .map_or(EntryState::Absent, |e| e.state)
    }
}

/// One lock: its queue as agents see it, plus every entry's direct mode and version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockSnapshot {
    /// The lock.
    pub lock: LockId,
    /// Its version.
    pub version: u64,
    /// The group mode of the holders.
    pub group: Option<Mode>,
    /// The holders, in grant order.
    pub granted: Vec<QueueEntry>,
    /// Holders waiting to convert, in FIFO order.
    pub converting: Vec<Conversion>,
    /// New requests waiting, in FIFO order.
    pub waiting: Vec<QueueEntry>,
    /// Every entry, by agent id.
    pub entries: Vec<EntrySnapshot>,
    /// The watchers, by agent id.
    pub watchers: Vec<AgentId>,
}

impl LockSnapshot {
    /// The lock's queue in the shape agents receive it.
    pub fn view(&self) -> LockView {
        LockView {
            version: self.version,
            group: self.group,
            granted: self.granted.clone(),
            converting: self.converting.clone(),
            waiting: self.waiting.clone(),
        }
    }

    /// `agent`'s entry.
    pub fn entry(&self, agent: &AgentId) -> Option<&EntrySnapshot> {
        self.entries
            .binary_search_by(|e| e.agent.cmp(agent))
            .ok()
            .map(|i| &self.entries[i])
    }
}

/// One agent's entry on one lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntrySnapshot {
    /// The agent.
    pub agent: AgentId,
    /// Its state on the lock.
    pub state: EntryState,
    /// Its direct lock on this id (`None`: the entry only carries intention modes).
    pub direct: Option<Mode>,
    /// The version at which the agent became a holder (or began waiting); conversions keep it.
    pub version: u64,
}

impl LockTable {
    /// A picture of every lock, sorted (see [`TableSnapshot`]).
    pub fn snapshot(&self) -> TableSnapshot {
        let mut locks = Vec::with_capacity(self.locks.len());
        let mut from = Some(0);
        while let Some(start) = from {
            from = self.snapshot_slice(&mut locks, start);
        }
        locks.sort_unstable_by(|a, b| a.lock.cmp(&b.lock));
        TableSnapshot {
            node: self.node.clone(),
            modes: self.modes.name().to_owned(),
            version: self.version,
            locks,
        }
    }

    /// Appends the pictures of the locks in record slots `from..from + SNAPSHOT_SLICE` to
    /// `out`, in slot order; returns where the next slice starts, `None` after the last. Every
    /// lock in use for the whole of a pass of slices is copied exactly once.
    pub(crate) fn snapshot_slice(&self, out: &mut Vec<LockSnapshot>, from: usize) -> Option<usize> {
        let (records, more) = self.locks.slice(from, SNAPSHOT_SLICE);
        out.extend(records.map(|rec| self.lock_snapshot(rec)));
        more.then_some(from + SNAPSHOT_SLICE)
    }

    fn lock_snapshot(&self, rec: &LockRecord) -> LockSnapshot {
        let view = notify::view(rec, &self.modes, &self.agents);
        let mut entries: Vec<EntrySnapshot> = rec
            .entries()
            .iter()
            .filter_map(|e| {
                Some(EntrySnapshot {
                    agent: self.agents.id(e.agent)?.clone(),
                    state: e.state(),
                    direct: e.direct,
                    version: e.version,
                })
            })
            .collect();
        entries.sort_unstable_by(|a, b| a.agent.cmp(&b.agent));
        let mut watchers: Vec<AgentId> = rec
            .watchers()
            .iter()
            .filter_map(|&w| self.agents.id(w).cloned())
            .collect();
        watchers.sort_unstable();
        LockSnapshot {
            lock: rec.id.clone(),
            version: rec.version,
            group: view.group,
            granted: view.granted,
            converting: view.converting,
            waiting: view.waiting,
            entries,
            watchers,
        }
    }
}
