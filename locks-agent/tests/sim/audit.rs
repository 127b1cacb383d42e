//! The audit of the surrenders the tables apply: each is checked against the wait-for graph of
//! *all* the tables at that moment, so a surrender that breaks a cycle through several nodes
//! counts as real.

use super::Sim;
use locks_agent::state_machine::{Cycle, ViewGraph};
use locks_core::AgentId;
use locks_core::proto::{AgentMessage, Note, ServerRequest};

/// What the servers saw of the surrenders they applied.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    /// Surrenders applied while the victim was on a cycle of the real wait-for graph.
    pub real: u64,
    /// Surrenders applied while it was not (decided on outdated knowledge).
    pub needless: u64,
}

/// Whether a table's message says a surrender was applied (a refused one is answered with
/// `Note::NotSurrendered`).
pub(super) fn surrendered(msg: &AgentMessage) -> bool {
    matches!(msg, AgentMessage::Notice(n) if matches!(n.note.as_deref(), Some(Note::Surrendered { .. })))
}

impl Sim {
    /// What the tables saw of the surrenders they applied so far.
    pub fn audit(&self) -> Audit {
        self.audit.clone()
    }

    /// For a surrender: whether its victim lies on a cycle of the wait-for graph of every
    /// table together, now (before the table applies it).
    pub(super) fn victim_on_cycle(&self, req: &ServerRequest) -> Option<bool> {
        let ServerRequest::Surrender { agent, .. } = req else {
            return None;
        };
        Some(self.on_a_cycle(agent))
    }

    fn on_a_cycle(&self, agent: &AgentId) -> bool {
        self.real_cycles().iter().any(|c| c.agents.contains(agent))
    }

    /// The cycles of the wait-for graph of every table together, now.
    pub(super) fn real_cycles(&self) -> Vec<Cycle> {
        let mut views = Vec::new();
        for (node, table) in self.world.tables.iter() {
            for l in table.snapshot().locks {
                views.push((l.lock.clone(), node.clone(), l.view()));
            }
        }
        let g = ViewGraph::build(&self.modes, views.iter().map(|(l, n, v)| (l, n, v)));
        g.cycles()
    }

    /// Counts a surrender the table applied (`applied`: its notices said so for its lock).
    pub(super) fn record_surrender(&mut self, applied: bool, on_cycle: bool) {
        match (applied, on_cycle) {
            (false, _) => {}
            (true, true) => self.audit.real += 1,
            (true, false) => self.audit.needless += 1,
        }
    }
}
