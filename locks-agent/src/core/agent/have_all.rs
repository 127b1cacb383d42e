//! When the transaction has all its locks: the rule, decided here and nowhere else.
//!
//! **A request is held on a node** ([`held_on`]) when the hierarchy's hold rule
//! ([`locks_core::held_in_hierarchy`]) says so of the agent's copies there (its copy of the lock
//! covering the request's mode, of each ancestor the intention mode); a conversion down or an unlock of that lock or of a descendant that the
//! server has not answered yet caps what the copy counts for (what the agent's knowledge of
//! the copies says, `core/knowledge.rs`). **A request is held** ([`LockRequest::is_held`]) when
//! enough of its nodes hold it, by its requirement ([`Req::is_met`]: all, any, a majority, all
//! or a majority of those alive); it **can no longer be met** ([`LockRequest::unservable_by`],
//! [`Req::can_be_met`]) when too many of its nodes are down (without `await_nodes`) or refused
//! it. **The transaction has all locks** when no request is pending; a transaction without an
//! agent has all its locks when it has any ([`status_without_agent`]). Whether a request is held
//! is computed afresh from the knowledge every time it is evaluated, never remembered, so a
//! request whose grant was surrendered or lost with a node is pending again at once.
//!
//! **Kept up to date incrementally.** Whether a request is held depends on the request itself, on
//! the agent's entries on its lock and on every ancestor of it (on each of its nodes), on the nodes
//! known to be down, on the nodes that refused it, and on `await_nodes`. Every input that changes
//! one of these marks what it may have changed — one request, a lock and the requests on its
//! descendants, or everything — and [`AgentCore::refresh_status`] re-evaluates only what was
//! marked. It keeps the set of pending (not held) requests and, among them, those that can no
//! longer be met; "have all locks" is "nothing pending". So the cost of a grant, a request or an
//! answer to `lock` does not grow with the number of locks the transaction holds.
//!
//! A request is never remembered as held: one held before becomes pending again as soon as its
//! grant is doubted (surrender, node down), because the input that casts the doubt marks it.
//!
//! Invariant: after `refresh_status`, `pending` and `unservable` are exactly what evaluating
//! every request afresh gives (checked against [`AgentCore::status_afresh`] in debug builds,
//! so every test of the crate checks it too).

use super::{AgentCore, AgentEffect};
use crate::core::knowledge::Knowledge;
use crate::core::requests::LockRequest;
use crate::core::status::TransactionStatus;
use crate::options::Req;
use locks_core::{Key, LockId, Mode, ModeTable, NodeId, held_in_hierarchy};
use smallvec::SmallVec;
use std::collections::BTreeSet;
use std::ops::Bound;

/// How many entries the lists of [`Stale`] keep room for between rounds.
const KEPT_ROOM: usize = 64;

/// Up to this many marks, a round skips the requests it has evaluated already.
const SHORT: usize = 8;

/// What changed since the status was last brought up to date.
#[derive(Clone, Debug, Default)]
pub(super) struct Stale {
    /// Every request must be evaluated again.
    all: bool,
    /// These requests.
    locks: Vec<LockId>,
    /// The requests on these locks and on their descendants.
    trees: Vec<LockId>,
    /// The status must be computed again though no request changed (a deadlock was recorded).
    status: bool,
}

impl Stale {
    fn is_empty(&self) -> bool {
        !self.all && !self.status && self.locks.is_empty() && self.trees.is_empty()
    }
}

impl AgentCore {
    /// The request on `lock` (which may have come, changed or gone) must be evaluated again.
    pub(super) fn mark_request(&mut self, lock: &LockId) {
        if !self.stale.all {
            self.stale.locks.push(lock.clone());
        }
    }

    /// The agent's entries on `lock` (on some node) may have changed: the requests on `lock`
    /// and on its descendants must be evaluated again.
    pub(super) fn mark_tree(&mut self, lock: &LockId) {
        if !self.stale.all {
            self.stale.trees.push(lock.clone());
        }
    }

