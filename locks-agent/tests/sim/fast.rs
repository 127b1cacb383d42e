//! The fast path in the simulation: clients whose first locks are taken straight from their own
//! node's table, with no agent running, as `Transaction` does (`transaction/fast.rs`).
//!
//! With [`Sim::fast_path`] on, every client with an odd serial starts *idle*: a request on its
//! own node alone, with the default requirement, is applied to that node's table at once (the
//! same `Tables::admit` as every request), and the table's answers to the client are not sent
//! (they update the servers' truth, which the oracles read). If the table grants it, the client
//! was told it holds it and stays idle; otherwise, or at the first request of another kind, a
//! conversion, or anything that needs the agent, the client's core takes over with
//! `AgentCore::adopt` (its direct locks, the table's state of its entries, the locks it was told
//! it holds) and then receives, in order, what other agents sent it meanwhile. While idle and not
//! queued anywhere, a probe through it is refuted at once, as the router does; once the table
//! has queued one of its requests, probes are kept too. `end` of an idle client releases its
//! entries in the table at once.
//!
//! An idle client granted everything its phase asked for pauses every other time (`Client::
//! paused`) until a step of the simulation's choosing lets it go on, as a real client holds its
//! locks while it works: others then queue behind a holder that has no agent and send it
//! forwards and probes. (Without the pause an idle client went through its phases at once, and
//! no message ever reached one.)

use super::{End, Payload, Sim};
use locks_agent::{LockResult, Req, TransactionStatus};
use locks_core::proto::{AgentMessage, ServerRequest};
use locks_core::{AgentId, LockId};

/// A client that has no agent running yet.
#[derive(Debug, Default)]
pub struct Idle {
    /// Messages for it, in the order they came.
    pub kept: Vec<AgentMessage>,
    /// The table has queued one of its requests (probes are kept from then on).
    pub waits: bool,
    /// The locks it was told it holds (granted on the fast path).
    pub told: Vec<LockId>,
}

impl Sim {
    /// Whether client `id` starts idle (see the module documentation).
    pub(super) fn starts_idle(&self, id: &AgentId) -> bool {
        self.fast_path && !id.serial().is_multiple_of(2)
    }

    /// Whether `id` is idle.
    pub fn is_idle(&self, id: &AgentId) -> bool {
        self.clients.get(id).is_some_and(|c| c.idle.is_some())
    }

    /// The fast path of one request of idle client `id`: applied to its node's table now.
    /// Returns false (and does nothing) if the request is not one the fast path takes.
    pub(super) fn fast_ask(
        &mut self,
        id: &AgentId,
        lock: &LockId,
        mode: locks_core::Mode,
        nodes: &[locks_core::NodeId],
        req: Req,
    ) -> bool {
        let node = id.node().clone();
        if !self.is_idle(id) || req != Req::All || nodes != [node.clone()] {
            return false;
        }
        self.world.trace.push(format!("{id} fast {lock} {mode}"));
        let request = ServerRequest::Lock {
            agent: id.clone(),
            lock: lock.clone(),
            mode,
        };
        self.stats.fast += 1;
        let granted = self.admit_as(node.clone(), request, Some(id)).is_ok()
            && self
                .world
                .tables
                .get(&node)
                .and_then(|t| t.holds(id, lock))
                .is_some();
        let idle = self
            .clients
            .get_mut(id)
            .and_then(|c| c.idle.as_mut())
            .expect("idle");
        if granted {
            idle.told.push(lock.clone());
        } else {
            idle.waits = true;
            // What the entry holds while it waits: what it held before the request.
            let held = self
                .world
                .tables
                .get(&node)
                .and_then(|t| t.agent_state(id).into_iter().find(|(n, _)| n.lock == *lock))
                .and_then(|(n, _)| n.state.held());
            self.adopt(id, Some(lock));
            if self.drops {
                self.queued_call(id, lock, mode, &node, held);
            }
        }
        true
    }

