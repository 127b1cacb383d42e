//! Bounded waits: a `lock` caller whose wait ran out ([`AgentCore::time_out`]).
//!
//! The actor arms one timer per bounded call and, when it fires, settles first (a grant that
//! came in time is answered as a grant) and then asks the core. The core withdraws what the
//! call asked for, exactly as when the client drops the call's future
//! ([`AgentCore::withdraw`]), and fails the caller with what it was waiting for: every copy of
//! the transaction's requests not held then (the call waited for all of them) and the agents
//! its wait-for graph shows it waiting for there. A caller answered before the timer fired is
//! not touched.

use super::{AgentCore, AgentEffect, CallFailure};
use crate::core::CallId;
use locks_core::{AgentId, LockId, NodeId};

impl AgentCore {
    /// The wait of `lock` caller `call` ran out (see the module documentation). Nothing when
    /// the caller was answered already, or waits for all locks rather than one.
    pub fn time_out(&mut self, call: CallId) -> Vec<AgentEffect> {
        let Some(lock) = self.callers.waiting_lock(call).cloned() else {
            return Vec::new();
        };
        let (waited_on, holders) = self.what_blocks();
        let (_, mut out) = self.withdraw(call);
        out.push(AgentEffect::Reply {
            call,
            result: Err(CallFailure::TimedOut {
                lock,
                waited_on,
                holders,
            }),
        });
        out
    }

    /// Every copy of a request not held (lock and node, in order), and the agents this one
    /// waits for on those copies or on their ancestors, in id order.
    fn what_blocks(&self) -> (Vec<(LockId, NodeId)>, Vec<AgentId>) {
        let mut waited_on = Vec::new();
        for r in self.requests.values() {
            for node in &r.nodes {
                if self.down.contains(node) || !r.held_on(&self.modes, &self.knowledge, node) {
                    waited_on.push((r.lock.clone(), node.clone()));
                }
            }
        }
        let graph = self.wait_for_graph();
        let holders = graph
            .waits_for_set(&self.id)
            .into_iter()
            .filter(|h| {
                graph.waits_for(&self.id, h).is_some_and(|label| {
                    label.0.iter().any(|(l, n)| {
                        waited_on
                            .iter()
                            .any(|(w, wn)| wn == n && (w == l || l.is_ancestor_of(w)))
                    })
                })
            })
            .collect();
        (waited_on, holders)
    }
}