    /// The deadlocks changed: "have all locks" reports them.
    pub(super) fn mark_status(&mut self) {
        self.stale.status = true;
    }

    /// Whether [`AgentCore::settle`] has anything to do: a status to bring up to date, or new
    /// knowledge to analyse. When it has not, the actor need not schedule it.
    ///
    /// New knowledge alone needs no settle while the transaction has all its locks and queues
    /// nowhere: the analysis would not run, and the knowledge is analysed at the first settle
    /// after that changes. (A holder on a hot lock is sent the view of each new waiter.)
    pub fn needs_settle(&self) -> bool {
        self.is_running()
            && (!self.stale.is_empty()
                || !self.probes.is_idle()
                || (self.dirty
                    && (!self.status.have_all_locks()
                        || self.knowledge.pending_somewhere(&self.id))))
    }

    /// Something every request depends on changed (a node, the options).
    pub(super) fn mark_all(&mut self) {
        self.stale = Stale {
            all: true,
            ..Stale::default()
        };
    }

    /// Brings the status up to date and reports a change. When the transaction has all its
    /// locks, every request is claimed (it is reported to the client now or already).
    pub(super) fn refresh_status(&mut self, out: &mut Vec<AgentEffect>) {
        self.evaluate_stale();
        self.report_losses(out);
        let status = self.current_status();
        debug_assert_eq!(status, self.status_afresh(), "incremental status");
        if status.have_all_locks() {
            for lock in std::mem::take(&mut self.unclaimed) {
                let Some(r) = self.requests.get_mut(&lock) else {
                    continue;
                };
                if r.claimed != Some(r.mode) {
                    r.claimed = Some(r.mode);
                    if let Some(granted) = self.granted_lock(&lock) {
                        out.push(AgentEffect::Granted(granted));
                    }
                }
            }
        }
        if status != self.status {
            // An agent that had all its locks and waits again (a conversion down not answered
            // yet, a grant taken back) analyses what it knows at the next settle: it may close
            // a cycle no new knowledge will announce.
            if self.status.have_all_locks() && !status.have_all_locks() {
                self.dirty = true;
            }
            self.status = status.clone();
            out.push(AgentEffect::StatusChanged(status));
        }
    }

    /// Forgets the status bookkeeping (the transaction ended).
    pub(super) fn clear_status(&mut self) {
        self.losses.clear();
        self.pending.clear();
        self.unservable.clear();
        self.unclaimed.clear();
        self.stale = Stale::default();
    }

    fn evaluate_stale(&mut self) {
        let mut stale = std::mem::take(&mut self.stale);
        if stale.all {
            self.pending.clear();
            self.unservable.clear();
            let locks: Vec<LockId> = self.requests.keys().cloned().collect();
            for lock in &locks {
                self.evaluate(lock);
            }
        } else {
            // One input often marks a request more than once (a new agent's adoption marks each
            // request, then each notice its tree again): a request evaluated in this round is
            // not evaluated again, as nothing it depends on changes here. Only short lists are
            // checked, so that a burst costs no more than it did.
            let short = stale.locks.len() + stale.trees.len() <= SHORT;
            let mut done: SmallVec<[LockId; SHORT]> = SmallVec::new();
            let mut evaluate = |core: &mut AgentCore, lock: &LockId| {
                if short {
                    if done.contains(lock) {
                        return;
                    }
                    done.push(lock.clone());
                }
                core.evaluate(lock);
            };
            for lock in &stale.locks {
                evaluate(self, lock);
            }
            // A tree inside another marked one is walked with it (a notice for a lock comes
            // with those for its ancestors, and a new agent's adoption marks every level): sorted,
            // a lock's descendants follow it, after the last tree kept.
            if stale.trees.len() > 1 {
                stale.trees.sort_unstable();
                stale
                    .trees
                    .dedup_by(|later, kept| later == kept || kept.is_ancestor_of(later));
            }
            for root in &stale.trees {
                // Descendants follow their ancestor in lock id order.
                let mut next = self.request_from(Bound::Included(root));
                while let Some(lock) = next.filter(|l| l == root || root.is_ancestor_of(l)) {
                    evaluate(self, &lock);
                    next = self.request_from(Bound::Excluded(&lock));
                }
            }
        }
        // Keep the lists' room for the next round, unless a burst made them large.
        stale.locks.clear();
        stale.trees.clear();
        stale.locks.shrink_to(KEPT_ROOM);
        stale.trees.shrink_to(KEPT_ROOM);
        self.stale = Stale {
            locks: stale.locks,
            trees: stale.trees,
            ..Stale::default()
        };
    }

