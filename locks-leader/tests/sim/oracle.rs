//! The checks made on a quiet simulation, and a description of its state for failure reports.

use super::{Sim, State};
use locks_core::{MemberId, NodeId};
use locks_leader::{ElectionMode, Role};
use std::collections::BTreeSet;

impl Sim {
    /// The connected components of the nodes.
    pub fn components(&self) -> Vec<Vec<NodeId>> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for n in self.world.tables.nodes() {
            if seen.contains(n) {
                continue;
            }
            let comp: Vec<NodeId> = self.peers(n);
            for c in &comp {
                seen.insert(c.clone());
            }
            out.push(comp);
        }
        out
    }

    /// Checks, once quiet, that each component with a candidate (in majority mode: with a
    /// majority of the nodes that host candidates; the others have no leader) has exactly one
    /// leader that every member of the component follows, that it holds the election lock on every node
    /// of the component, and that its term is at least every term a member there accepted.
    pub fn check_one_leader_per_component(&self) -> Result<(), String> {
        for comp in self.components() {
            let members: Vec<&MemberId> = self
                .members
                .keys()
                .filter(|m| comp.contains(m.node()))
                .collect();
            if members.is_empty() {
                continue;
            }
            let leaders: Vec<&MemberId> = members
                .iter()
                .filter(|m| self.members[**m].core.is_leader())
                .copied()
                .collect();
            let any_candidate = members
                .iter()
                .any(|m| self.members[*m].core.role() == Role::Candidate);
            if !any_candidate {
                continue;
            }
            if self.options.mode() == ElectionMode::Majority {
                // The group's nodes: configured, and every member's (workers' too), as any
                // member ever knew them (the set only grows).
                let known: Vec<NodeId> = self
                    .members
                    .values()
                    .flat_map(|sm| sm.core.group_nodes())
                    .collect();
                let group: BTreeSet<&NodeId> = self
                    .options
                    .configured_nodes()
                    .iter()
                    .chain(self.members.keys().map(|m| m.node()))
                    .chain(known.iter())
                    .collect();
                let inside = comp.iter().filter(|n| group.contains(n)).count();
                if inside * 2 <= group.len() {
                    // A minority island: nobody leads there, nobody follows.
                    let believers: Vec<&MemberId> = members
                        .iter()
                        .filter(|m| self.members[**m].core.leader().is_some())
                        .copied()
                        .collect();
                    if !believers.is_empty() {
                        return Err(format!(
                            "minority component {comp:?}: {believers:?} believe in a leader\n{}",
                            self.describe()
                        ));
                    }
                    continue;
                }
            }
            if leaders.len() != 1 {
                return Err(format!(
                    "component {comp:?}: leaders {leaders:?}\n{}",
                    self.describe()
                ));
            }
            let leader = leaders[0];
            let term = self.members[leader]
                .core
                .leader()
                .cloned()
                .expect("a leader has a term");
            for m in &members {
                let core = &self.members[*m].core;
                if core.leader() != Some(&term) {
                    return Err(format!(
                        "component {comp:?}: {m} follows {:?}, not {term}\n{}",
                        core.leader(),
                        self.describe()
                    ));
                }
                if core.accepted().is_some_and(|a| a > &term) {
                    return Err(format!(
                        "{m} accepted {:?} above the leader's {term}",
                        core.accepted()
                    ));
                }
            }
            let agent = leader.agent();
            let held: Vec<&NodeId> = comp
                .iter()
                .filter(|n| {
                    self.world
                        .tables
                        .get(n)
                        .expect("a table per node")
                        .view(&self.lock)
                        .is_some_and(|v| v.holds(&agent))
                })
                .collect();
            if self.options.mode() == ElectionMode::Majority {
                // A leader stays put on the majority it holds: nodes that came up since are
                // not asked for (the member core's `tenure` rule).
                let group = self.members[leader].core.group_nodes();
                let inside = held.iter().filter(|n| group.contains(n)).count();
                if inside * 2 <= group.len() {
                    return Err(format!(
                        "leader {leader} holds the lock on {held:?}, no majority of {group:?}"
                    ));
                }
            } else if held.len() < comp.len() {
                return Err(format!(
                    "leader {leader} holds the lock on {held:?}, not on all of {comp:?}"
                ));
            }
        }
        Ok(())
    }

    /// Checks that every member has every acknowledged store.
    pub fn check_stores_everywhere(&self) -> Result<(), String> {
        for (m, sm) in &self.members {
            for (k, v) in &self.acked {
                if sm.core.callbacks().map.get(k) != Some(v) {
                    return Err(format!(
                        "{m} lacks {k}={v}: has {:?}\n{}",
                        sm.core.callbacks().map,
                        self.describe()
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (m, sm) in &self.members {
            let st = match sm.core.state() {
                State::Candidate => "candidate".to_string(),
                State::Syncing { .. } => "syncing".to_string(),
                State::Leader { term, .. } => format!("LEADER {term}"),
                State::Following { term, .. } => format!("follows {term}"),
            };
            s.push_str(&format!(
                "  {m}: {st}; agent {:?}; nodes {:?}; accepted {:?}\n",
                sm.core.agent_status(),
                sm.core.nodes(),
                sm.core.accepted()
            ));
        }
        for (n, t) in self.world.tables.iter() {
            s.push_str(&format!("  table {n}: {:?}\n", t.view(&self.lock)));
        }
        s.push_str(&format!("  links {:?}\n", self.links));
        if self.world.trace.on() {
            s.push_str(&format!("{}\n", self.world.trace));
        }
        s
    }
}
