//! Property tests of the lock table against an oracle, over random sequences of requests (all six
//! modes), conversions, unlocks, surrenders (current and stale versions), watches and agent
//! removals by up to 8 agents on a small tree (keys `a`/`b`, depth 1 to 3: 14 locks).
//!
//! After every step the oracle checks:
//! - safety: on every lock the granted modes are pairwise compatible, and so are the modes
//!   implied by every agent's *held* direct locks (the lock in its mode, every ancestor in the
//!   intention mode), which is what keeps a lock and its ancestors and descendants apart;
//! - the group mode is what the holders make (a mode is compatible with it exactly when it is
//!   compatible with every holder);
//! - settled queues (no lost wake-up): the first conversion cannot be granted, and when nobody
//!   converts the first waiter cannot;
//! - FIFO with conversions first: nobody left the wait queue for a grant while someone ahead of
//!   it still waits or while a conversion waits, and no conversion was granted while an earlier
//!   one still waits;
//! - the model: every agent's direct modes are what it asked for, and every entry needs exactly
//!   its direct mode grouped with the intentions of its direct locks below;
//! - the notices: replaying an agent's notices gives its state on every lock; notice versions
//!   never go back; a waiter's last view shows exactly the holders and requests ahead of it,
//!   or, after quiet releases (the table's rule 3), everyone it waits for and more only in
//!   agents removed since;
//!   `queue` is present exactly for waiters; watchers' views are current;
//! - the same requests on tables that index every lock, or locks above 3 entries, give the same
//!   messages and snapshots; stepped with `step_quiet` (the fast path), the same snapshots and
//!   the same messages less the requester's own notices.
//!
//! At the end all agents but one are removed, and that one must hold everything it asked for;
//! then the last one is removed and the table must be empty.

mod common;
mod table_oracle;

use common::{held_direct, node, t, waits_now};
use locks_core::proto::{AgentMessage, EntryState, LockView, Note, ServerRequest, Wait};
use locks_core::{AgentId, LockId, Mode, ModeTable};
use locks_server::state_machine::LockTable;
use locks_server::state_machine::Sends;
use locks_server::state_machine::TableInternals;
use locks_server::{LockSnapshot, TableSnapshot};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

const AGENTS: u64 = 8;

fn ids() -> Vec<LockId> {
    let mut out = Vec::new();
    for depth in 1..=3u32 {
        for bits in 0..(1u32 << depth) {
            let keys: Vec<&str> = (0..depth)
                .map(|i| if bits >> i & 1 == 0 { "a" } else { "b" })
                .collect();
            out.push(LockId::new(keys).expect("non-empty"));
        }
    }
    out
}

#[derive(Clone, Debug)]
enum Op {
    Lock(u64, usize, Mode),
    TryLock(u64, usize, Mode),
    /// Unlock one of the direct locks the model knows (by index), or a random one.
    UnlockKnown(usize),
    Unlock(u64, usize),
    /// Convert one of the known direct locks to a mode.
    ConvertKnown(usize, Mode),
    /// Surrender one of the existing entries (by index), at its lock's version or a stale one,
    /// naming waits of the cycle it breaks: `(waiter, blocker, lock)` by index, which may or
    /// may not hold.
    Surrender(usize, bool, Vec<(u64, u64, usize)>),
    Remove(u64),
    Watch(u64, usize),
    Unwatch(u64, usize),
}

