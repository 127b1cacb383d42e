//! The gate of a request over several nodes: a request that must be granted on all its nodes
//! and finds itself queued on the first of them (its *gate*, the smallest node not down) leaves
//! its other copies, and asks for them again once it holds the gate.
//!
//! **Why.** N transactions that each ask for one lock on the same N nodes at the same moment
//! each get it first on some nodes and wait on the others: the wait-for graph is nearly
//! complete, and the deadlock resolution untangles it one surrender at a time, each change of
//! a queue told to every waiter there and forwarded among all the agents it involves: more
//! than N² messages per grant. Through the gate, the requests that see the same nodes queue on
//! one copy; its holder alone asks the others, where nobody of that herd stays to make it
//! wait: no cycle among them, and each grant costs the gate's hand-off (one notice per waiter
//! there) and the holder's requests, grants and releases on the other nodes, O(N) messages.
//!
//! **The rule.** A request *may retreat* when it is `All` over two or more nodes, the client
//! was never told it holds it (it is not claimed), and no other request of the agent is on an
//! ancestor or a descendant of its lock. A new such request asks its gate with `Lock` and every
//! other node with `TryLock`, which the server grants only if it can at once and otherwise
//! refuses with `Busy`, changing nothing: uncontended, every copy is granted in one round trip,
//! as for any request; contended, the busy copies gain no entry, so no queue but the gate's
//! grows, and no wait is added anywhere but there. A busy copy is *left*. When the agent's entry
//! on the gate is a plain wait (not a conversion), the request *retreats*: it sends `Unlock` to
//! every other node it is on (each as a client's unlock of that copy: `unlock_copy`), and counts
//! them left too. It *returns* when it holds the gate (or the gate goes down, or the request
//! changes: another request on the lock, an unlock, a conversion): it asks for the lock again,
//! with `Lock`, on every node it left that is up. Until the gate has answered such a request (a
//! notice of the agent's entry there, a refusal, or the node down), the agent neither analyses
//! nor forwards: what it would pass on about its other copies is about to go stale if it
//! retreats.
//!
//! Only the answer to the copy's last request counts: a `Busy` that answers a `TryLock` the
//! agent has overtaken since (with a `Lock`, or an `Unlock` not answered yet, which the server
//! answers after it) is dropped, and an `Unlock` of a copy whose `TryLock` found it busy is
//! answered "not held", which tells the client nothing.
//!
//! **Why it is safe.** Nothing is taken from the client: a request that is not claimed was
//! never reported held, so leaving some of its copies changes nothing it was told, and the
//! request counts as held only with every copy granted, like any other. Leaving a copy is an
//! `Unlock` of that copy (or a `TryLock` refused: no entry at all) and asking again a `Lock`,
//! each carried out and accounted for by the same bookkeeping as the client's own unlock and
//! request (`knowledge/withdrawn.rs`: views of a copy left count without this agent's entries;
//! `knowledge/answers.rs`: no grant counts before the unlock's answer). The deadlock resolution is the general one: every wait that
//! remains is in the views like any other, so every real cycle is still seen by its victim
//! (`resolve.rs`), and a probe is confirmed only by the waiters' own first-hand views
//! (`probe.rs`); a retreated agent needs none of the copies it left (`needs_copy`
//! is false there), so it confirms no edge on them. A retreat removes waits and never adds
//! one, so it cannot close a cycle; the one it returns with (a `Lock` on the copies it left)
//! is a request like any other. Waiting for the gate's answer delays the analysis and the
//! forwarding, never skips them: the new knowledge stays marked, and the settle after the
//! answer (which always comes, or the node goes down and the gate moves) analyses and
//! forwards everything known then, as if the answer had come with the rest.
//!
//! **Why no needless surrender follows from it.** The agents of the herd that hold the gate's
//! lock elsewhere and wait on the gate leave those copies by themselves, in the settle in which
//! they learn that they wait there, before they take any probe in. A cycle through such an
//! agent's wait on the gate and an edge into it on a copy it leaves (the gate's holder waits
//! there behind it) is real until its `Unlock` arrives there; a probe of it needs that agent to
//! confirm its wait, and it drops the probe instead, since it left the copy (`probe.rs`). The
//! waiter behind it is told of the removal by the server and analyses again.
//!
//! **Cost.** At the start of a herd every agent is granted its copy on some nodes, found busy
//! on the others, and queued on the gate: N² requests and answers, and one `Unlock` per copy
//! granted to an agent that waits on the gate, with no queue on any other node. After it each
//! grant costs O(N): the gate's hand-off (one notice per waiter there), and the holder's
//! requests, grants and releases on the other nodes. The deterministic simulation counts it
//! (`tests/sim_scale.rs`).
//!
//! `AllAlive` requests never retreat: the leader election asks with them, through a gate of its
//! own (`locks-leader`'s `core/gate.rs`), and counts on its candidates staying queued on every
//! node they ask.
//!
//! **Progress.** The holder of a gate keeps it (it never retreats), so the gate is handed on
//! only when its holder has been granted everything and ends, or gives the gate up as the
//! victim of a real cycle (through other locks); the agents queued on the gate are granted it
//! in turn.

