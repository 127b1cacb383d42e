//! Reads of the sharded table: about one lock (its shard), about one agent (the shards it
//! used), or about the whole node (every shard, one after the other, each under its own lock:
//! a whole-node read is not one instant of the node, as a census never was).

use super::{LocalTable, SHARDS, Touched};
use crate::table::{Census, LockTable, TableSnapshot};
use locks_core::proto::{LockNotice, TableReport};
use locks_core::{AgentId, LockId, Mode};

impl LocalTable {
    /// Reads the shard that holds `lock` (for state about that lock and its hierarchy).
    pub fn read_lock<T>(&self, lock: &LockId, f: impl FnOnce(&LockTable) -> T) -> T {
        f(&self.shards[self.shard_of(lock)].lock())
    }

    /// `agent`'s direct mode on `lock` and the lock's version, if it holds it
    /// ([`LockTable::holds`]).
    pub fn holds(&self, agent: &AgentId, lock: &LockId) -> Option<(Mode, u64)> {
        self.read_lock(lock, |t| t.holds(agent, lock))
    }

    /// Who watches `lock`, in id order.
    pub fn watchers(&self, lock: &LockId) -> Vec<AgentId> {
        self.read_lock(lock, |t| t.watchers(lock))
    }

    /// Whether `agent` has an entry or a watch in a shard of `touched`.
    pub fn knows(&self, agent: &AgentId, touched: &Touched) -> bool {
        touched.shards().any(|i| self.shards[i].lock().knows(agent))
    }

    /// `agent`'s direct locks in the shards of `touched`, in lock id order
    /// ([`LockTable::direct_locks_of`]).
    pub fn direct_locks_of(&self, agent: &AgentId, touched: &Touched) -> Vec<(LockId, Mode, u64)> {
        let mut out = Vec::new();
        for i in touched.shards() {
            out.extend(self.shards[i].lock().direct_locks_of(agent));
        }
        out.sort_unstable_by(|x, y| x.0.cmp(&y.0));
        out
    }

    /// What `agent` has in the shards of `touched`, in lock id order
    /// ([`LockTable::agent_state`]).
    pub fn agent_state(
        &self,
        agent: &AgentId,
        touched: &Touched,
    ) -> Vec<(LockNotice, Option<Mode>)> {
        let mut out = Vec::new();
        for i in touched.shards() {
            out.extend(self.shards[i].lock().agent_state(agent));
        }
        out.sort_by(|x, y| x.0.lock.cmp(&y.0.lock));
        out
    }

    /// A copy of the whole table: every shard's locks, sorted by id; the version is the
    /// largest any shard handed out.
    pub fn snapshot(&self) -> TableSnapshot {
        // `SHARDS` is at least 1.
        let mut all = self.shards[0].lock().snapshot();
        for shard in self.shards[1..].iter().map(|s| s.lock().snapshot()) {
            all.version = all.version.max(shard.version);
            all.locks.extend(shard.locks);
        }
        all.locks.sort_unstable_by(|a, b| a.lock.cmp(&b.lock));
        all
    }

    /// The first `max_locks` locks by id over every shard, with the total count
    /// ([`LockTable::report`]).
    pub fn report(&self, max_locks: usize) -> TableReport {
        let mut all = self.shards[0].lock().report(max_locks);
        for shard in self.shards[1..].iter().map(|s| s.lock().report(max_locks)) {
            all.version = all.version.max(shard.version);
            all.total_locks += shard.total_locks;
            all.locks.extend(shard.locks);
        }
        all.locks.sort_unstable_by(|a, b| a.lock.cmp(&b.lock));
        all.locks.truncate(max_locks);
        all
    }

    /// Adds one slice of the census to `census`, starting at `cursor` (`(0, 0)` first);
    /// returns where the next slice starts, `None` after the last shard's last slice. Each
    /// slice holds one shard's lock for a bounded count.
    pub(crate) fn census_slice(
        &self,
        census: &mut Census,
        (shard, from): (usize, usize),
    ) -> Option<(usize, usize)> {
        let next = self.shards.get(shard)?.lock().census_slice(census, from);
        match next {
            Some(from) => Some((shard, from)),
            None => (shard + 1 < SHARDS).then_some((shard + 1, 0)),
        }
    }
}