fn op() -> impl Strategy<Value = Op> {
    let agent = 1..=AGENTS;
    let lock = 0..14usize;
    let mode = prop::sample::select(Mode::ALL.to_vec());
    prop_oneof![
        10 => (agent.clone(), lock.clone(), mode.clone()).prop_map(|(a, l, m)| Op::Lock(a, l, m)),
        3 => (agent.clone(), lock.clone(), mode.clone()).prop_map(|(a, l, m)| Op::TryLock(a, l, m)),
        3 => any::<usize>().prop_map(Op::UnlockKnown),
        1 => (agent.clone(), lock.clone()).prop_map(|(a, l)| Op::Unlock(a, l)),
        2 => (any::<usize>(), mode).prop_map(|(i, m)| Op::ConvertKnown(i, m)),
        3 => (
            any::<usize>(),
            any::<bool>(),
            prop::collection::vec((agent.clone(), agent.clone(), lock.clone()), 0..3)
        )
            .prop_map(|(i, s, w)| Op::Surrender(i, s, w)),
        1 => agent.clone().prop_map(Op::Remove),
        1 => (agent.clone(), lock.clone()).prop_map(|(a, l)| Op::Watch(a, l)),
        1 => (agent, lock).prop_map(|(a, l)| Op::Unwatch(a, l)),
    ]
}

struct Harness {
    ids: Vec<LockId>,
    modes: ModeTable,
    table: LockTable,
    /// Every lock indexed from its first entry.
    indexed: LockTable,
    /// Locks indexed above 3 entries, unindexed again below 2: exercises both transitions.
    mixed: LockTable,
    /// Stepped with `LockTable::step_quiet`, as the fast path does.
    quiet: LockTable,
    /// The model: each agent's direct locks and the modes it asked for.
    direct: BTreeMap<(u64, LockId), Mode>,
    /// What each agent learnt from its notices: (version, state).
    replay: HashMap<(AgentId, LockId), (u64, EntryState)>,
    /// The last queue view each agent got with a notice.
    views: HashMap<(AgentId, LockId), Arc<LockView>>,
    /// The agents removed since each of those views was sent: a quiet release leaves a
    /// waiter's view showing them (and nothing else) beyond what it waits for now.
    gone_since: HashMap<(AgentId, LockId), Vec<AgentId>>,
}

impl Harness {
    fn new() -> Harness {
        let modes = ModeTable::standard();
        Harness {
            ids: ids(),
            table: LockTable::new(node(), modes.clone(), 100),
            indexed: LockTable::new(node(), modes.clone(), 100).with_index_threshold(0),
            mixed: LockTable::new(node(), modes.clone(), 100).with_index_threshold(3),
            quiet: LockTable::new(node(), modes.clone(), 100),
            modes,
            direct: BTreeMap::new(),
            replay: HashMap::new(),
            views: HashMap::new(),
            gone_since: HashMap::new(),
        }
    }

