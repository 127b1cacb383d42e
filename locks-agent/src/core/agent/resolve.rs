//! Deadlock resolution: the analysis that finds the cycle this agent must break, and the
//! forwarding of views (with the fixes described in [`super`]).
//!
//! Invariants: a view goes to a given agent at most once per version; the analysis never gives
//! way by itself: it sends a probe round the cycle it found, and the victim gives way when the
//! probe comes back confirmed (`probe.rs`).
//!
//! **Whom a view is forwarded to.** An agent forwards each view worth passing on to the agents
//! it waits for, except where it can tell they have it or will get it from another
//! ([`crate::core::knowledge::Knowledge::already_sent`]), and with one more exception: an
//! agent that nobody is known to wait for sends a view only to the agents that are not pending
//! in it (its holders), not to those queued ahead of it there. No deadlock is missed for it.
//! Take a deadlock: a set `S` of agents, each waiting for others of `S` only (a terminal
//! strongly connected component of the wait-for graph). Once one agent of `S` knows that
//! another waits for it, it forwards as usual, its successors learn that it waits for them
//! (its own view of the lock shows the edge), forward as usual in turn, and so on round every
//! cycle of `S`. And some agent of `S` does come to know it: on a lock where agents of `S`
//! wait, the first of them, `q`, waits only for holders (anything pending ahead of it that it
//! waited for would be in `S`). If such a holder `h` does not convert, `q` forwards its view to
//! `h` (or the first waiter `h` blocks does) — holders are never skipped — and `h` learns `q`
//! waits for it. If `h` converts, it is pending behind `q`, was sent the queue with `q` in it,
//! and sees in its own view that `q` waits for it.

use super::{AgentCore, AgentEffect};
use crate::core::graph::{ViewGraph, ViewIndex, blockers_of, holders_blocking, is_waited_for};
use crate::core::knowledge::key::KeyRef;
use locks_core::proto::{AgentMessage, LockView};
use locks_core::{AgentId, LockId, NodeId};
use smallvec::SmallVec;
use std::sync::Arc;

impl AgentCore {
    /// The deadlock analysis and the forwarding after new knowledge.
    ///
    /// The common case takes a short cut with the same outcome: when the agent knows a single
    /// view and nobody in it converts, its wait-for graph has no cycle (pending entries wait
    /// only for holders and for entries ahead of them, and a holder that does not convert
    /// waits for nobody), so there is nothing to analyse, and the only copy worth forwarding
    /// is that view, to the agents this one waits for in it. No graph is built: a waiter on a
    /// hot lock pays for its own queue only, each time it changes.
    pub(super) fn analyse_and_forward(&mut self, out: &mut Vec<AgentEffect>) {
        let single = match self.knowledge.view_count() {
            0 => return,
            1 => self
                .knowledge
                .views()
                .next()
                .filter(|(_, _, v)| v.converting.is_empty())
                .map(|(l, n, v)| (l.clone(), n.clone(), v.clone())),
            _ => None,
        };
        if let Some((lock, node, view)) = single {
            // A pending target is skipped when the view is shared (the server sent it to every
            // agent pending in it) and when nobody waits for this agent (the lazy rule), so
            // then only the holders it waits for are asked about: what a waiter on a hot lock,
            // told of every change ahead of it, does each time.
            let holders_only = self.knowledge.is_shared(&lock, &node)
                || !is_waited_for(&self.modes, &view, &self.id);
            // Borrowed from this agent's own clone of the view: nothing is cloned but the ids
            // of the agents it is sent to.
            let targets = if holders_only {
                holders_blocking(&self.modes, &view, &self.id)
            } else {
                blockers_of(&self.modes, &view, &self.id)
            };
            let sent =
                self.knowledge
                    .already_sent_to(&self.modes, &self.id, &lock, &node, &targets);
            let to_send: SmallVec<[&AgentId; 4]> = targets
                .into_iter()
                .zip(sent)
                .filter_map(|(to, sent)| (!sent).then_some(to))
                .collect();
            if cfg!(debug_assertions) {
                self.check_single_forwarding(&lock, &node, &view, &to_send);
            }
            for to in to_send {
                self.send_view(to, &lock, &node, &view, out);
            }
            return;
        }
        let graph = self.wait_for_graph();
        match self.analysis_graph() {
            Some(waits) => self.analyse(&waits, out),
            None => self.analyse(&graph, out),
        }
        self.forward(&graph, out);
    }

