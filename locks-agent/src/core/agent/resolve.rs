//! Deadlock resolution: the victim's decision and the forwarding of views
//! (`reference/erlang-locks.md` 5.6-5.8, with the fixes described in [`super`]).
//!
//! Invariants: at most one surrender of this agent is waiting for the server's answer; a
//! surrendered copy is forgotten and the requests under it count as pending until the server
//! speaks again; a view goes to a given agent at most once per version.

use super::{AgentCore, Effect, Phase};
use crate::core::graph::WaitForGraph;
use crate::core::status::Deadlock;
use locks_core::proto::{AgentMessage, LockView, ServerRequest};
use locks_core::{LockId, NodeId};
use std::sync::Arc;

impl AgentCore {
    /// Returns whether the agent surrendered a lock.
    pub(super) fn analyse(&mut self, graph: &WaitForGraph, out: &mut Vec<Effect>) -> bool {
        if self.knowledge.surrender_outstanding() {
            return false;
        }
        let Some(cycle) = graph.victim_cycle(&self.id) else {
            return false;
        };
        let (lock, node) = (cycle.lock, cycle.node);
        let Some(version) = self.knowledge.view(&lock, &node).map(|v| v.version) else {
            return false;
        };
        if self.options.abort_on_deadlock
            && self
                .requests
                .values()
                .any(|r| r.claimed && r.is_under(&lock, &node))
        {
            self.phase = Phase::Aborted;
            out.push(Effect::Abort { lock, node });
            return false;
        }
        let msg = ServerRequest::Surrender {
            agent: self.id.clone(),
            lock: lock.clone(),
            version,
        };
        self.send(out, node.clone(), msg);
        for agent in cycle.agents.iter().filter(|a| **a != self.id) {
            out.push(Effect::ToAgent {
                to: agent.clone(),
                msg: AgentMessage::Surrendered {
                    by: self.id.clone(),
                    node: node.clone(),
                    lock: lock.clone(),
                    version,
                },
            });
        }
        self.knowledge.record_deadlock(Deadlock {
            victim: self.id.clone(),
            lock: lock.clone(),
            node: node.clone(),
        });
        self.knowledge.surrendered(&lock, &node, version);
        self.mark_tree(&lock);
        self.refresh_status(out);
        true
    }

    pub(super) fn forward(&mut self, graph: &WaitForGraph, out: &mut Vec<Effect>) {
        let targets = graph.waits_for_set(&self.id);
        if targets.is_empty() {
            return;
        }
        // Only edges that can lie on a cycle through this agent and the agent it forwards to
        // are worth passing on: its own waits, and waits among the agents that (transitively)
        // wait for it.
        let wanted = graph.cycle_copies(&self.id);
        let views: Vec<(LockId, NodeId, Arc<LockView>)> = self
            .knowledge
            .views()
            .filter(|(l, n, _)| wanted.contains(&((*l).clone(), (*n).clone())))
            .map(|(l, n, v)| (l.clone(), n.clone(), v.clone()))
            .collect();
        for to in targets {
            for (lock, node, view) in &views {
                let key = (to.clone(), lock.clone(), node.clone());
                if self.forwarded.get(&key).is_some_and(|v| *v >= view.version) {
                    continue;
                }
                self.forwarded.insert(key, view.version);
                out.push(Effect::ToAgent {
                    to: to.clone(),
                    msg: AgentMessage::Forward {
                        from: self.id.clone(),
                        node: node.clone(),
                        lock: lock.clone(),
                        view: view.clone(),
                    },
                });
            }
        }
    }
}
