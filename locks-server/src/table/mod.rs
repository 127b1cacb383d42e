//! The lock table of one node: a pure, synchronous state machine that takes a
//! [`ServerRequest`] and returns the messages to send ([`Sends`]). It sends nothing, reads no
//! clock and draws no random numbers that reach its output; the `LockServer` actor wraps it.
//!
//! # Model
//!
//! Each lock (a [`LockId`] on this node) has granted entries with a group mode, a conversion
//! queue and a wait queue (FIFO each), a version and watchers. An agent has at most one entry per
//! lock, which combines its *direct* lock on that id (what it asked for) and the *intention*
//! modes its direct locks on descendants need there ([`ModeTable::intention`]: `IS` for
//! `IS`/`S`, `IX` otherwise). The entry needs the group of all of these; the table counts the
//! descendant locks per intention mode, so releasing one lowers the need exactly.
//!
//! Whether a request is granted at once or queued, and in what order queued requests are
//! granted, is decided in `grant.rs` (`LockTable::lock_as`, `LockRecord::place`,
//! `LockRecord::process_grants`), whose module documentation states the rules: StickyLocking's
//! lock queues, made precise where StickyLocking is loose. The group mode is always recomputed
//! from the granted entries.
//!
//! **Converting down.** `Convert` sets the agent's direct mode on the lock to a weaker one
//! whatever the state of its entry, and is granted at once: it never waits. A granted entry is
//! down-converted to what it needs now. A waiting entry's pending mode is lowered in place. A
//! converting entry (converting up for a lock on a descendant, or for a stronger lock on the same
//! id) first gives up what it holds and no longer asks for: its held mode `h` becomes the group
//! of the new direct mode and of the intention modes it needs that `h` covers, when `h` covers
//! that group (otherwise `h` stays: the entry was upgrading to the new mode and cannot be
//! granted more than `h` without waiting); then it settles like any change of need — the
//! conversion is done if the lowered held mode covers the need, and otherwise continues to
//! `group(need, held)` in its place. So a client that converts down while its entry waits to
//! convert up never leaves a stronger mode behind it in the table.
//!
//! **Holding a direct lock.** The table grants each lock's entries on their own; when an
//! agent holds its direct lock is the hierarchy's rule, [`locks_core::held_in_hierarchy`]
//! ([`LockTable::holds`] applies it to the granted entries; agents to their notices).
//!
//! **Surrender** of lock `L` at version `v`, with the waits of the victim's cycle on this node,
//! takes the grant from the agent's entries on `L` and on every descendant of `L` and puts them
//! at the back of their wait queues, needing their full modes; its entries on ancestors stay.
//! Every notice about `L` in that operation carries
//! [`Note::Surrendered`](locks_core::proto::Note::Surrendered) with `v`. It is ignored unless
//! the agent has an entry on `L`, every wait given still holds, and `L` is at version `v` —
//! or, in place of the version, the waits given are a whole cycle through the agent whose edge
//! into it is on `L` (every lock of the cycle is on this node): then the cycle is real now,
//! whatever else changed on `L` since the victim decided, and the victim, which told its
//! client of the loss when it decided, gets what it asked for. An ignored surrender moves
//! nothing but is answered with one notice of the agent's entry *with the whole queue*, even
//! when it holds the lock: a holder of a lock nobody else converts or waits on gets no view
//! otherwise, and an agent that decided on an old copy must be able to analyse again with the
//! current one.
//!
//! **SurrenderTo** `L` for waiter `W` is the voluntary surrender: refused (nothing changes)
//! unless the agent holds `L` and `W` waits or converts on it; then it is the surrender of `L`
//! at its current version, its notes [`Note::SurrenderedTo`](locks_core::proto::Note::SurrenderedTo)
//! instead (`surrender_to.rs`).
//!
//! **Versions.** One counter per table, starting above the `version_base` given to
//! [`LockTable::new`] (the actor derives it from the node's incarnation, so versions keep growing
//! across restarts). An operation that changes any lock's queue increments it once, and every
//! lock it changed takes the new value; a grant notice's version is the fencing version of that
//! grant. A request that changes nothing (a `Lock` already covered by what is held) is answered
//! with the lock's unchanged version, so an agent must take a notice whose version *equals* its
//! copy's as current, and drop only older ones. `RaiseVersions` moves the counter up to its
//! floor (never down) and changes no queue; its agent is answered with
//! [`AgentMessage::Raised`] only if it holds the lock named, checked after the raise, so the
//! answer proves that the next holder's grant has a version above the floor.
//!
//! # Notices: who gets what
//!
//! For every lock an operation touches, in lock id order (ancestors before descendants):
//! 1. an agent whose own entry on the lock changed (created, granted, converted up or down,
//!    queued for conversion, pending mode changed, re-queued by a surrender, withdrawn or
//!    released) gets an [`AgentMessage::Notice`] carrying its state now ([`EntryState::Absent`]
//!    once its entry is gone). A change of intention counts that leaves the state as it was is
//!    not a change: taking a second child lock under a hot root tells nobody about the root;
//! 2. the agent that named the lock in a `Lock`, `Convert` or `Unlock` request always gets one,
//!    so every such request is answered; the answer to a `Convert` carries
//!    [`Note::Converted`](locks_core::proto::Note::Converted) and the answer to an `Unlock`
//!    [`Note::Unlocked`](locks_core::proto::Note::Unlocked), so the agent can tell the notices
//!    sent before its request was applied from those sent after;
//! 3. an agent converting or waiting on the lock after the operation gets one whenever something
//!    ahead of it may have changed: any holder added, removed or changing mode (every converter
//!    and waiter is told); a conversion at or ahead of its place added, removed or changing mode
//!    (those converters and every waiter); a waiter at or ahead of its place (those waiters).
//!    Its view of whom it waits for is never stale, with one exception, the *quiet release*
//!    (`notify::quiet_release`): when a local agent that held the lock (not converting) is
//!    removed (not a ghost: that stands for a remote agent, which may still run), no
//!    conversion is pending, and every entry the removal granted holds a mode
//!    incompatible with every remaining waiter's, the waiters are not told. Each of them
//!    already waited for whoever was granted, so its last view still shows everyone it waits
//!    for, plus the removed agent, which is gone and confirms no deadlock probe (one it
//!    confirmed before it ended may still be on its way and find the waiter's edge to it, as a
//!    probe could outrun the notice before; the surrender's check of the waits on this node
//!    then refuses it when the waiter's lock is here, and otherwise the victim gives up a lock
//!    for nothing, which the simulations count: no more often than before). After a quiet
//!    release the lock is marked: the next operation that tells any pending entry other than
//!    one it creates (or, on the fast path, would answer its requester there) tells every
//!    converter and waiter, so that two views of one agent whose holders differ still mean
//!    that everyone pending was sent the newer one. A hot lock handed from one ending
//!    transaction to the next tells each waiter only of its own grant;
//! 4. the notice's `queue` is the lock's whole [`LockView`] exactly when the recipient converts
//!    or waits, or holds the lock while others convert or wait on it (`notify::with_queue`: an
//!    agent others wait for learns, with every change of its own entry, who waits, so a notice
//!    of its own never hides a wait a waiter forwarded earlier; a lock with many holders and no
//!    queue stays cheap); it is built once per lock and operation and shared; its holders are listed in the order they became holders
//!    (conversions keep an agent's place), then by agent id;
//! 5. an agent gets at most one notice per lock per operation; notices of one lock go out in
//!    agent id order; an agent removed by `RemoveAgent` is told nothing;
//! 6. after the notices of a lock whose queue changed, each of its watchers gets
//!    [`AgentMessage::Watched`] with the same view, in agent id order; `Watch` answers at once
//!    with the current view (empty, at the table's current version, if the lock does not exist:
//!    the watch keeps an empty record alive until `Unwatch` or `RemoveAgent`).
//!
//! Refused requests get one [`AgentMessage::Rejected`]: a mode outside the table, a lock id
//! deeper than the limit (default [`DEFAULT_MAX_DEPTH`]), an `Unlock` or `Convert` of a lock the
//! agent has no direct lock on, a `Convert` to a mode that is not weaker than the agent's direct
//! mode there, a `SurrenderTo` of a lock the agent does not hold or to an agent that does not
//! wait for it. Nothing else refuses a `Convert`: the state of the entry (granted, converting or
//! waiting) does not matter, so an agent's request and its direct mode never part.
//!
//! # Cost
//!
//! Agents are interned to `u32`; a lock with one holder is 64 bytes plus its id; conversion and
//! wait queues and watchers are boxed away until needed. A lock with more than a handful of
//! entries keeps an agent → entry index and a count of holders per mode, so requests on a hot
//! ancestor are O(1) apart from the notices they must send.

