//! The copies this agent *left*: its newest notice of the copy says its entry is gone (it
//! withdrew a request there, released a lock, or lost the intention entry on an ancestor that
//! went with them), or it sent an `Unlock` of its request there and the answer has not come.
//! The agent keeps what its views of such a copy say about the others.
//!
//! Why: a waiter that leaves a lock tells nobody ahead of it (the table's notice rules tell only
//! the waiters behind it), so the holders and the waiters ahead keep the version of the view
//! they had, and the agents this one forwarded that version to, or got it from, count on it
//! having that version (`sent.rs`). Forgetting the view, and refusing it ever after, left a
//! cycle through those agents, whose victim was this agent, unresolved: this agent was the one
//! that needed the waits of the others in that view, and nobody would send it again.
//!
//! Invariants:
//! - A view of a copy the agent left, from before it left (any version while its `Unlock` is
//!   unanswered, a version below the notice that its entry is gone after), counts *without this
//!   agent's own entries* ([`seen`]): its place there is gone, the others' are what the agent
//!   knows of them. (Its group mode is left as the server sent it: the analysis reads only the
//!   entries.)
//! - The view as received is kept beside the edited one, and counts again as soon as the
//!   agent is back on the copy: a forward of its new place (it asked for the lock again) may
//!   come before the answer to its unlock, which then shows that the forward was from after.
//! - A notice that the entry is gone does not, then, outdate the views before it, as any other
//!   notice without a queue does (it says nobody waits behind a holder).
//! - Only unanswered withdrawals are recorded apart, until the answer to the copy's last
//!   outstanding `Unlock` (which may leave an entry: the intention of another request); the
//!   rest is the copy's entry (`Absent`) and its version, so nothing is kept per lock the agent
//!   left beyond its copy.
//! - A copy the agent left and no longer asks for (no request on the lock or a descendant on
//!   that node) is forgotten once nothing else is known of it ([`Knowledge::forget_left`]): its
//!   `Unlock` answered, no surrender, conversion or cap outstanding, no view kept. A session
//!   that locks and unlocks ever new ids keeps what it holds, not every id it ever held. A
//!   view of a copy the agent does not ask for counts without its own entries up to the
//!   version it left at, and every view when that is not recorded (forgotten), which is what
//!   the forgotten `Absent` entry said of the older views: the agent has no place there unless
//!   it asks again, and a request of its own is the only way back.

use super::key::{CopyKey, KeyRef};
use super::{Knowledge, Source, is_pending_in};
use locks_core::proto::{EntryState, LockView};
use locks_core::{AgentId, LockId, NodeId};
use std::sync::Arc;

/// The version an unanswered withdrawal counts from: every view is from before it.
pub(super) const UNANSWERED: u64 = u64::MAX;

/// `view` as `me` counts it while gone from its copy since `gone_at`: from before then, without
/// `me`'s own entries (the view as received goes with it, second); otherwise as it is.
pub(super) fn seen(
    view: Arc<LockView>,
    me: &AgentId,
    gone_at: Option<u64>,
) -> (Arc<LockView>, Option<Arc<LockView>>) {
    let before = gone_at.is_some_and(|g| view.version < g);
    if !before || !(view.holds(me) || is_pending_in(&view, me)) {
        return (view, None);
    }
    let mut edited = (*view).clone();
    edited.granted.retain(|e| e.agent != *me);
    edited.converting.retain(|c| c.agent != *me);
    edited.waiting.retain(|w| w.agent != *me);
    (Arc::new(edited), Some(view))
}

impl Knowledge {
    /// Forgets the copy `(lock, node)`, which the agent no longer asks for, if nothing is left to
    /// know of it: its newest notice says its entry is gone and nothing of it is outstanding or
    /// kept (module documentation). Returns whether it was forgotten.
    pub fn forget_left(&mut self, lock: &LockId, node: &NodeId) -> bool {
        let key = KeyRef::of(lock, node);
        if self.forgettable(key.as_dyn()) {
            self.copies.remove(key.as_dyn());
            return true;
        }
        false
    }

    /// How many copies [`Knowledge::forget_left`] would forget, of those `asked` says the
    /// agent does not ask for: none, once every answer of a server to the agent has come.
    pub fn forgettable_left(&self, asked: impl Fn(&LockId, &NodeId) -> bool) -> usize {
        self.copies
            .keys()
            .filter(|(l, n)| !asked(l, n) && self.forgettable(KeyRef::of(l, n).as_dyn()))
            .count()
    }

    /// Whether the newest notice of the copy says the agent's entry is gone (or none came), and
    /// nothing of the copy is outstanding or kept.
    fn forgettable(&self, key: &dyn CopyKey) -> bool {
        let gone = self
            .copies
            .get(key)
            .is_some_and(|c| c.entry.is_none_or(|e| e == EntryState::Absent));
        if !gone {
            // Most calls: an ancestor's copy still held for another lock.
            return false;
        }
        let kept = self.views.contains_key(key)
            || self.unlocking.contains_key(key)
            || self.withdrawn.contains(key)
            || self.suspended.contains_key(key)
            || self.surrenders.contains(key)
            || self.lowering.contains_key(key)
            || self.capped.contains_key(key)
            || self.excused.contains_key(key);
        !kept
    }

    /// Records that `me` withdrew its request on `(lock, node)` (module documentation), after
    /// [`Knowledge::unlock_sent`]: the stored view is kept without `me`'s own entry, until the
    /// answer to the copy's last outstanding unlock, and after it if the entry is gone.
    pub fn withdrew(&mut self, me: &AgentId, lock: &LockId, node: &NodeId) {
        let key = (lock.clone(), node.clone());
        self.withdrawn.insert(key.clone());
        self.restrip(me, &key);
    }

    /// The version from which the views of `key` show `me` as it is, if `me` left that copy:
    /// its withdrawal is unanswered, or its newest notice says its entry is gone.
    pub(super) fn gone_at(&self, key: &(LockId, NodeId)) -> Option<u64> {
        if !self.withdrawn.is_empty() && self.withdrawn.contains(key) {
            return Some(UNANSWERED);
        }
        let copy = self.copies.get(key)?;
        (copy.entry == Some(EntryState::Absent)).then_some(copy.entry_version)
    }

    /// [`Knowledge::gone_at`] of a copy the agent asks for (`asked`: a request of its own on
    /// the lock or a descendant names the node) or not: where it does not ask, every view is
    /// from before it left when that is not recorded (module documentation).
    pub(super) fn gone_at_if(&self, key: &(LockId, NodeId), asked: bool) -> Option<u64> {
        let gone_at = self.gone_at(key);
        if asked {
            return gone_at;
        }
        Some(gone_at.unwrap_or(UNANSWERED))
    }

    /// Counts the stored view of `key` again (from the view as received) by whether `me` is
    /// gone from the copy now.
    pub(super) fn restrip(&mut self, me: &AgentId, key: &(LockId, NodeId)) {
        let gone_at = self.gone_at(key);
        let Some(stored) = self.views.get_mut(key) else {
            return;
        };
        let raw = stored.raw.take().unwrap_or_else(|| stored.view.clone());
        let (view, raw) = seen(raw, me, gone_at);
        if raw.is_some() {
            // What others were sent was the view as received.
            stored.source = Source::Unknown;
        }
        stored.view = view;
        stored.raw = raw;
    }
}
