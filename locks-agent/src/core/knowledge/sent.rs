//! Who is known to have a stored view, so that the agent forwards it only to agents that may
//! lack it (the rules are in [`super`]'s module documentation).

use super::key::KeyRef;
use super::{Knowledge, Source};
use crate::core::graph::{ViewIndex, blockers_of, is_waited_for};
use locks_core::{AgentId, LockId, ModeTable, NodeId};
use smallvec::{SmallVec, smallvec};
use std::borrow::Borrow;

impl Knowledge {
    /// Whether `to` is known to have the stored view of `(lock, node)`: this agent sent it that
    /// version, or got it from it.
    pub fn was_sent(&self, lock: &LockId, node: &NodeId, to: &AgentId) -> bool {
        self.views
            .get(KeyRef::of(lock, node).as_dyn())
            .is_some_and(|s| s.sent.contains(to))
    }

    /// Records that the stored view of `(lock, node)` was sent to `to`.
    pub fn mark_sent(&mut self, lock: &LockId, node: &NodeId, to: &AgentId) {
        if let Some(stored) = self.views.get_mut(KeyRef::of(lock, node).as_dyn())
            && !stored.sent.contains(to)
        {
            stored.sent.push(to.clone());
        }
    }

    /// Forgets what was sent to agents living on `node`: what went to them may have been lost
    /// with the connection, so it is sent again.
    pub fn forget_sent_to(&mut self, node: &NodeId) {
        for stored in self.views.values_mut() {
            stored.sent.retain(|a| a.node() != node);
        }
    }

    /// Whether the stored view of `(lock, node)` is *shared* (module documentation): every
    /// agent pending in it has it, so [`Knowledge::already_sent`] holds for each of them.
    pub fn is_shared(&self, lock: &LockId, node: &NodeId) -> bool {
        self.views
            .get(KeyRef::of(lock, node).as_dyn())
            .is_some_and(|s| s.source == Source::Shared)
    }

    /// Whether the stored view of `(lock, node)` was sent to `to` by someone else, or will be
    /// (module documentation): then `me` need not forward it there.
    pub fn already_sent(
        &self,
        modes: &ModeTable,
        me: &AgentId,
        lock: &LockId,
        node: &NodeId,
        to: &AgentId,
    ) -> bool {
        self.already_sent_to(modes, me, lock, node, std::slice::from_ref(to))[0]
    }

    /// [`Knowledge::already_sent`] for each of `targets`, with one look-up.
    pub fn already_sent_to<T: Borrow<AgentId>>(
        &self,
        modes: &ModeTable,
        me: &AgentId,
        lock: &LockId,
        node: &NodeId,
        targets: &[T],
    ) -> SmallVec<[bool; 4]> {
        let Some(stored) = self.views.get(KeyRef::of(lock, node).as_dyn()) else {
            return smallvec![false; targets.len()];
        };
        let view = &stored.view;
        match &stored.source {
            Source::Unknown => smallvec![false; targets.len()],
            Source::Shared => {
                let index = ViewIndex::new(modes, view);
                targets
                    .iter()
                    .map(|to| {
                        let to = to.borrow();
                        index.is_pending(to)
                            || index
                                .first_blocked_by(to)
                                .is_some_and(|first| first != me && first.node() == me.node())
                    })
                    .collect()
            }
            Source::ForwardedBy(from) => {
                let local = from.node() == me.node();
                let theirs = blockers_of(modes, view, from);
                let waited = is_waited_for(modes, view, from);
                let index = ViewIndex::new(modes, view);
                targets
                    .iter()
                    .map(|to| {
                        let to = to.borrow();
                        from == to
                            || (local
                                && theirs.binary_search(&to).is_ok()
                                && (waited || !index.is_pending(to)))
                    })
                    .collect()
            }
        }
    }
}