    /// The first request from `bound` on, in lock id order.
    fn request_from(&self, bound: Bound<&LockId>) -> Option<LockId> {
        self.requests
            .range::<LockId, _>((bound, Bound::Unbounded))
            .next()
            .map(|(l, _)| l.clone())
    }

    /// Evaluates the request on `lock` afresh (or forgets it, if there is none any more).
    fn evaluate(&mut self, lock: &LockId) {
        let verdict = self.requests.get(lock).map(|r| {
            if r.is_held(&self.modes, &self.knowledge, &self.down) {
                return None;
            }
            if let Some(claimed) = r.claimed
                && !r.is_held_in(claimed, &self.modes, &self.knowledge, &self.down)
            {
                self.losses.push(lock.clone());
            }
            let lost = |n: &NodeId| {
                (!self.options.await_nodes && self.down.contains(n))
                    || self.rejected.contains_key(&(r.lock.clone(), n.clone()))
            };
            Some(r.unservable_by(&self.down, lost))
        });
        match verdict {
            None | Some(None) => {
                self.pending.remove(lock);
                self.unservable.remove(lock);
            }
            Some(Some(unservable)) => {
                if !self.pending.contains(lock) {
                    self.pending.insert(lock.clone());
                }
                match unservable {
                    Some(nodes) => {
                        self.unservable.insert(lock.clone(), nodes);
                    }
                    None => {
                        self.unservable.remove(lock);
                    }
                }
            }
        }
    }

    /// The status from the bookkeeping.
    fn current_status(&self) -> TransactionStatus {
        if self.requests.is_empty() {
            TransactionStatus::NoLocks
        } else if self.pending.is_empty() {
            TransactionStatus::HaveAllLocks {
                deadlocks: self.knowledge.deadlocks().to_vec(),
            }
        } else if !self.unservable.is_empty() {
            let nodes: BTreeSet<&NodeId> = self.unservable.values().flatten().collect();
            TransactionStatus::CannotServe {
                locks: self.unservable.keys().cloned().collect(),
                nodes: nodes.into_iter().cloned().collect(),
            }
        } else {
            TransactionStatus::Waiting
        }
    }

    /// The status computed from every request (what the bookkeeping must always agree with).
    pub(super) fn status_afresh(&self) -> TransactionStatus {
        if self.requests.is_empty() {
            return TransactionStatus::NoLocks;
        }
        let mut pending = false;
        let mut locks = Vec::new();
        let mut nodes = BTreeSet::new();
        for r in self.requests.values() {
            if r.is_held(&self.modes, &self.knowledge, &self.down) {
                continue;
            }
            pending = true;
            let lost = |n: &NodeId| {
                (!self.options.await_nodes && self.down.contains(n))
                    || self.rejected.contains_key(&(r.lock.clone(), n.clone()))
            };
            if let Some(ns) = r.unservable_by(&self.down, lost) {
                locks.push(r.lock.clone());
                nodes.extend(ns);
            }
        }
        if !pending {
            TransactionStatus::HaveAllLocks {
                deadlocks: self.knowledge.deadlocks().to_vec(),
            }
        } else if !locks.is_empty() {
            TransactionStatus::CannotServe {
                locks,
                nodes: nodes.into_iter().collect(),
            }
        } else {
            TransactionStatus::Waiting
        }
    }
}

