//! The oracles of the simulation (see the module documentation of `sim`), checked after every
//! step.
//!
//! Agreement, for an agent that runs, has settled, and has nothing in flight to or from a
//! server whose table the sim inspects: on that table
//! - the agent's direct mode on every lock is its request's mode there, and it has a direct
//!   lock exactly where it has a request (a conversion the server did not take leaves the
//!   agent believing a weaker mode than the table holds, the defect this catches);
//! - it has an entry exactly on the locks its requests need (the locks and their ancestors),
//!   and its entry is what the server last told it (the agent's knowledge);
//! - when the agent says it has all its locks, each entry holds a mode covering what every
//!   request asks of that lock (its own mode, or the intention mode of a request below): the
//!   agent holds what it believes it holds. (Not always exactly the entry's need: the group
//!   of `U` and `IX` is `X`, so an entry holding `SIX`, which covers both, may still convert.)
//!
//! Forgetting, for an agent that runs and has no server's message on its way to it: it keeps no
//! copy it no longer asks for with nothing outstanding or kept of it
//! (`AgentCore::forgettable_copies` is 0).

use super::{End, Sim};
use locks_agent::TransactionStatus;
use locks_agent::state_machine::LockRequest;
use locks_core::proto::EntryState;
use locks_core::{AgentId, LockId, Mode, NodeId};
use std::collections::BTreeMap;

impl Sim {
    fn held_by_truth(&self, agent: &AgentId, node: &NodeId, lock: &LockId, mode: Mode) -> bool {
        let locks = self.truth.get(node);
        let held = |l: &LockId, m: Mode| {
            locks
                .and_then(|t| t.get(l))
                .and_then(|e| e.get(agent))
                .and_then(|s| s.held())
                .is_some_and(|h| self.modes.covers(h, m))
        };
        let intention = self.modes.intention(mode);
        held(lock, mode) && lock.ancestors().all(|a| held(&a, intention))
    }

    /// The oracles of the module documentation (holders: on the locks changed by this step;
    /// agreement: for the agent that received or settled in this step).
    pub fn check(&mut self) -> Result<(), String> {
        if let Some(id) = self.subject.take() {
            self.check_forgotten(&id)?;
            self.check_agreement(&id)?;
        }
        let changed = std::mem::take(&mut self.changed);
        for (node, lock) in &changed {
            let Some(entries) = self.truth.get(node).and_then(|t| t.get(lock)) else {
                continue;
            };
            let holders: Vec<(&AgentId, Mode)> = entries
                .iter()
                .filter_map(|(a, s)| s.held().map(|m| (a, m)))
                .collect();
            for (i, (a, ma)) in holders.iter().enumerate() {
                for (b, mb) in &holders[i + 1..] {
                    if !self.modes.compatible(*ma, *mb) {
                        return Err(format!(
                            "{lock} on {node}: {a} holds {ma} and {b} holds {mb}\n{}",
                            self.last_trace()
                        ));
                    }
                }
            }
        }
        for (id, c) in &self.clients {
            if !c.core.is_running() || !c.core.status().have_all_locks() {
                continue;
            }
            for r in c.core.requests() {
                // Nodes count as the agent was told of them (a transaction that got its agent
                // after a node went down was never told, and a grant of that node's new
                // incarnation is real).
                let down: Vec<&NodeId> = c.core.down_nodes().collect();
                let up = r.nodes.iter().filter(|n| !down.contains(n));
                let had = up
                    .filter(|n| self.held_by_truth(id, n, &r.lock, r.mode))
                    .count();
                let down = r.nodes.iter().filter(|n| down.contains(n)).count();
                if !r.req.is_met(r.nodes.len(), had, down) {
                    return Err(format!(
                        "{id} claims all its locks but does not hold {} {}\n{}",
                        r.lock,
                        r.mode,
                        self.last_trace()
                    ));
                }
            }
        }
        Ok(())
    }

    /// The forgetting oracle for agent `id`: once every answer of a server to it has come, it
    /// keeps no copy it left for good (a session that locks ever new ids keeps what it holds,
    /// not every id it held).
    fn check_forgotten(&self, id: &AgentId) -> Result<(), String> {
        let Some(c) = self.clients.get(id) else {
            return Ok(());
        };
        let me = End::Agent(id.clone());
        let answers_due = self
            .world
            .net
            .channels()
            .any(|(from, to, _)| *to == me && matches!(from, End::Server(_)));
        let left = c.core.forgettable_copies();
        if c.core.is_running() && !answers_due && left > 0 {
            return Err(format!(
                "{id} keeps {left} copies it left, with nothing outstanding\n{}",
                self.last_trace()
            ));
        }
        Ok(())
    }