    /// The core of idle client `id` takes over (see the module documentation); `pending` is a
    /// lock the table has just queued, which the client was not told it holds.
    pub(super) fn adopt(&mut self, id: &AgentId, pending: Option<&LockId>) {
        let Some(idle) = self.clients.get_mut(id).and_then(|c| c.idle.take()) else {
            return;
        };
        let node = id.node().clone();
        self.world.trace.push(format!("{id} starts its agent"));
        let state = self
            .world
            .tables
            .get(&node)
            .map(|t| t.agent_state(id))
            .unwrap_or_default();
        if !state.is_empty() {
            let locks = state
                .iter()
                .filter_map(|(n, direct)| Some((n.lock.clone(), (*direct)?)))
                .collect();
            let claimed: Vec<LockId> = idle
                .told
                .into_iter()
                .filter(|l| Some(l) != pending)
                .collect();
            let notices = state.into_iter().map(|(n, _)| n).collect();
            self.with_core(id, |c| {
                c.adopt(&node, locks, notices, &claimed)
                    .expect("the table's state is adoptable")
            });
        }
        for msg in idle.kept {
            self.with_core(id, |c| c.receive(msg));
        }
        self.world.unsettled.insert(id.clone());
    }

    /// A message reaches idle client `id`: kept, or (a probe while it waits for nothing)
    /// refuted back to its victim.
    pub(super) fn deliver_idle(&mut self, id: &AgentId, msg: AgentMessage) {
        let idle = self
            .clients
            .get_mut(id)
            .and_then(|c| c.idle.as_mut())
            .expect("idle");
        match msg {
            AgentMessage::Probe(probe) if !idle.waits => {
                if let Some((victim, probe)) = probe.refuted_back() {
                    self.stats.probes += 1;
                    let (from, to) = (End::Agent(id.clone()), End::Agent(victim));
                    self.world
                        .send(from, to, Payload::Agent(AgentMessage::Probe(probe)));
                }
            }
            msg => idle.kept.push(msg),
        }
    }

    /// Ends idle client `id`: its entries in the table are released now.
    pub(super) fn end_idle(&mut self, id: &AgentId) {
        if let Some(c) = self.clients.get_mut(id) {
            c.idle = None;
            c.done = true;
            // Its core never ran; it takes no input from now on either.
            let effects = c.core.end();
            assert!(effects.is_empty(), "an idle client's core sent nothing");
        }
        let request = ServerRequest::RemoveAgent { agent: id.clone() };
        self.admit_as(id.node().clone(), request, Some(id))
            .expect("the client's own node has a table");
    }

    /// Whether client `id` has a request on `lock` (in its core, or, idle, in the table).
    pub fn has_request(&self, id: &AgentId, lock: &LockId) -> bool {
        if self.is_idle(id) {
            return self
                .world
                .tables
                .get(id.node())
                .is_some_and(|t| t.direct_locks_of(id).iter().any(|(l, _, _)| l == lock));
        }
        self.clients[id].core.request_on(lock).is_some()
    }

    /// Releases (or withdraws) client `id`'s request on `lock`: in the table at once when it is
    /// idle, through its core otherwise.
    pub fn unlock(&mut self, id: &AgentId, lock: &LockId) {
        if self.is_idle(id) {
            self.world.trace.push(format!("{id} fast unlock {lock}"));
            let request = ServerRequest::Unlock {
                agent: id.clone(),
                lock: lock.clone(),
            };
            self.admit_as(id.node().clone(), request, Some(id))
                .expect("the client's own node has a table");
            if let Some(idle) = self.clients.get_mut(id).and_then(|c| c.idle.as_mut()) {
                idle.told.retain(|l| l != lock);
            }
            return;
        }
        self.with_core(id, |c| c.unlock(lock).expect("unlock accepted"));
    }

    /// What an idle client's status would be: all its locks (every request was granted at
    /// once) if it has any.
    pub(super) fn idle_status(&self, id: &AgentId) -> TransactionStatus {
        let has = self
            .world
            .tables
            .get(id.node())
            .is_some_and(|t| t.knows(id));
        if has {
            TransactionStatus::HaveAllLocks {
                deadlocks: Vec::new(),
            }
        } else {
            TransactionStatus::NoLocks
        }
    }

    /// What `await_all_locks` returns to an idle client.
    pub(super) fn idle_result(&self, id: &AgentId) -> LockResult {
        let locks = self
            .world
            .tables
            .get(id.node())
            .map(|t| t.direct_locks_of(id))
            .unwrap_or_default()
            .into_iter()
            .map(|(lock, mode, version)| locks_agent::GrantedLock {
                lock,
                mode,
                nodes: [(id.node().clone(), version)].into_iter().collect(),
            })
            .collect();
        LockResult {
            locks,
            deadlocks: Vec::new(),
        }
    }
}