/// When one request is held: on a node, and by its requirement.
impl LockRequest {
    /// Whether the agent holds the request on `node`: its entry on the lock is held in a mode
    /// covering the request's, and its entries on every ancestor in a mode covering the
    /// intention mode.
    pub fn held_on(&self, modes: &ModeTable, k: &Knowledge, node: &NodeId) -> bool {
        held_on(modes, k, &self.lock, self.mode, node)
    }

    /// The nodes where the request is held, in order.
    pub fn held_nodes<'a>(
        &'a self,
        modes: &'a ModeTable,
        k: &'a Knowledge,
        down: &'a BTreeSet<NodeId>,
    ) -> impl Iterator<Item = &'a NodeId> + 'a {
        self.nodes
            .iter()
            .filter(move |n| !down.contains(*n) && self.held_on(modes, k, n))
    }

    /// Whether the request is held, by its requirement.
    pub fn is_held(&self, modes: &ModeTable, k: &Knowledge, down: &BTreeSet<NodeId>) -> bool {
        self.is_held_in(self.mode, modes, k, down)
    }

    /// Whether the request would be held, by its requirement, if it asked for `mode`: for a
    /// claimed request being converted up, whether the claimed mode is still held.
    pub fn is_held_in(
        &self,
        mode: Mode,
        modes: &ModeTable,
        k: &Knowledge,
        down: &BTreeSet<NodeId>,
    ) -> bool {
        let had = self
            .nodes
            .iter()
            .filter(|n| !down.contains(*n) && held_on(modes, k, &self.lock, mode, n))
            .count();
        let down_listed = self.nodes.iter().filter(|n| down.contains(*n)).count();
        self.req.is_met(self.nodes.len(), had, down_listed)
    }

    /// The nodes that make a pending request impossible to meet, or `None` if it can still be
    /// met. `lost` says whether a listed node can never grant it; for [`Req::AllAlive`] and
    /// [`Req::MajorityAlive`], down nodes are excused: they are neither lost nor counted among
    /// the listed nodes.
    pub fn unservable_by(
        &self,
        down: &BTreeSet<NodeId>,
        lost: impl Fn(&NodeId) -> bool,
    ) -> Option<Vec<NodeId>> {
        let excused = |n: &NodeId| self.req.excuses_down_nodes() && down.contains(n);
        let lost: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|n| lost(n) && !excused(n))
            .cloned()
            .collect();
        let listed = self.nodes.iter().filter(|n| !excused(n)).count();
        (!self.req.can_be_met(listed, lost.len())).then_some(lost)
    }
}

/// How many of a request's nodes must grant it.
impl Req {
    /// Whether a request on `listed` nodes, of which `had` grant it and `down` are down, is held.
    /// `had` counts only nodes that are up.
    pub fn is_met(self, listed: usize, had: usize, down: usize) -> bool {
        match self {
            Req::All => had >= listed,
            Req::Any => had >= 1,
            Req::Majority => had > listed / 2,
            Req::AllAlive => had >= listed.saturating_sub(down),
            Req::MajorityAlive => had > listed.saturating_sub(down) / 2,
        }
    }

    /// Whether a request on `listed` nodes can still be met when `lost` of them can never grant
    /// it (down without `await_nodes`, or refused by their server). For the requirements that
    /// [excuse down nodes](Req::excuses_down_nodes) the caller counts as lost only nodes that
    /// are up and refused it, and passes as `listed` only the listed nodes that are up.
    pub fn can_be_met(self, listed: usize, lost: usize) -> bool {
        let left = listed.saturating_sub(lost);
        match self {
            Req::All | Req::AllAlive => lost == 0,
            Req::Any => left >= 1,
            Req::Majority => left > listed / 2,
            // Nothing lost: every live node may still grant it (and with none alive it waits).
            Req::MajorityAlive => lost == 0 || left > listed / 2,
        }
    }

    /// Whether nodes that are down are left out of the count altogether (neither granting nor
    /// lost), so that a node going down never makes the request unservable.
    pub fn excuses_down_nodes(self) -> bool {
        matches!(self, Req::AllAlive | Req::MajorityAlive)
    }