#![forbid(unsafe_code)]

mod agents;
mod census;
mod entry;
mod grant;
mod locks;
mod notify;
mod ops;
mod protocol;
mod record;
mod report;
mod snapshot;
mod surrender;
mod surrender_to;

pub(crate) use census::Census;
pub(crate) use report::Picks;
pub(crate) use surrender::closes_cycle;

pub use notify::Sends;
pub use protocol::{TableEffect, TableInput, Undelivered};
pub use snapshot::{EntrySnapshot, LockSnapshot, TableSnapshot};

use agents::Agents;
use locks::Locks;
use locks_core::proto::{AgentMessage, EntryState, LockView, ServerRequest};
use locks_core::{AgentId, LockId, ModeTable, NodeId};

/// The deepest lock id accepted by default (keys in the path).
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// Above this many entries a lock keeps an index of its entries and a count of holders per mode.
const DEFAULT_INDEX_THRESHOLD: usize = 16;

/// How many record slots one slice of a whole-table read visits (the census, the report's
/// picking): some tens of microseconds, so that a shell that holds the table's mutex per slice
/// never keeps the fast path or the node's thread waiting for a whole pass.
pub(crate) const SLICE: usize = 1024;

/// How many locks one slice of a snapshot copies (a copy costs far more than a look).
pub(crate) const SNAPSHOT_SLICE: usize = 256;