    fn request(&self, op: &Op, before: &TableSnapshot) -> Option<ServerRequest> {
        let known: Vec<(u64, LockId)> = self.direct.keys().cloned().collect();
        Some(match op {
            Op::Lock(a, l, m) => ServerRequest::Lock {
                agent: t(*a),
                lock: self.ids[*l].clone(),
                mode: *m,
            },
            Op::TryLock(a, l, m) => ServerRequest::TryLock {
                agent: t(*a),
                lock: self.ids[*l].clone(),
                mode: *m,
            },
            Op::UnlockKnown(i) => {
                let (a, l) = known.get(i % known.len().max(1))?.clone();
                ServerRequest::Unlock {
                    agent: t(a),
                    lock: l,
                }
            }
            Op::Unlock(a, l) => ServerRequest::Unlock {
                agent: t(*a),
                lock: self.ids[*l].clone(),
            },
            Op::ConvertKnown(i, m) => {
                let (a, l) = known.get(i % known.len().max(1))?.clone();
                ServerRequest::Convert {
                    agent: t(a),
                    lock: l,
                    mode: *m,
                }
            }
            Op::Surrender(i, current, waits) => {
                let entries: Vec<(&LockSnapshot, &AgentId)> = before
                    .locks
                    .iter()
                    .flat_map(|l| l.entries.iter().map(move |e| (l, &e.agent)))
                    .collect();
                let (l, a) = entries.get(i % entries.len().max(1))?;
                // Half the time, only waits that hold now: those are what a real victim names.
                let waits = waits
                    .iter()
                    .map(|&(w, b, l)| Wait {
                        waiter: t(w),
                        blocker: t(b),
                        lock: self.ids[l].clone(),
                    })
                    .filter(|w| l.version % 2 == 0 || waits_now(before, &self.modes, w))
                    .collect();
                ServerRequest::Surrender {
                    agent: (*a).clone(),
                    lock: l.lock.clone(),
                    version: if *current { l.version } else { l.version - 1 },
                    waits,
                }
            }
            Op::Remove(a) => ServerRequest::RemoveAgent { agent: t(*a) },
            Op::Watch(a, l) => ServerRequest::Watch {
                watcher: t(*a),
                lock: self.ids[*l].clone(),
            },
            Op::Unwatch(a, l) => ServerRequest::Unwatch {
                watcher: t(*a),
                lock: self.ids[*l].clone(),
            },
        })
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let before = self.table.snapshot();
        let Some(req) = self.request(op, &before) else {
            return Ok(());
        };
        let fx = self.table.handle(req.clone());
        let fx_indexed = self.indexed.handle(req.clone());
        prop_assert_eq!(&fx, &fx_indexed, "indexed table differs on {:?}", req);
        let fx_mixed = self.mixed.handle(req.clone());
        prop_assert_eq!(&fx, &fx_mixed, "mixed table differs on {:?}", req);
        // The fast path's step: the same decisions, nothing for the requester but a refusal.
        if let Err(why) = common::step_quietly(&mut self.quiet, &req, &fx) {
            return Err(TestCaseError::fail(why));
        }
        let after = self.table.snapshot();
        prop_assert_eq!(&after, &self.indexed.snapshot());
        prop_assert_eq!(&after, &self.mixed.snapshot());
        prop_assert_eq!(&after, &self.quiet.snapshot());
        self.update_model(&req, &before, &fx)?;
        self.check_messages(&req, &before, &after, &fx)?;
        self.check_invariants(&after)?;
        self.check_fifo(&req, &before, &after)?;
        self.check_replay(&after)?;
        Ok(())
    }

    fn rejected(fx: &Sends) -> bool {
        matches!(&fx[..], [(_, AgentMessage::Rejected { .. })])
    }