    /// The agreement oracle (module documentation) for agent `id`.
    pub(super) fn check_agreement(&mut self, id: &AgentId) -> Result<(), String> {
        if self.inspect.is_empty() || self.world.unsettled.contains(id) {
            return Ok(());
        }
        let Some(c) = self.clients.get(id) else {
            return Ok(());
        };
        // An idle client has no agent to agree with (the fast path reads the table itself).
        if !c.core.is_running() || c.idle.is_some() {
            return Ok(());
        }
        let me = End::Agent(id.clone());
        let in_flight = self.world.net.channels().any(|(from, to, _)| {
            (*from == me && matches!(to, End::Server(_)))
                || (*to == me && matches!(from, End::Server(_)))
        });
        if in_flight {
            return Ok(());
        }
        let have_all = matches!(c.core.status(), TransactionStatus::HaveAllLocks { .. });
        let group = |acc: Option<Mode>, m: Mode| Some(acc.map_or(m, |g| self.modes.group(m, g)));
        for node in &self.inspect {
            if c.core.down_nodes().any(|n| n == node) {
                continue;
            }
            // Per lock: the direct mode and the need the agent's requests make on this node.
            let mut expected: BTreeMap<LockId, (Option<Mode>, Option<Mode>)> = BTreeMap::new();
            // A request waiting on its gate left its other copies (the agent's `gate.rs`).
            let here =
                |r: &&LockRequest| r.nodes.contains(node) && !c.core.left_copy(&r.lock, node);
            for r in c.core.requests().filter(here) {
                let e = expected.entry(r.lock.clone()).or_default();
                e.0 = Some(r.mode);
                let intention = self.modes.intention(r.mode);
                for a in r.lock.ancestors() {
                    let e = expected.entry(a).or_default();
                    e.1 = group(e.1, intention);
                }
            }
            for e in expected.values_mut() {
                if let Some(d) = e.0 {
                    // The direct mode first, then the intentions, as the table folds them.
                    e.1 = Some(e.1.map_or(d, |i| self.modes.group(i, d)));
                }
            }
            let snap = self
                .world
                .tables
                .get(node)
                .expect("an inspected table")
                .snapshot();
            let mut locks: Vec<LockId> = snap
                .locks
                .iter()
                .filter(|l| l.entry(id).is_some())
                .map(|l| l.lock.clone())
                .collect();
            locks.extend(expected.keys().cloned());
            locks.sort();
            locks.dedup();
            for lock in locks {
                let entry = snap.lock(&lock).and_then(|l| l.entry(id));
                let (direct, need) = expected.get(&lock).copied().unwrap_or_default();
                let told = self
                    .truth
                    .get(node)
                    .and_then(|t| t.get(&lock))
                    .and_then(|e| e.get(id))
                    .copied()
                    .unwrap_or(EntryState::Absent);
                let state = entry.map_or(EntryState::Absent, |e| e.state);
                // What the agent's requests ask of this lock: their own modes, and the intention
                // modes of those below it. (Not their group: the table's need may be stronger,
                // as `U` with `IX` needs `X`, while `SIX` covers both.)
                let asked: Vec<Mode> = c
                    .core
                    .requests()
                    .filter(here)
                    .filter_map(|r| {
                        if r.lock == lock {
                            Some(r.mode)
                        } else {
                            lock.is_ancestor_of(&r.lock)
                                .then(|| self.modes.intention(r.mode))
                        }
                    })
                    .collect();
                let covers_all = |held: Option<Mode>, asked: &[Mode]| {
                    asked
                        .iter()
                        .all(|m| held.is_some_and(|h| self.modes.covers(h, *m)))
                };
                let problem = match (need, entry) {
                    (None, Some(_)) => Some(format!(
                        "the table has an entry ({state:?}) no request of the agent needs"
                    )),
                    (Some(n), None) => Some(format!(
                        "the agent's requests need {n} there, the table has no entry"
                    )),
                    (Some(_), Some(e)) if e.direct != direct => Some(format!(
                        "the agent's request is {direct:?}, the table's direct lock {:?}",
                        e.direct
                    )),
                    _ if told != state => Some(format!(
                        "the agent was told {told:?}, the table has {state:?}"
                    )),
                    _ if have_all && !covers_all(state.held(), &asked) => Some(format!(
                        "the agent has all its locks and asks for {asked:?} there, the table has \
                         {state:?}"
                    )),
                    _ => None,
                };
                if let Some(p) = problem {
                    return Err(disagreement(id, &lock, node, &p, &self.last_trace()));
                }
            }
        }
        self.stats.agreements += 1;
        Ok(())
    }
}

fn disagreement(id: &AgentId, lock: &LockId, node: &NodeId, problem: &str, trace: &str) -> String {
    format!("{id} and the table of {node} disagree on {lock}: {problem}\n{trace}")
}
