//! Work on the whole node's table taken a slice at a time, so that no read or release of a
//! large table holds a shard's mutex, or the thread it runs on, for long: the report of the
//! first locks by id ([`ReportRead`]), the snapshot ([`SnapshotRead`]), the release of a
//! downed node's ghosts ([`LocalTable::release_paced`]) and of an ended transaction's many
//! locks ([`LocalTable::remove_agent`]).
//!
//! This module owns the slicing and the pacing:
//! - a read is a state machine whose [`step`](ReportRead::step) does one bounded piece of work
//!   under one shard's mutex (a slice of record slots, or the queues of a few listed locks, or
//!   a part of the final merge) and says when it is done. Run to the end at once it is the
//!   plain read the simulations use (`reads.rs`); the node runs it with [`pace`] between two
//!   steps, which gives the thread's other tasks (the links' heartbeats among them) a turn
//!   after every [`TURN`] of the thread's paced work;
//! - a paced release of a ghost, or of an agent removed (its transaction ended) with more than
//!   [`RELEASE_SLICE`] locks in a shard, is a series of table operations, each releasing at
//!   most [`RELEASE_SLICE`] of its locks (`LockTable::step_release_some`), each delivered under
//!   its shard's lock like any other operation.
//!
//! What a read taken in slices guarantees (the tables go on changing between slices, as they
//! did between the shards of a whole-node read, which was never of one instant):
//! - each listed lock's queue (or picture) is as it was at one instant, read under its shard's
//!   mutex, and each lock id is listed at most once, in id order;
//! - a lock that exists for the whole read is seen exactly once (a record keeps its slot for its
//!   life: `table/locks.rs`); one created or removed meanwhile may or may not be listed;
//! - so a table that nothing changes during the read gives exactly what a read at one instant
//!   gives (the snapshot of a quiet table is byte for byte the same), and a report lists the
//!   first locks by id among those seen, with the count of those seen.
//!
//! A paced release keeps every invariant of the table between its parts: each part is a table
//! operation (`Unlock`s of the ghost's direct locks, then its removal), so between two parts
//! the table is exactly as if the ghost had unlocked those locks itself. Nothing waits on the
//! ghost's release as a whole: the lock-delay rule asks only that nobody be granted its locks
//! *before* the delay has passed (`crate::lease`), and a part released later keeps that.

use super::{LocalTable, ShardAccess, Sharding};
use crate::table::{LockSnapshot, Picks, TableSnapshot};
use locks_core::proto::{LockReport, TableReport};
use locks_core::{AgentId, LockId, NodeId};
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// How long paced work goes on before it gives the thread's other tasks a turn.
pub(crate) const TURN: Duration = Duration::from_millis(2);

/// How many listed locks' queues one step of a report copies.
const VIEW_SLICE: usize = 256;

/// How many pictures one step of a snapshot's final merge moves.
const MERGE_SLICE: usize = 512;

/// How many of a ghost's direct locks one part of its paced release unlocks.
pub(crate) const RELEASE_SLICE: usize = 256;

/// Gives the thread's other tasks a turn once the paced work of this thread has taken
/// [`TURN`] since the thread last went round its other tasks. Paced work calls it between
/// two steps.
///
/// The budget is the thread's, not the caller's: several paced tasks (a report for each
/// peer's question, a snapshot, a release) each yielding after a turn of its own would keep
/// the thread from its I/O for all their turns together, since a current-thread runtime polls
/// its I/O and timers only once every task it woke has run. So the paced tasks of a thread
/// share the start of the thread's current stretch of paced work (`STRETCH`): one that finds
/// it a turn old yields, and the first to come back after the runtime went round (its yield
/// came at or after the stretch began) starts the next stretch. A round is then at most a turn
/// plus one step of each other paced task.
pub(crate) async fn pace() {
    let now = Instant::now();
    let stretch = STRETCH.with(Cell::get);
    STRETCH.with(|s| s.set(Some(stretch.unwrap_or(now))));
    if !turn_over(stretch, now) {
        return;
    }
    // On a current-thread runtime (the node's), the tasks woken meanwhile and the I/O that
    // became ready (a peer's ping) run before this task goes on.
    tokio::task::yield_now().await;
    STRETCH.with(|s| s.set(after_round(s.get(), now, Instant::now())));
}