    fn update_model(
        &mut self,
        req: &ServerRequest,
        before: &TableSnapshot,
        fx: &Sends,
    ) -> Result<(), TestCaseError> {
        let serial = req.agent().serial();
        match req {
            ServerRequest::Lock { lock, mode, .. } => {
                prop_assert!(!Self::rejected(fx));
                let key = (serial, lock.clone());
                let new = match self.direct.get(&key) {
                    Some(d) => self.modes.group(*mode, *d),
                    None => *mode,
                };
                self.direct.insert(key, new);
            }
            ServerRequest::TryLock { agent, lock, mode } => {
                // Granted exactly when a `Lock` would be granted at once, on the lock and the
                // intention on every ancestor, to an agent with no entry on any of them;
                // refused, nothing changes.
                let at_once = lock.ancestors().chain([lock.clone()]).all(|id| {
                    let need = if id == *lock {
                        *mode
                    } else {
                        self.modes.intention(*mode)
                    };
                    before.state(agent, &id) == EntryState::Absent
                        && before.lock(&id).is_none_or(|l| {
                            l.converting.is_empty()
                                && l.waiting.is_empty()
                                && l.group.is_none_or(|g| self.modes.compatible(need, g))
                        })
                });
                prop_assert_eq!(Self::rejected(fx), !at_once, "{:?}", req);
                let after = self.table.snapshot();
                if at_once {
                    prop_assert!(held_direct(&after, &self.modes, serial, lock, *mode));
                    self.direct.insert((serial, lock.clone()), *mode);
                } else {
                    prop_assert_eq!(&after, before, "a refused TryLock changed the table");
                }
            }
            ServerRequest::Unlock { lock, .. } => {
                let known = self.direct.remove(&(serial, lock.clone())).is_some();
                prop_assert_eq!(Self::rejected(fx), !known);
            }
            ServerRequest::Convert { lock, mode, .. } => {
                let key = (serial, lock.clone());
                let d = self.direct.get(&key).copied();
                // Whatever the entry's state: granted, converting or waiting.
                let ok = d.is_some_and(|d| d != *mode && self.modes.covers(d, *mode));
                prop_assert_eq!(Self::rejected(fx), !ok, "convert {:?} -> {:?}", d, mode);
                if ok {
                    self.direct.insert(key, *mode);
                }
            }
            ServerRequest::RemoveAgent { agent } => {
                self.direct.retain(|(a, _), _| *a != serial);
                self.replay.retain(|(a, _), _| a != agent);
                self.views.retain(|(a, _), _| a != agent);
                self.gone_since.retain(|(a, _), _| a != agent);
                for key in self.views.keys() {
                    self.gone_since
                        .entry(key.clone())
                        .or_default()
                        .push(agent.clone());
                }
                prop_assert!(fx.iter().all(|(to, _)| to != agent));
            }
            ServerRequest::Surrender {
                agent,
                version,
                lock,
                waits,
            } => {
                let current = before.lock(lock).map(|l| l.version) == Some(*version)
                    && waits.iter().all(|w| waits_now(before, &self.modes, w));
                if !current {
                    // Nothing moves; the agent alone is told how the lock stands now, with the
                    // whole queue, if it has an entry there.
                    let state = before.state(agent, lock);
                    match fx.as_slice() {
                        [] => prop_assert_eq!(state, EntryState::Absent),
                        [(to, AgentMessage::Notice(n))] => {
                            prop_assert_eq!(to, agent);
                            prop_assert_eq!(n.state, state);
                            let view = before.lock(lock).map(|l| l.view());
                            prop_assert_eq!(n.queue.as_deref(), view.as_ref());
                        }
                        other => prop_assert!(false, "stale surrender had effects: {:?}", other),
                    }
                }
            }
            ServerRequest::Watch { .. }
            | ServerRequest::Unwatch { .. }
            | ServerRequest::SurrenderTo { .. }
            | ServerRequest::RaiseVersions { .. } => {}
        }
        Ok(())
    }