    /// The requirement a request has after the same lock was asked for again with `other`: the
    /// stronger of the two, or `None` when neither implies the other.
    ///
    /// `a` is stronger than `b` when every state (listed, granting, down) with at least one
    /// listed node up that meets `a` meets `b`. (With every listed node down, `AllAlive` is met
    /// vacuously and nothing else is; that state is left out, or `AllAlive` would compare with
    /// nothing.) `All` implies every other one (all listed granting means none is down); each
    /// of the others implies `Any`; `Majority` implies `MajorityAlive` (more than half of the
    /// listed nodes is more than half of the live ones), and so does `AllAlive` (every live node
    /// is more than half of them). The one pair that does not compare is `Majority` and
    /// `AllAlive`: 2 of 3 up nodes granting meets only `Majority`, the 1 live node of 3
    /// granting meets only `AllAlive`.
    pub fn stronger(self, other: Req) -> Option<Req> {
        match (self, other) {
            (Req::Majority, Req::Majority)
            | (Req::AllAlive, Req::AllAlive)
            | (Req::MajorityAlive, Req::MajorityAlive) => Some(self),
            (Req::All, _) | (_, Req::All) => Some(Req::All),
            (Req::Any, b) => Some(b),
            (a, Req::Any) => Some(a),
            (Req::Majority, Req::MajorityAlive) | (Req::MajorityAlive, Req::Majority) => {
                Some(Req::Majority)
            }
            (Req::AllAlive, Req::MajorityAlive) | (Req::MajorityAlive, Req::AllAlive) => {
                Some(Req::AllAlive)
            }
            (Req::Majority, Req::AllAlive) | (Req::AllAlive, Req::Majority) => None,
        }
    }
}

/// Whether `lock` is held in `mode` on `node` ([`held_in_hierarchy`] over the agent's copies:
/// its own copy covering `mode`, each ancestor's covering the intention mode).
///
/// A conversion down of `lock` not answered yet caps what its entry counts for, and so does a
/// conversion down or an unlock of a descendant not answered yet, which may lower the entry's
/// intention modes (see `knowledge/answers.rs`); the same goes for each ancestor's intention.
pub fn held_on(modes: &ModeTable, k: &Knowledge, lock: &LockId, mode: Mode, node: &NodeId) -> bool {
    // The ancestors are asked about by a prefix of the keys: building their ids cost an
    // allocation each, for every request, after every grant.
    let covers = |keys: &[Key], m: Mode| k.held_at(keys, node).is_some_and(|h| modes.covers(h, m));
    let intention = modes.intention(mode);
    let keys = lock.keys();
    let own = covers(keys, mode)
        && k.unanswered_conversions(lock, node)
            .all(|c| modes.covers(c, mode));
    held_in_hierarchy(keys, own, |ancestor| covers(ancestor, intention))
        && (!k.has_caps() || within_caps(modes, k, lock, mode, node))
}

/// Whether no cap (see [`held_on`]) keeps `lock`'s copy from counting for `mode`, nor an
/// ancestor's from counting for its intention.
fn within_caps(modes: &ModeTable, k: &Knowledge, lock: &LockId, mode: Mode, node: &NodeId) -> bool {
    let within = |l: &LockId, m: Mode| {
        k.caps(l, node)
            .all(|cap| cap.is_some_and(|c| modes.covers(c, m)))
    };
    let intention = modes.intention(mode);
    within(lock, mode) && lock.ancestors().all(|a| within(&a, intention))
}

/// The status of a transaction without an agent, whose locks were all taken on the node's fast
/// path: it has all its locks when it has any (`has_locks`), since a request that is not
/// granted at once starts the agent, and none otherwise.
pub(crate) fn status_without_agent(has_locks: bool) -> TransactionStatus {
    if has_locks {
        TransactionStatus::HaveAllLocks {
            deadlocks: Vec::new(),
        }
    } else {
        TransactionStatus::NoLocks
    }
}