thread_local! {
    /// When the thread's current stretch of paced work began (see [`pace`]).
    static STRETCH: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Whether paced work at `now` yields, the thread's stretch having begun at `stretch`.
fn turn_over(stretch: Option<Instant>, now: Instant) -> bool {
    stretch.is_some_and(|began| now.saturating_duration_since(began) >= TURN)
}

/// The thread's stretch once a task that yielded at `yielded` is back at `now`: the runtime
/// went round after `yielded`, so a stretch that began before is over and the next begins now;
/// one that began after was begun by a task back first, and goes on.
fn after_round(stretch: Option<Instant>, yielded: Instant, now: Instant) -> Option<Instant> {
    match stretch {
        Some(began) if began > yielded => Some(began),
        _ => Some(now),
    }
}

/// Where a [`ReportRead`] is.
#[derive(Debug)]
enum ReportPhase {
    /// Offering the ids of shard `shard`'s slots from `from` to the picks.
    Picking { shard: usize, from: usize },
    /// Copying the queues of the picked ids from `next` on.
    Viewing { ids: Vec<LockId>, next: usize },
}

/// The first `max_locks` locks by id over every shard, with the count of locks seen, taken a
/// slice at a time (see the module documentation for what it guarantees).
#[derive(Debug)]
pub(crate) struct ReportRead {
    picks: Option<Picks>,
    phase: ReportPhase,
    node: Option<NodeId>,
    version: u64,
    total: u64,
    locks: Vec<LockReport>,
}

impl ReportRead {
    /// A read that lists at most `max_locks` locks.
    pub(crate) fn new(max_locks: usize) -> ReportRead {
        ReportRead {
            picks: Some(Picks::new(max_locks)),
            phase: ReportPhase::Picking { shard: 0, from: 0 },
            node: None,
            version: 0,
            total: 0,
            locks: Vec::new(),
        }
    }

    /// Does one bounded piece of the read under one shard's mutex; the report once done.
    pub(crate) fn step<S: ShardAccess + ?Sized>(
        &mut self,
        sharding: &Sharding,
        shards: &S,
    ) -> Option<TableReport> {
        match &mut self.phase {
            ReportPhase::Picking { shard, from } => {
                let picks = self.picks.as_mut()?;
                let (next, node, version) = shards.read(*shard, |t| {
                    (t.pick_slice(picks, *from), t.node().clone(), t.version())
                });
                self.node.get_or_insert(node);
                self.version = self.version.max(version);
                match next {
                    Some(next) => *from = next,
                    None if *shard + 1 < sharding.count() => {
                        *shard += 1;
                        *from = 0;
                    }
                    None => {
                        let picks = self.picks.take()?;
                        self.total = picks.offered();
                        let ids = picks.into_ids();
                        self.locks.reserve(ids.len());
                        self.phase = ReportPhase::Viewing { ids, next: 0 };
                    }
                }
                None
            }
            ReportPhase::Viewing { ids, next } => {
                let end = (*next + VIEW_SLICE).min(ids.len());
                let part = &ids[*next..end];
                *next = end;
                // Runs of ids in one shard are copied under one hold of its mutex.
                let mut rest = part;
                while let Some(first) = rest.first() {
                    let shard = sharding.shard_of(first);
                    let run = rest
                        .iter()
                        .position(|id| sharding.shard_of(id) != shard)
                        .unwrap_or(rest.len());
                    shards.read(shard, |t| self.locks.extend(t.lock_reports(&rest[..run])));
                    rest = &rest[run..];
                }
                (*next == ids.len()).then(|| TableReport {
                    id: 0,
                    node: self
                        .node
                        .clone()
                        .unwrap_or_else(|| shards.read(0, |t| t.node().clone())),
                    version: self.version,
                    total_locks: self.total,
                    locks: std::mem::take(&mut self.locks),
                })
            }
        }
    }
}

/// Where a [`SnapshotRead`] is.
#[derive(Debug)]
enum SnapshotPhase {
    /// Copying shard `shard`'s slots from `from` on, each slice a sorted run.
    Copying { shard: usize, from: usize },
    /// Merging the runs, smallest id first.
    Merging,
}

/// A picture of the whole node's table, taken a slice at a time (see the module
/// documentation for what it guarantees): each slice's pictures are one run, sorted, and the
/// runs are merged a part at a time, so that no step sorts the whole table.
#[derive(Debug)]
pub(crate) struct SnapshotRead {
    phase: SnapshotPhase,
    /// Each run sorted by lock id, largest first (its smallest is popped off its end).
    runs: Vec<Vec<LockSnapshot>>,
    /// The head of each run not yet empty, smallest first.
    heads: BinaryHeap<Reverse<(LockId, usize)>>,
    out: Vec<LockSnapshot>,
    node: Option<(NodeId, String)>,
    version: u64,
}

impl Default for SnapshotRead {
    fn default() -> Self {
        SnapshotRead {
            phase: SnapshotPhase::Copying { shard: 0, from: 0 },
            runs: Vec::new(),
            heads: BinaryHeap::new(),
            out: Vec::new(),
            node: None,
            version: 0,
        }
    }
}

impl SnapshotRead {
    /// Does one bounded piece of the read (under one shard's mutex while copying); the
    /// snapshot once done.
    pub(crate) fn step<S: ShardAccess + ?Sized>(
        &mut self,
        sharding: &Sharding,
        shards: &S,
    ) -> Option<TableSnapshot> {
        match &mut self.phase {
            SnapshotPhase::Copying { shard, from } => {
                let mut run = Vec::new();
                let (next, node, version) = shards.read(*shard, |t| {
                    let next = t.snapshot_slice(&mut run, *from);
                    let node = (t.node().clone(), t.modes().name().to_owned());
                    (next, node, t.version())
                });
                self.node.get_or_insert(node);
                self.version = self.version.max(version);
                if !run.is_empty() {
                    run.sort_unstable_by(|a, b| b.lock.cmp(&a.lock));
                    if let Some(head) = run.last() {
                        self.heads
                            .push(Reverse((head.lock.clone(), self.runs.len())));
                    }
                    self.runs.push(run);
                }
                match next {
                    Some(next) => *from = next,
                    None if *shard + 1 < sharding.count() => {
                        *shard += 1;
                        *from = 0;
                    }
                    None => {
                        let total = self.runs.iter().map(Vec::len).sum();
                        self.out.reserve_exact(total);
                        self.phase = SnapshotPhase::Merging;
                    }
                }
                None
            }
            SnapshotPhase::Merging => {
                for _ in 0..MERGE_SLICE {
                    let Some(Reverse((_, r))) = self.heads.pop() else {
                        let (node, modes) = self.node.take().unwrap_or_else(|| {
                            shards.read(0, |t| (t.node().clone(), t.modes().name().to_owned()))
                        });
                        return Some(TableSnapshot {
                            node,
                            modes,
                            version: self.version,
                            locks: std::mem::take(&mut self.out),
                        });
                    };
                    let Some(lock) = self.runs[r].pop() else {
                        continue;
                    };
                    match self.runs[r].last() {
                        Some(head) => self.heads.push(Reverse((head.lock.clone(), r))),
                        // Its buffer goes now, not with the whole merge.
                        None => self.runs[r] = Vec::new(),
                    }
                    // A lock seen twice (it moved to another slot during the copy) once.
                    if self.out.last().is_none_or(|last| last.lock != lock.lock) {
                        self.out.push(lock);
                    }
                }
                None
            }
        }
    }
}

impl LocalTable {
    /// The first `max_locks` locks by id, with the count, read a slice at a time with the
    /// node's other tasks let in between (see the module documentation).
    pub(crate) async fn report_paced(&self, max_locks: usize) -> TableReport {
        let mut read = ReportRead::new(max_locks);
        loop {
            if let Some(report) = read.step(&self.sharding, &&self.shards) {
                return report;
            }
            pace().await;
        }
    }

    /// A snapshot of the whole table, read a slice at a time with the node's other tasks let
    /// in between (see the module documentation).
    pub(crate) async fn snapshot_paced(&self) -> TableSnapshot {
        let mut read = SnapshotRead::default();
        loop {
            if let Some(snapshot) = read.step(&self.sharding, &&self.shards) {
                return snapshot;
            }
            pace().await;
        }
    }

    /// Removes `agent` (its `RemoveAgent`, as a message): at most [`RELEASE_SLICE`] of its
    /// locks per shard now, and what is left a part at a time by the future this returns
    /// (`None` when nothing is left), which runs on the node's thread with the thread's other
    /// tasks let in between parts. The quota book forgets the agent once it is gone.
    pub(crate) fn remove_agent(
        self: &std::sync::Arc<Self>,
        agent: AgentId,
    ) -> Option<impl std::future::Future<Output = ()> + use<>> {
        let bits = self.sharding.forget_agent(&agent);
        let left = self.release_first(&agent, bits);
        if left == 0 {
            self.quotas.lock().remove_agent(&agent);
            return None;
        }
        let table = self.clone();
        Some(async move {
            for shard in table.sharding.members(left) {
                pace().await;
                while !table.on_shard(shard, |t| t.step_release_some(&agent, RELEASE_SLICE)) {
                    pace().await;
                }
            }
            table.quotas.lock().remove_agent(&agent);
        })
    }

    /// Releases what `ghosts` hold (their lock-delay has passed), at most [`RELEASE_SLICE`] of
    /// a ghost's locks per table operation, with the node's other tasks let in between (see
    /// the module documentation); what one `DelayOver` would release, over several turns.
    pub(crate) async fn release_paced(&self, ghosts: Vec<AgentId>) {
        for ghost in &ghosts {
            for shard in 0..self.sharding.count() {
                while !self.on_shard(shard, |t| t.step_release_some(ghost, RELEASE_SLICE)) {
                    pace().await;
                }
                pace().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::Delivery;
    use crate::table::{LockTable, TableInput};
    use locks_core::proto::ServerRequest;
    use locks_core::{Mode, ModeTable};

    const SHARDS: usize = 3;

    #[test]
    fn paced_tasks_share_the_threads_turn_and_the_first_back_starts_the_next() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Nothing paced yet: no turn is over.
        assert!(!turn_over(None, at(0)));
        assert!(!turn_over(Some(at(0)), at(0) + TURN / 2));
        assert!(turn_over(Some(at(0)), at(0) + TURN));
        // A and B yield in the same stretch (B at once: A used the turn up); A is back first
        // and starts the next stretch, which B, back later, does not restart.
        let (a_yields, b_yields) = (at(0) + TURN, at(0) + TURN + TURN / 4);
        let next = after_round(Some(at(0)), a_yields, at(10));
        assert_eq!(next, Some(at(10)));
        assert_eq!(after_round(next, b_yields, at(11)), Some(at(10)));
        assert!(
            turn_over(next, at(10) + TURN),
            "B yields once A used the turn"
        );
        // A task back with no stretch recorded starts one.
        assert_eq!(after_round(None, at(1), at(2)), Some(at(2)));
    }

    fn tables() -> (Sharding, Vec<LockTable>) {
        let node = NodeId::new("n").unwrap();
        let tables = (0..SHARDS)
            .map(|_| LockTable::new(node.clone(), ModeTable::standard(), 0))
            .collect();
        (Sharding::new(SHARDS), tables)
    }

    fn agent(serial: u64) -> AgentId {
        AgentId::new(NodeId::new("n").unwrap(), 1, serial)
    }

    fn request(sharding: &Sharding, tables: &mut [LockTable], request: ServerRequest) {
        sharding.apply(
            tables,
            TableInput::Request(request),
            &mut |_: &AgentId, _| Delivery::Sent,
        );
    }

    fn lock(sharding: &Sharding, tables: &mut [LockTable], serial: u64, id: LockId) {
        let agent = agent(serial);
        let mode = Mode::X;
        request(
            sharding,
            tables,
            ServerRequest::Lock {
                agent,
                lock: id,
                mode,
            },
        );
    }

    /// Enough locks that every shard takes several slices of each kind.
    fn filled() -> (Sharding, Vec<LockTable>) {
        let (sharding, mut tables) = tables();
        for i in 0..(3 * crate::table::SLICE as i64) {
            lock(
                &sharding,
                &mut tables,
                1 + (i % 7) as u64,
                locks_core::lock_id![i % 50, i],
            );
        }
        (sharding, tables)
    }

    #[test]
    fn a_quiet_table_read_in_slices_is_the_read_at_one_instant() {
        let (sharding, tables) = filled();
        let snapshot = sharding.snapshot(&tables[..]);
        let mut all: Vec<LockSnapshot> = tables.iter().flat_map(|t| t.snapshot().locks).collect();
        all.sort_by(|a, b| a.lock.cmp(&b.lock));
        assert_eq!(snapshot.locks, all);
        assert_eq!(
            snapshot.version,
            tables.iter().map(LockTable::version).max().unwrap()
        );
        for max in [0, 1, 100, 10_000] {
            let report = sharding.report(&tables[..], max);
            assert_eq!(report.total_locks as usize, all.len());
            let want: Vec<(LockId, locks_core::proto::LockView)> = all
                .iter()
                .take(max)
                .map(|l| (l.lock.clone(), l.view()))
                .collect();
            let got: Vec<_> = report.locks.into_iter().map(|l| (l.lock, l.view)).collect();
            assert_eq!(got, want, "max {max}");
        }
    }

    #[test]
    fn a_table_changing_between_slices_lists_each_lock_once_and_every_lasting_one() {
        let (sharding, mut tables) = filled();
        let lasting: Vec<LockId> = sharding
            .snapshot(&tables[..])
            .locks
            .into_iter()
            .map(|l| l.lock)
            .collect();
        let mut snapshot = SnapshotRead::default();
        let mut report = ReportRead::new(usize::MAX);
        let (mut snap_done, mut report_done) = (None, None);
        let mut i = 0i64;
        while snap_done.is_none() || report_done.is_none() {
            if snap_done.is_none() {
                snap_done = snapshot.step(&sharding, &tables[..]);
            }
            if report_done.is_none() {
                report_done = report.step(&sharding, &tables[..]);
            }
            // Between two steps: locks come and go, by agents that hold nothing of the lasting
            // locks: the previous step's agent ends, and this one takes new ids and ids that
            // were freed before (after enough retirements, into other slots).
            i += 1;
            let gone = agent(1000 + i as u64 - 1);
            request(
                &sharding,
                &mut tables,
                ServerRequest::RemoveAgent { agent: gone },
            );
            for k in 0..40 {
                let id = locks_core::lock_id!["churn", (i * 7 + k) % 300];
                lock(&sharding, &mut tables, 1000 + i as u64, id);
            }
        }
        let snap: Vec<LockId> = snap_done
            .unwrap()
            .locks
            .into_iter()
            .map(|l| l.lock)
            .collect();
        let listed: Vec<LockId> = report_done
            .unwrap()
            .locks
            .into_iter()
            .map(|l| l.lock)
            .collect();
        for ids in [&snap, &listed] {
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "sorted, each once");
            let mut missing = lasting.iter().filter(|l| ids.binary_search(l).is_err());
            assert_eq!(missing.next(), None, "every lasting lock listed");
        }
    }
}
