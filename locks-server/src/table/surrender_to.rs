//! `SurrenderTo`: a voluntary surrender to a named waiter (the Erlang original's
//! `surrender_nowait/4`).
//!
//! The table is the only place that knows for sure whether the waiter still waits, so it
//! checks both conditions itself — the agent holds the lock (granted, or converting from a
//! held mode) and `to` waits or converts on it — and then applies exactly a deadlock
//! surrender at the lock's current version, so the requeueing rules are one. Only the note
//! differs: [`Note::SurrenderedTo`] instead of [`Note::Surrendered`], because no deadlock was
//! involved and agents record a deadlock for the latter. A refused request changes nothing and
//! is answered with one [`AgentMessage::Rejected`].

use super::{LockTable, Sends};
use locks_core::proto::{AgentMessage, Note, Rejection};
use locks_core::{AgentId, LockId};

impl LockTable {
    /// `SurrenderTo`: see the module documentation.
    pub(super) fn surrender_to(&mut self, agent: &AgentId, lock: &LockId, to: &AgentId) -> Sends {
        if self.state(agent, lock).held().is_none() {
            let reason = Rejection::SurrenderNotHeld { to: to.clone() };
            return self.reject(agent, lock, reason);
        }
        if !self.state(to, lock).is_waiting() {
            let reason = Rejection::NotWaiting { to: to.clone() };
            return self.reject(agent, lock, reason);
        }
        // The agent holds the lock, so its record exists.
        let Some(version) = self.view(lock).map(|v| v.version) else {
            return Sends::new();
        };
        let mut out = self.surrender(agent, lock, version, &[]);
        for (_, msg) in &mut out {
            if let AgentMessage::Notice(n) = msg
                && let Some(Note::Surrendered { agent, version }) = n.note.as_deref()
            {
                n.note = Some(Box::new(Note::SurrenderedTo {
                    agent: agent.clone(),
                    to: to.clone(),
                    version: *version,
                }));
            }
        }
        out
    }
}