use super::{AgentCore, AgentEffect};
use crate::core::requests::LockRequest;
use crate::options::Req;
use locks_core::proto::ServerRequest;
use locks_core::{LockId, NodeId};
use std::collections::BTreeMap;
use std::ops::Bound;

/// A request that left its copies but the gate's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Retreat {
    /// The node it waits on.
    pub(super) gate: NodeId,
    /// The nodes it sent `Unlock` to and asks again on its return.
    pub(super) left: Vec<NodeId>,
}

/// The requests that retreated, by lock.
pub(super) type Retreats = BTreeMap<LockId, Retreat>;

/// The copies of requests that a `TryLock` found busy, by lock, not asked for again yet.
pub(super) type Busy = BTreeMap<LockId, Vec<NodeId>>;

impl AgentCore {
    /// Whether the request on `lock` left its copy on `node` while it waits on its gate, the
    /// first of its nodes: that copy has no entry of this agent, and is asked for again once
    /// the gate is held (`core/agent/gate.rs`).
    pub fn left_copy(&self, lock: &LockId, node: &NodeId) -> bool {
        (!self.retreats.is_empty()
            && self
                .retreats
                .get(lock)
                .is_some_and(|r| r.left.contains(node)))
            || (!self.busy.is_empty() && self.busy.get(lock).is_some_and(|b| b.contains(node)))
    }

    /// A `TryLock` of the request on `lock` found its copy on `node` busy: the copy is left
    /// until the request holds its gate (module documentation).
    pub(super) fn on_busy(&mut self, node: NodeId, lock: &LockId) {
        // The answer to a `TryLock` the agent has since overtaken (a `Lock`, an `Unlock`, or
        // an `Unlock` and a new request) says nothing about the copy now: the server answers in
        // order, so the `Unlock`'s answer has not come yet.
        let key = (lock.clone(), node.clone());
        if self.knowledge.unlock_unanswered(lock, &node) || !self.trying.remove(&key) {
            return;
        }
        let asked = self
            .requests
            .get(lock)
            .is_some_and(|r| r.nodes.contains(&node))
            && !self.down.contains(&node)
            && !self.retreats.contains_key(lock);
        if !asked {
            return;
        }
        let busy = self.busy.entry(lock.clone()).or_default();
        if !busy.contains(&node) {
            busy.push(node);
        }
        self.mark_request(lock);
        self.dirty = true;
    }