/// The lock table of one node (see the module documentation for the rules and the notices).
///
/// `Clone` copies the whole table, so that a model checker can explore every continuation of
/// one state; a copy behaves exactly like the original.
#[derive(Clone, Debug)]
pub struct LockTable {
    node: NodeId,
    modes: ModeTable,
    max_depth: usize,
    index_threshold: usize,
    version: u64,
    locks: Locks,
    agents: Agents,
    /// The serial of the next ghost.
    next_ghost: u64,
    /// How far apart this table's ghost serials are: tables that share a node (its shards)
    /// number their ghosts apart, so no two of the node's ghosts have one id.
    ghost_step: u64,
}

impl LockTable {
    /// An empty table for the lock server of `node`, using `modes`. Versions handed out start at
    /// `version_base + 1`.
    pub fn new(node: NodeId, modes: ModeTable, version_base: u64) -> Self {
        LockTable {
            node,
            modes,
            max_depth: DEFAULT_MAX_DEPTH,
            index_threshold: DEFAULT_INDEX_THRESHOLD,
            version: version_base,
            locks: Locks::default(),
            agents: Agents::default(),
            next_ghost: 1,
            ghost_step: 1,
        }
    }

    /// Numbers this table's ghosts `first`, `first + step`, ...: the shards of one node take
    /// `1..=step` as their firsts (see `Sharding::tables`), so their ghosts never share an id,
    /// and the end of one lock-delay releases no other node's ghosts.
    pub fn with_ghost_serials(mut self, first: u64, step: u64) -> Self {
        self.next_ghost = first.max(1);
        self.ghost_step = step.max(1);
        self
    }

