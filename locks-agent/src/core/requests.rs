//! The client's requests and when each counts as held.
//!
//! One request per lock id, with a mode, the nodes it names and a [`Req`]. Whether a request is
//! held is computed afresh from the agent's [`Knowledge`] every time it is asked — never
//! remembered — so a request whose grant was surrendered or lost with a node is pending again at
//! once. (The Erlang original never re-examines a granted request, so a client there can go on
//! believing it holds a lock it lost.)

use super::knowledge::Knowledge;
use crate::options::Req;
use locks_core::{Key, LockId, Mode, ModeTable, NodeId};
use smallvec::SmallVec;
use std::collections::BTreeSet;

/// One lock request of the transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRequest {
    /// The lock.
    pub lock: LockId,
    /// The mode asked for (the strongest asked so far, for a lock asked for twice).
    pub mode: Mode,
    /// The nodes named, sorted, each once. One node, the common case, is kept inline: a
    /// transaction holds one request per lock, and a heap list for each cost 32 bytes a lock.
    pub nodes: SmallVec<[NodeId; 1]>,
    /// How many of them must grant it.
    pub req: Req,
    /// The mode the client has been told it holds this lock in, if it has: the transaction
    /// reported "have all locks" while the request existed (and it has not been told of a
    /// loss since). With `abort_on_deadlock`, a claimed lock is never surrendered (the agent
    /// aborts instead).
    pub claimed: Option<Mode>,
}

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

    /// Whether the request is on `lock` or one of its descendants, on `node`.
    pub fn is_under(&self, lock: &LockId, node: &NodeId) -> bool {
        (self.lock == *lock || lock.is_ancestor_of(&self.lock)) && self.nodes.contains(node)
    }
}

/// Whether `lock` is held in `mode` on `node`, with the intention mode on every ancestor.
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
    covers(keys, mode)
        && k.unanswered_conversions(lock, node)
            .all(|c| modes.covers(c, mode))
        && (1..keys.len()).all(|depth| covers(&keys[..depth], intention))
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