    /// Retreats the requests that wait on their gate, and brings back those that hold it
    /// (module documentation). Returns whether anything was sent (the status is to be brought
    /// up to date again).
    pub(super) fn move_through_gates(&mut self, out: &mut Vec<AgentEffect>) -> bool {
        let mut moved = false;
        let gate_passed = |lock: &LockId, gate: Option<&NodeId>| {
            let Some(gate) = gate else {
                return true;
            };
            self.down.contains(gate)
                || self.requests.get(lock).is_none_or(|q| {
                    q.claimed.is_some() || q.held_on(&self.modes, &self.knowledge, gate)
                })
        };
        let mut back: Vec<LockId> = self
            .retreats
            .iter()
            .filter(|(lock, r)| gate_passed(lock, Some(&r.gate)))
            .map(|(lock, _)| lock.clone())
            .collect();
        // A gate that moved onto a busy copy (the first went down) is asked like the rest.
        back.extend(
            self.busy
                .iter()
                .filter(|(lock, busy)| {
                    let gate = self.gate_of(lock);
                    gate.as_ref().is_some_and(|g| busy.contains(g))
                        || gate_passed(lock, gate.as_ref())
                })
                .map(|(lock, _)| lock.clone()),
        );
        for lock in back {
            self.return_through_gate(&lock, out);
            moved = true;
        }
        let leaving: Vec<(LockId, NodeId)> = self
            .pending
            .iter()
            .filter(|lock| !self.retreats.contains_key(*lock))
            .filter_map(|lock| Some((lock.clone(), self.gate_waited_on(lock)?)))
            .collect();
        for (lock, gate) in leaving {
            let nodes: Vec<NodeId> = self.requests[&lock]
                .nodes
                .iter()
                .filter(|n| **n != gate && !self.down.contains(*n))
                .cloned()
                .collect();
            // The busy copies have no entry of this agent: nothing to unlock there.
            let busy = self.busy.remove(&lock).unwrap_or_default();
            // Recorded first: the caps on the ancestors' copies leave the copies left out.
            self.retreats.insert(
                lock.clone(),
                Retreat {
                    gate,
                    left: nodes.clone(),
                },
            );
            for node in nodes.iter().filter(|n| !busy.contains(n)) {
                self.unlock_copy(&lock, node, out);
            }
            self.mark_request(&lock);
            moved = true;
        }
        moved
    }

    /// The gate of the pending request on `lock`, if the request may retreat and its entry
    /// there waits (module documentation).
    fn gate_waited_on(&self, lock: &LockId) -> Option<NodeId> {
        let gate = self.gate_of(lock)?;
        self.knowledge.waits_plainly(lock, &gate).then_some(gate)
    }

    /// The gate of the request on `lock`, if it is one that may retreat (module
    /// documentation).
    fn gate_of(&self, lock: &LockId) -> Option<NodeId> {
        self.gate_of_request(self.requests.get(lock)?)
    }

    /// [`Self::gate_of`] for `r`, whether it is in the requests yet or not: for a new request,
    /// the node to ask plainly, its other copies being asked with `TryLock` (module
    /// documentation).
    pub(super) fn gate_of_request(&self, r: &LockRequest) -> Option<NodeId> {
        if r.req != Req::All || r.nodes.len() < 2 || r.claimed.is_some() {
            return None;
        }
        let lock = &r.lock;
        let gate = r.nodes.iter().find(|n| !self.down.contains(*n))?;
        let related = lock.ancestors().any(|a| self.requests.contains_key(&a))
            || self
                .requests
                .range::<LockId, _>((Bound::Excluded(lock), Bound::Unbounded))
                .next()
                .is_some_and(|(l, _)| lock.is_ancestor_of(l));
        (!related).then(|| gate.clone())
    }

    /// Whether a pending request that may retreat has not heard from its gate yet: the
    /// analysis and the forwarding wait for that answer (module documentation).
    pub(super) fn gate_unanswered(&self) -> bool {
        self.pending.iter().any(|lock| {
            !self.retreats.contains_key(lock)
                && self.gate_of(lock).is_some_and(|gate| {
                    self.knowledge.entry_version(lock, &gate).is_none()
                        && !self.rejected.contains_key(&(lock.clone(), gate.clone()))
                })
        })
    }

    /// Forgets which copies of the request on `lock` it left or found busy, and returns them:
    /// none of them has an entry of this agent (the retreat's `Unlock`s went out already).
    pub(super) fn take_left(&mut self, lock: &LockId) -> Vec<NodeId> {
        let mut left = self
            .retreats
            .remove(lock)
            .map(|r| r.left)
            .unwrap_or_default();
        left.extend(self.busy.remove(lock).unwrap_or_default());
        left
    }

    /// Asks again, on every node up it left or found busy, for the request on `lock` (if it is
    /// still there).
    pub(super) fn return_through_gate(&mut self, lock: &LockId, out: &mut Vec<AgentEffect>) {
        let left = self.take_left(lock);
        if left.is_empty() {
            return;
        }
        let Some(mode) = self.requests.get(lock).map(|r| r.mode) else {
            return;
        };
        for node in left {
            if !self.down.contains(&node) {
                let msg = ServerRequest::Lock {
                    agent: self.id.clone(),
                    lock: lock.clone(),
                    mode,
                };
                self.send(out, node, msg);
            }
        }
        self.mark_request(lock);
        self.dirty = true;
    }
}