    /// Refuses lock ids with more than `depth` keys (at least 1).
    pub fn with_max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth.max(1);
        self
    }

    /// Sets how many entries a lock needs before it keeps an index (tests use 0 to run every
    /// lock on the indexed path). Behaviour and output do not depend on it.
    pub(crate) fn with_index_threshold(mut self, threshold: usize) -> Self {
        self.index_threshold = threshold;
        self
    }

    /// Applies one request and returns the messages to send, in order.
    pub fn handle(&mut self, request: ServerRequest) -> Sends {
        let out = self.handle_one(request);
        self.locks.evict();
        out
    }

    fn handle_one(&mut self, request: ServerRequest) -> Sends {
        match request {
            ServerRequest::Lock { agent, lock, mode } => self.lock(&agent, &lock, mode),
            ServerRequest::TryLock { agent, lock, mode } => self.try_lock(&agent, &lock, mode),
            ServerRequest::Convert { agent, lock, mode } => self.convert(&agent, &lock, mode),
            ServerRequest::Unlock { agent, lock } => self.unlock(&agent, &lock),
            ServerRequest::Surrender {
                agent,
                lock,
                version,
                waits,
            } => self.surrender(&agent, &lock, version, &waits),
            ServerRequest::SurrenderTo { agent, lock, to } => self.surrender_to(&agent, &lock, &to),
            ServerRequest::RemoveAgent { agent } => self.remove_agent(&agent),
            ServerRequest::Watch { watcher, lock } => self.watch(&watcher, &lock),
            ServerRequest::Unwatch { watcher, lock } => self.unwatch(&watcher, &lock),
            ServerRequest::RaiseVersions { agent, lock, floor } => {
                self.raise_for(agent, lock, floor)
            }
        }
    }

    /// The node this table belongs to.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// The mode table.
    pub fn modes(&self) -> &ModeTable {
        &self.modes
    }

    /// The deepest lock id accepted.
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// The last version handed out (the `version_base` until something changed).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Moves the counter up to `floor` if it is below: every version handed out from now on is
    /// above `floor` (versions only grow; nothing else changes).
    pub fn raise_version(&mut self, floor: u64) {
        self.version = self.version.max(floor);
    }

    /// `RaiseVersions`: raises the counter, then tells `agent` if it holds `lock`. In this
    /// order, so that an answer proves that whoever is granted `lock` after `agent` gets a
    /// version above `floor`.
    fn raise_for(&mut self, agent: AgentId, lock: LockId, floor: u64) -> Sends {
        self.raise_version(floor);
        if self.holds(&agent, &lock).is_none() {
            return Vec::new();
        }
        let node = self.node.clone();
        vec![(agent, AgentMessage::Raised { node, lock, floor })]
    }

    /// How many lock records exist (locks with entries, or watched).
    pub fn lock_count(&self) -> usize {
        self.locks.len()
    }

    /// How many agents have an entry or a watch.
    pub fn agent_count(&self) -> usize {
        self.agents.len()
    }

    /// The agents of node `node` with an entry or a watch in this table, in id order (the lock
    /// server removes them all when that node goes down).
    pub fn agents_on(&self, node: &NodeId) -> Vec<AgentId> {
        let mut agents: Vec<AgentId> = self
            .agents
            .ids()
            .filter(|a| a.node() == node)
            .cloned()
            .collect();
        agents.sort();
        agents
    }

    /// Hands every entry and watch of the agents of `node` to ghosts ([`AgentId::ghost`]), one
    /// per agent, and returns them. Nothing changes in the queues: each lock stays held (and
    /// each wait queued) exactly as before, under a placeholder that is never told anything and
    /// never answers, so that nobody is granted what that node's agents held until the caller
    /// removes the ghosts with `RemoveAgent` once the lock-delay has passed (see
    /// `crate::lease`). A later request of one of those agents (its node came back) is a new
    /// request, queued behind its own ghost.
    pub fn ghost_agents_of(&mut self, node: &NodeId) -> Vec<AgentId> {
        let agents = self.agents_on(node);
        let mut ghosts = Vec::with_capacity(agents.len());
        for agent in agents {
            let Some(a) = self.agents.lookup(&agent) else {
                continue;
            };
            let ghost = AgentId::ghost(self.node.clone(), self.next_ghost);
            self.next_ghost += self.ghost_step;
            self.agents.rename(a, ghost.clone());
            ghosts.push(ghost);
        }
        ghosts
    }

    /// The current view of one lock, if it exists.
    pub fn view(&self, lock: &LockId) -> Option<LockView> {
        let rec = self.locks.get(self.locks.find(lock.keys())?)?;
        Some(notify::view(rec, &self.modes, &self.agents))
    }

    /// The agents watching `lock`, in id order (none if nobody watches it or it does not exist).
    pub fn watchers(&self, lock: &LockId) -> Vec<AgentId> {
        let Some(rec) = self.locks.find(lock.keys()).and_then(|s| self.locks.get(s)) else {
            return Vec::new();
        };
        let mut watchers: Vec<AgentId> = rec
            .watchers()
            .iter()
            .filter_map(|&a| self.agents.id(a).cloned())
            .collect();
        watchers.sort_unstable();
        watchers
    }

    /// `agent`'s entry on `lock`.
    pub fn state(&self, agent: &AgentId, lock: &LockId) -> EntryState {
        self.agents
            .lookup(agent)
            .and_then(|a| {
                let rec = self.locks.get(self.locks.find(lock.keys())?)?;
                Some(rec.entry(a)?.state())
            })
            .unwrap_or(EntryState::Absent)
    }

    /// `agent`'s direct locks (granted or not) on `lock` and its descendants, sorted: the
    /// requests that put its entry on `lock` there (to withdraw them when the agent cannot be
    /// told about that lock).
    pub fn direct_locks_within(&self, agent: &AgentId, lock: &LockId) -> Vec<LockId> {
        let mut direct: Vec<LockId> = self
            .records_of(agent)
            .filter(|(_, rec)| rec.id == *lock || rec.id.is_descendant_of(lock))
            .filter(|(a, rec)| rec.entry(*a).is_some_and(|e| e.direct.is_some()))
            .map(|(_, rec)| rec.id.clone())
            .collect();
        direct.sort();
        direct
    }

    /// The records where `agent` has an entry, in no particular order, each with the agent's
    /// interned number (nothing if the table does not know it).
    fn records_of<'a>(
        &'a self,
        agent: &AgentId,
    ) -> impl Iterator<Item = (u32, &'a record::LockRecord)> + 'a {
        let found = self
            .agents
            .lookup(agent)
            .and_then(|a| Some((a, self.agents.get(a)?)));
        found.into_iter().flat_map(move |(a, slot)| {
            slot.locks
                .iter()
                .filter_map(move |&s| Some((a, self.locks.get(s)?)))
        })
    }

    fn reject(
        &self,
        agent: &AgentId,
        lock: &LockId,
        reason: locks_core::proto::Rejection,
    ) -> Sends {
        tracing::debug!(%agent, %lock, %reason, "lock table refused a request");
        vec![(
            agent.clone(),
            AgentMessage::Rejected {
                node: self.node.clone(),
                lock: lock.clone(),
                reason,
            },
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_locks_within_a_lock_are_the_agents_requests_on_it_and_below() {
        use locks_core::Mode;
        let mut t = LockTable::new(NodeId::new("n").unwrap(), ModeTable::standard(), 0);
        let a = AgentId::new(NodeId::new("n").unwrap(), 1, 1);
        for lock in [&["x", "y"][..], &["x", "z", "w"], &["x"], &["v"]] {
            t.handle(ServerRequest::Lock {
                agent: a.clone(),
                lock: LockId::new(lock.to_vec()).unwrap(),
                mode: Mode::S,
            });
        }
        let ids = |v: &[&[&str]]| -> Vec<LockId> {
            v.iter().map(|l| LockId::new(l.to_vec()).unwrap()).collect()
        };
        let within = |l: &[&str]| t.direct_locks_within(&a, &LockId::new(l.to_vec()).unwrap());
        assert_eq!(
            within(&["x"]),
            ids(&[&["x"], &["x", "y"], &["x", "z", "w"]])
        );
        // Only intention entries on ["x", "z"]: the direct lock below it.
        assert_eq!(within(&["x", "z"]), ids(&[&["x", "z", "w"]]));
        assert!(within(&["u"]).is_empty());
        let stranger = AgentId::new(NodeId::new("n").unwrap(), 1, 2);
        assert!(
            t.direct_locks_within(&stranger, &LockId::new(vec!["x"]).unwrap())
                .is_empty()
        );
    }

    #[test]
    fn watchers_lists_who_watches_a_lock_in_id_order() {
        let node = NodeId::new("n").unwrap();
        let mut t = LockTable::new(node.clone(), ModeTable::standard(), 0);
        let (a1, a2) = (AgentId::new(node.clone(), 1, 1), AgentId::new(node, 1, 2));
        let lock = LockId::from(["l"]);
        assert!(t.watchers(&lock).is_empty(), "no record");
        for a in [&a2, &a1] {
            t.handle(ServerRequest::Watch {
                watcher: a.clone(),
                lock: lock.clone(),
            });
        }
        assert_eq!(t.watchers(&lock), vec![a1.clone(), a2.clone()]);
        t.handle(ServerRequest::Unwatch {
            watcher: a1,
            lock: lock.clone(),
        });
        assert_eq!(t.watchers(&lock), vec![a2]);
    }

    #[test]
    fn a_large_agent_released_in_parts_ends_as_one_removal_would() {
        use locks_core::Mode;
        let node = NodeId::new("n").unwrap();
        let ghost = AgentId::new(NodeId::new("gone").unwrap(), 1, 1);
        let mut t = LockTable::new(node.clone(), ModeTable::standard(), 0);
        let lock = |t: &mut LockTable, agent: &AgentId, id: LockId, mode| {
            t.handle(ServerRequest::Lock {
                agent: agent.clone(),
                lock: id,
                mode,
            })
        };
        for i in 0..10i64 {
            lock(&mut t, &ghost, locks_core::lock_id!["r", i], Mode::X);
            lock(
                &mut t,
                &ghost,
                locks_core::lock_id!["r", i, "leaf"],
                Mode::S,
            );
            lock(&mut t, &ghost, locks_core::lock_id!["flat", i], Mode::S);
        }
        t.handle(ServerRequest::Watch {
            watcher: ghost.clone(),
            lock: locks_core::lock_id!["w"],
        });
        // Others wait behind it, on a root, a child and a flat lock.
        for (serial, id, mode) in [
            (2, locks_core::lock_id!["r"], Mode::S),
            (3, locks_core::lock_id!["r", 4], Mode::X),
            (4, locks_core::lock_id!["flat", 7], Mode::X),
        ] {
            lock(&mut t, &AgentId::new(node.clone(), 1, serial), id, mode);
        }
        let mut whole = t.clone();
        whole.handle(ServerRequest::RemoveAgent {
            agent: ghost.clone(),
        });
        let mut parts = 0;
        loop {
            let (effects, gone) = t.step_release_some(&ghost, 4);
            assert!(
                effects.iter().all(|e| match e {
                    TableEffect::Send { to, .. } => to != &ghost,
                    TableEffect::ReleaseLater(_) => false,
                }),
                "the released agent is told nothing"
            );
            parts += 1;
            if gone {
                break;
            }
            // Between parts: the agent's entries still carry every intention its direct
            // locks below need (an entry on every ancestor of each of them).
            let snap = t.snapshot();
            for l in &snap.locks {
                if l.entry(&ghost).is_some_and(|e| e.direct.is_some()) {
                    for anc in l.lock.ancestors() {
                        assert!(snap.lock(&anc).and_then(|a| a.entry(&ghost)).is_some());
                    }
                }
            }
        }
        assert!(parts > 3, "released in {parts} parts");
        assert!(!t.knows(&ghost));
        // The same queues as after one removal (versions differ: each part moved them).
        let shape = |t: &LockTable| -> Vec<(LockId, Option<Mode>, Vec<_>, Vec<_>)> {
            t.snapshot()
                .locks
                .into_iter()
                .map(|l| (l.lock, l.group, l.granted, l.waiting))
                .collect()
        };
        assert_eq!(shape(&t), shape(&whole));
    }

    #[test]
    fn the_table_can_move_to_an_actor_thread() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<LockTable>();
        send_sync::<TableSnapshot>();
    }
}
