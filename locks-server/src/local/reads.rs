//! Reads of a sharded table: about one lock (its shard), about one agent (the shards it used),
//! or about the whole node (every shard, a slice of records at a time: with a mutex per shard, a
//! whole-node read is not one instant of the node, as a census never was; `whole.rs` says what
//! it guarantees). Written once, over any [`ShardAccess`], for the node ([`LocalTable`]) and the
//! simulations alike.

use super::whole::{ReportRead, SnapshotRead};
use super::{LocalTable, ShardAccess, Sharding, Touched};
use crate::table::{Census, LockTable, TableSnapshot};
use locks_core::proto::{LockNotice, LockView, TableReport};
use locks_core::{AgentId, LockId, Mode};

impl Sharding {
    /// `agent`'s direct mode on `lock` and the lock's version, if it holds it
    /// ([`LockTable::holds`]).
    pub fn holds<S: ShardAccess + ?Sized>(
        &self,
        shards: &S,
        agent: &AgentId,
        lock: &LockId,
    ) -> Option<(Mode, u64)> {
        shards.read(self.shard_of(lock), |t| t.holds(agent, lock))
    }

    /// The queue of `lock` ([`LockTable::view`]).
    pub fn view<S: ShardAccess + ?Sized>(&self, shards: &S, lock: &LockId) -> Option<LockView> {
        shards.read(self.shard_of(lock), |t| t.view(lock))
    }

    /// Whether `agent` has an entry or a watch in a shard of `bits`.
    pub fn knows<S: ShardAccess + ?Sized>(&self, shards: &S, agent: &AgentId, bits: u64) -> bool {
        self.members(bits)
            .any(|i| shards.read(i, |t| t.knows(agent)))
    }

    /// `agent`'s direct locks in the shards of `bits`, in lock id order
    /// ([`LockTable::direct_locks_of`]).
    pub fn direct_locks_of<S: ShardAccess + ?Sized>(
        &self,
        shards: &S,
        agent: &AgentId,
        bits: u64,
    ) -> Vec<(LockId, Mode, u64)> {
        let mut out = Vec::new();
        for i in self.members(bits) {
            out.extend(shards.read(i, |t| t.direct_locks_of(agent)));
        }
        out.sort_unstable_by(|x, y| x.0.cmp(&y.0));
        out
    }

    /// What `agent` has in the shards of `bits`, in lock id order ([`LockTable::agent_state`]).
    pub fn agent_state<S: ShardAccess + ?Sized>(
        &self,
        shards: &S,
        agent: &AgentId,
        bits: u64,
    ) -> Vec<(LockNotice, Option<Mode>)> {
        let mut used = self.members(bits);
        let Some(first) = used.next() else {
            return Vec::new();
        };
        // Each shard's part is sorted already: one shard (the usual transaction) needs no more.
        let mut out = shards.read(first, |t| t.agent_state(agent));
        let mut more = false;
        for i in used {
            out.extend(shards.read(i, |t| t.agent_state(agent)));
            more = true;
        }
        if more {
            out.sort_by(|x, y| x.0.lock.cmp(&y.0.lock));
        }
        out
    }

    /// A copy of the whole table: every shard's locks, sorted by id; the version is the
    /// largest any shard handed out. The slices (`whole.rs`) taken back to back; the node's
    /// thread paces them instead (`LocalTable::snapshot_paced`).
    pub fn snapshot<S: ShardAccess + ?Sized>(&self, shards: &S) -> TableSnapshot {
        let mut read = SnapshotRead::default();
        loop {
            if let Some(snapshot) = read.step(self, shards) {
                return snapshot;
            }
        }
    }

    /// The first `max_locks` locks by id over every shard, with the total count
    /// ([`LockTable::report`]). The slices (`whole.rs`) taken back to back; the node's thread
    /// paces them instead (`LocalTable::report_paced`).
    pub fn report<S: ShardAccess + ?Sized>(&self, shards: &S, max_locks: usize) -> TableReport {
        let mut read = ReportRead::new(max_locks);
        loop {
            if let Some(report) = read.step(self, shards) {
                return report;
            }
        }
    }
}

impl LocalTable {
    /// Reads the shard that holds `lock` (for state about that lock and its hierarchy).
    pub fn read_lock<T>(&self, lock: &LockId, f: impl FnOnce(&LockTable) -> T) -> T {
        f(&self.shards.tables[self.sharding.shard_of(lock)].lock())
    }

    /// `agent`'s direct mode on `lock` and the lock's version, if it holds it.
    pub fn holds(&self, agent: &AgentId, lock: &LockId) -> Option<(Mode, u64)> {
        self.sharding.holds(&&self.shards, agent, lock)
    }

    /// Who watches `lock`, in id order.
    pub fn watchers(&self, lock: &LockId) -> Vec<AgentId> {
        self.read_lock(lock, |t| t.watchers(lock))
    }

    /// Whether `agent` has an entry or a watch in a shard of `touched`.
    pub fn knows(&self, agent: &AgentId, touched: &Touched) -> bool {
        self.sharding.knows(&&self.shards, agent, touched.bits())
    }

    /// `agent`'s direct locks in the shards of `touched`, in lock id order.
    pub fn direct_locks_of(&self, agent: &AgentId, touched: &Touched) -> Vec<(LockId, Mode, u64)> {
        self.sharding
            .direct_locks_of(&&self.shards, agent, touched.bits())
    }

    /// What `agent` has in the shards of `touched`, in lock id order.
    pub fn agent_state(
        &self,
        agent: &AgentId,
        touched: &Touched,
    ) -> Vec<(LockNotice, Option<Mode>)> {
        self.sharding
            .agent_state(&&self.shards, agent, touched.bits())
    }

    /// A copy of the whole table (see [`Sharding::snapshot`]).
    pub fn snapshot(&self) -> TableSnapshot {
        self.sharding.snapshot(&&self.shards)
    }

    /// The first `max_locks` locks by id, with the total count (see [`Sharding::report`]).
    pub fn report(&self, max_locks: usize) -> TableReport {
        self.sharding.report(&&self.shards, max_locks)
    }

    /// Adds one slice of the census to `census`, starting at `cursor` (`(0, 0)` first);
    /// returns where the next slice starts, `None` after the last shard's last slice. Each
    /// slice holds one shard's lock for a bounded count.
    pub(crate) fn census_slice(
        &self,
        census: &mut Census,
        (shard, from): (usize, usize),
    ) -> Option<(usize, usize)> {
        let next = self
            .shards
            .tables
            .get(shard)?
            .lock()
            .census_slice(census, from);
        match next {
            Some(from) => Some((shard, from)),
            None => (shard + 1 < self.shards.tables.len()).then_some((shard + 1, 0)),
        }
    }
}

impl crate::introspect::ReportSource for LocalTable {
    fn report(&self, max_locks: usize) -> TableReport {
        LocalTable::report(self, max_locks)
    }

    fn report_paced(
        self: std::sync::Arc<Self>,
        max_locks: usize,
    ) -> crate::introspect::PacedReport {
        Box::pin(async move { LocalTable::report_paced(&self, max_locks).await })
    }
}
