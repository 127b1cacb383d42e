//! `TryLock`: a `Lock` that is carried out only if the table grants it at once, and refused
//! with [`Rejection::Busy`] otherwise, changing nothing.
//!
//! Invariant: a refused `TryLock` leaves the table exactly as it was (no entry, no version, no
//! notice to anybody); a granted one is the same operation as `Lock`, with the same notices.
//! The check is conservative: an agent that already has an entry on the lock or on one of its
//! ancestors is refused, although a `Lock` might have been granted it; the agent asks again
//! with `Lock` later, so a refusal only ever delays it.

use super::LockTable;
use super::notify::Sends;
use locks_core::proto::Rejection;
use locks_core::{AgentId, LockId, Mode};

impl LockTable {
    /// `TryLock` (module documentation).
    pub(super) fn try_lock(&mut self, agent: &AgentId, lock: &LockId, mode: Mode) -> Sends {
        if let Some(r) = self.refusal(lock, Some(mode)) {
            return self.reject(agent, lock, r);
        }
        if !self.grants_at_once(agent, lock, mode) {
            return self.reject(agent, lock, Rejection::Busy);
        }
        self.lock(agent, lock, mode)
    }

    /// Whether a `Lock` of `lock` in `mode` by `agent` would be granted at once, on the lock and
    /// on every ancestor: the agent has no entry on any of them, and on each that exists nobody
    /// waits or converts and the holders' group allows the mode needed there (what
    /// `LockRecord::place` grants a new entry at once).
    fn grants_at_once(&self, agent: &AgentId, lock: &LockId, mode: Mode) -> bool {
        let a = self.agents.lookup(agent);
        let intention = self.modes.intention(mode);
        (1..=lock.depth()).all(|depth| {
            let need = if depth == lock.depth() {
                mode
            } else {
                intention
            };
            let Some(record) = self
                .locks
                .find(&lock.keys()[..depth])
                .and_then(|s| self.locks.get(s))
            else {
                return true;
            };
            a.is_none_or(|a| record.entry(a).is_none())
                && record.converting().next().is_none()
                && record.waiting().next().is_none()
                && record
                    .group(&self.modes)
                    .is_none_or(|g| self.modes.compatible(need, g))
        })
    }
}