    fn check_messages(
        &mut self,
        req: &ServerRequest,
        before: &TableSnapshot,
        after: &TableSnapshot,
        fx: &Sends,
    ) -> Result<(), TestCaseError> {
        let mut seen: Vec<(AgentId, LockId)> = Vec::new();
        let mut last_lock: Option<&LockId> = None;
        // A stale surrender is answered with the queue even to a holder, and without a note.
        let stale = matches!(req, ServerRequest::Surrender { lock, version, waits, .. }
            if before.lock(lock).map(|l| l.version) != Some(*version)
                || !waits.iter().all(|w| waits_now(before, &self.modes, w)));
        for (to, msg) in fx {
            match msg {
                AgentMessage::Notice(n) => {
                    prop_assert!(
                        last_lock.is_none_or(|l| *l <= n.lock),
                        "notices out of order"
                    );
                    last_lock = Some(&n.lock);
                    let key = (to.clone(), n.lock.clone());
                    prop_assert!(!seen.contains(&key), "two notices for {:?}", key);
                    seen.push(key.clone());
                    prop_assert_eq!(n.state, after.state(to, &n.lock));
                    // Rule 4: the queue goes to a converter or waiter, and to a holder while
                    // others convert or wait.
                    let queued = after
                        .lock(&n.lock)
                        .is_some_and(|l| !l.converting.is_empty() || !l.waiting.is_empty());
                    let holds = !matches!(n.state, EntryState::Absent);
                    prop_assert_eq!(
                        n.queue.is_some(),
                        n.state.is_waiting() || (queued && holds) || stale
                    );
                    let current = after.lock(&n.lock);
                    prop_assert_eq!(n.version, current.map_or(n.version, |l| l.version));
                    if let (Some(q), Some(l)) = (&n.queue, current) {
                        prop_assert_eq!(&**q, &l.view());
                        self.views.insert(key.clone(), q.clone());
                        self.gone_since.remove(&key);
                    }
                    if let Some((v, _)) = self.replay.get(&key) {
                        prop_assert!(n.version >= *v, "notice version went back");
                    }
                    self.replay.insert(key, (n.version, n.state));
                    match (req, n.note.as_deref()) {
                        (
                            ServerRequest::Surrender {
                                agent,
                                lock,
                                version,
                                ..
                            },
                            note,
                        ) if *lock == n.lock && !stale => {
                            prop_assert_eq!(
                                note,
                                Some(&Note::Surrendered {
                                    agent: agent.clone(),
                                    version: *version
                                })
                            );
                        }
                        (ServerRequest::Unlock { agent, lock }, note)
                            if to == agent && *lock == n.lock =>
                        {
                            prop_assert_eq!(note, Some(&Note::Unlocked));
                        }
                        (ServerRequest::Convert { agent, lock, .. }, note)
                            if to == agent && *lock == n.lock =>
                        {
                            prop_assert_eq!(note, Some(&Note::Converted));
                        }
                        (
                            ServerRequest::Surrender {
                                agent,
                                lock,
                                version,
                                ..
                            },
                            note,
                        ) if to == agent && *lock == n.lock => {
                            prop_assert_eq!(
                                note,
                                Some(&Note::NotSurrendered { version: *version })
                            );
                        }
                        (_, note) => prop_assert!(note.is_none()),
                    }
                }
                AgentMessage::Watched { lock, view, .. } => {
                    let l = after.lock(lock);
                    prop_assert!(l.is_some_and(|l| l.watchers.contains(to)));
                    prop_assert_eq!(&**view, &l.map(|l| l.view()).unwrap_or_default());
                }
                AgentMessage::Rejected { .. } => {}
                other => prop_assert!(false, "unexpected message {:?}", other),
            }
        }
        // A surrender that is ignored changes nothing.
        if fx.is_empty() && matches!(req, ServerRequest::Surrender { .. }) {
            prop_assert_eq!(&before.locks, &after.locks);
        }
        Ok(())
    }

    /// The need of an agent's entry on `lock` by the model: its direct mode grouped with the
    /// intention modes of its direct locks below.
    fn need(&self, serial: u64, lock: &LockId) -> Option<Mode> {
        let mut mask = 0u8;
        for ((a, l), m) in &self.direct {
            if *a == serial && l.is_descendant_of(lock) {
                mask |= 1 << self.modes.intention(*m).index();
            }
        }
        let mut acc = self.direct.get(&(serial, lock.clone())).copied();
        for m in Mode::ALL {
            if mask & (1 << m.index()) != 0 {
                acc = Some(acc.map_or(m, |g| self.modes.group(m, g)));
            }
        }
        acc
    }

    fn finish(&mut self, survivor: u64) -> Result<(), TestCaseError> {
        for a in (1..=AGENTS).filter(|a| *a != survivor) {
            self.step(&Op::Remove(a))?;
        }
        let after = self.table.snapshot();
        for ((a, lock), m) in &self.direct {
            prop_assert_eq!(*a, survivor);
            prop_assert!(
                held_direct(&after, &self.modes, *a, lock, *m),
                "T{} does not hold {} {} alone: {:?}",
                a,
                lock,
                m,
                after
            );
        }
        for l in &after.locks {
            prop_assert!(l.converting.is_empty() && l.waiting.is_empty());
        }
        self.step(&Op::Remove(survivor))?;
        prop_assert_eq!(self.table.lock_count(), 0);
        prop_assert_eq!(self.table.agent_count(), 0);
        prop_assert_eq!(self.indexed.lock_count(), 0);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn table_against_the_oracle(ops in prop::collection::vec(op(), 1..60), survivor in 1..=AGENTS) {
        let mut h = Harness::new();
        for op in &ops {
            h.step(op)?;
        }
        h.finish(survivor)?;
    }
}