    /// Debug builds: the single view's short cut sends `view` to exactly the agents the whole
    /// rule (every agent this one waits for, less those that have it or will, less the pending
    /// ones under the lazy rule) names, and the graph has no cycle.
    fn check_single_forwarding(
        &self,
        lock: &LockId,
        node: &NodeId,
        view: &LockView,
        to_send: &[&AgentId],
    ) {
        let graph = self.wait_for_graph();
        debug_assert!(graph.cycles().is_empty(), "one view, no cycle");
        let targets = graph.waits_for_set(&self.id);
        debug_assert_eq!(
            blockers_of(&self.modes, view, &self.id)
                .into_iter()
                .cloned()
                .collect::<Vec<_>>(),
            targets
        );
        let lazy = !is_waited_for(&self.modes, view, &self.id);
        let index = ViewIndex::new(&self.modes, view);
        let sent = self
            .knowledge
            .already_sent_to(&self.modes, &self.id, lock, node, &targets);
        let expected: Vec<&AgentId> = targets
            .iter()
            .zip(sent)
            .filter(|(to, sent)| !(*sent || (lazy && index.is_pending(to))))
            .map(|(to, _)| to)
            .collect();
        debug_assert_eq!(expected, to_send, "the single view's forwarding");
    }

    /// Looks for the cycle this agent must break, and sends a probe round it (`probe.rs`): the
    /// agent gives way only once every waiter of the cycle has confirmed its own edge.
    pub(super) fn analyse(&mut self, graph: &ViewGraph, out: &mut Vec<AgentEffect>) {
        if self.knowledge.surrender_outstanding() {
            return;
        }
        if let Some(cycle) = graph.victim_cycle(&self.id) {
            self.start_probe(graph, &cycle, out);
        }
    }

    pub(super) fn forward(&mut self, graph: &ViewGraph, out: &mut Vec<AgentEffect>) {
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
            .filter(|(l, n, _)| wanted.contains(KeyRef::of(l, n).as_dyn()))
            .map(|(l, n, v)| (l.clone(), n.clone(), v.clone()))
            .collect();
        // Nobody is known to wait for this agent: the agents queued ahead of it need not hear
        // of it yet (module documentation).
        let lazy = graph.waited_by_set(&self.id).is_empty();
        let pending: Vec<Option<ViewIndex>> = views
            .iter()
            .map(|(_, _, view)| lazy.then(|| ViewIndex::new(&self.modes, view)))
            .collect();
        let sent: Vec<SmallVec<[bool; 4]>> = views
            .iter()
            .map(|(lock, node, _)| {
                self.knowledge
                    .already_sent_to(&self.modes, &self.id, lock, node, &targets)
            })
            .collect();
        for (i, to) in targets.iter().enumerate() {
            for (((lock, node, view), sent), pending) in views.iter().zip(&sent).zip(&pending) {
                if sent[i] || pending.as_ref().is_some_and(|index| index.is_pending(to)) {
                    continue;
                }
                self.send_view(to, lock, node, view, out);
            }
        }
    }

    /// Sends `view` of `(lock, node)` to `to`, unless it is known to have that version or a
    /// newer one.
    fn send_view(
        &mut self,
        to: &AgentId,
        lock: &LockId,
        node: &NodeId,
        view: &Arc<LockView>,
        out: &mut Vec<AgentEffect>,
    ) {
        // A message to an agent on a node that is down would be lost, yet counted as sent.
        if self.down.contains(to.node()) || self.knowledge.was_sent(lock, node, to) {
            return;
        }
        self.knowledge.mark_sent(lock, node, to);
        out.push(AgentEffect::ToAgent {
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
