//! Waits a waiter said it does not have (it refuted a probe, `core/agent/probe.rs`), or that the
//! agent it waited for there said it left (the copy it left in a retreat): left out of the
//! deadlock analysis as long as the views that showed them are not replaced by newer ones, the
//! waiter does not vouch for them again, and no node comes or goes.

use super::Knowledge;
use locks_core::{AgentId, LockId, NodeId};
use smallvec::SmallVec;

impl Knowledge {
    /// Records that `waiter` does not wait on `(lock, node)` as of `version` (a refuted
    /// probe). Returns whether the graph may change.
    pub fn excuse(&mut self, waiter: &AgentId, lock: &LockId, node: &NodeId, version: u64) -> bool {
        let key = (lock.clone(), node.clone());
        if self
            .views
            .get(&key)
            .is_none_or(|s| s.view.version > version)
        {
            return false;
        }
        let entry = self
            .excused
            .entry(key)
            .or_insert((version, SmallVec::new()));
        if entry.0 < version {
            entry.0 = version;
        }
        if entry.1.contains(waiter) {
            return false;
        }
        entry.1.push(waiter.clone());
        true
    }

    /// Forgets every excuse: what a waiter needs may have changed without any queue changing
    /// (a node went down or came back and took or gave grants elsewhere).
    pub fn clear_excuses(&mut self) {
        self.excused.clear();
    }

    /// Whether some waiter is excused anywhere.
    pub fn has_excuses(&self) -> bool {
        !self.excused.is_empty()
    }

    /// Whether `waiter`'s edges from the stored view of `(lock, node)` are left out.
    pub fn is_excused(&self, lock: &LockId, node: &NodeId, waiter: &AgentId) -> bool {
        if self.excused.is_empty() {
            return false;
        }
        let key = (lock.clone(), node.clone());
        match (self.excused.get(&key), self.views.get(&key)) {
            (Some((v, who)), Some(s)) => s.view.version <= *v && who.contains(waiter),
            _ => false,
        }
    }

    /// Forgets excuses that no stored view is old enough for any more.
    pub(super) fn trim_excused(&mut self) {
        let views = &self.views;
        self.excused
            .retain(|k, (v, _)| views.get(k).is_some_and(|s| s.view.version <= *v));
    }
}
