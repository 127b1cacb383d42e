//! What the client is told it holds: a request is *claimed* once the transaction reported
//! "have all locks" while it existed, and the client is told of it with its fencing versions
//! ([`AgentEffect::Granted`]). A claimed request no longer held in the claimed mode (a node down or
//! its lease expired, a surrender, a grant taken back) is reported lost ([`AgentEffect::Lost`]) and
//! unclaimed, so that a later grant is reported again with its new versions. Asking for more
//! keeps the claim on what is held; converting down lowers it. Losses are found while the
//! status is evaluated (`have_all.rs`, `evaluate_stale`) and reported at the end of that refresh
//! (`report_losses`, here).

use super::have_all::held_on;
use super::{AgentCore, AgentEffect};
use crate::core::error::RequestError;
use crate::core::requests::LockRequest;
use crate::core::status::{GrantNodes, GrantedLock, LockResult, LossCause, LostLock};
use crate::options::Req;
use locks_core::proto::{AgentMessage, LockNotice};
use locks_core::{LockId, Mode, NodeId};
use std::collections::BTreeSet;

impl AgentCore {
    /// Takes over a transaction whose first locks the fast path of `node` granted before the
    /// agent existed: `locks` are its direct locks there (lock and mode), `notices` what the
    /// table says of each of its entries now (`LockTable::agent_state`), and `claimed` the
    /// locks the client was told it holds. Afterwards the core is in the state it would have
    /// reached had it sent those requests itself and received those notices, with those locks
    /// claimed (so that their loss is reported).
    ///
    /// Nothing is sent: the table has the requests already. (Sending them again would be
    /// answered with notices at versions the agent may have seen in forwarded views since, and
    /// a holder's notice carries no queue: taken as current, it would hide who waits.)
    pub fn adopt(
        &mut self,
        node: &NodeId,
        locks: Vec<(LockId, Mode)>,
        notices: Vec<LockNotice>,
        claimed: &[LockId],
    ) -> Result<Vec<AgentEffect>, RequestError> {
        self.check_running()?;
        let claimed: BTreeSet<&LockId> = claimed.iter().collect();
        for (lock, mode) in locks {
            if !self.modes.contains(mode) {
                return Err(RequestError::ModeNotInTable(mode));
            }
            if self.requests.contains_key(&lock) {
                continue;
            }
            if !claimed.contains(&lock) {
                self.unclaimed.push(lock.clone());
            }
            self.mark_request(&lock);
            let request = LockRequest {
                lock: lock.clone(),
                mode,
                nodes: smallvec::smallvec![node.clone()],
                req: Req::All,
                // Claimed once the notices say it is held (below).
                claimed: None,
            };
            self.requests.insert(lock, request);
        }
        self.contacted.insert(node.clone());
        let mut out = Vec::new();
        for notice in notices {
            out.extend(self.receive(AgentMessage::Notice(notice)));
        }
        for lock in claimed {
            // Whether it is held, without building the grant a client would be told of.
            let held = self
                .requests
                .get(lock)
                .is_some_and(|r| r.is_held(&self.modes, &self.knowledge, &self.down));
            if let Some(r) = self.requests.get_mut(lock)
                && r.claimed.is_none()
            {
                if held {
                    r.claimed = Some(r.mode);
                } else {
                    self.unclaimed.push(lock.clone());
                }
            }
        }
        self.refresh_status(&mut out);
        Ok(out)
    }

    /// What `await_all_locks` returns: `Some` when the transaction has all its locks.
    pub fn lock_result(&self) -> Option<LockResult> {
        if !self.status.have_all_locks() {
            return None;
        }
        let locks = self.requests.values().map(|r| self.grant_of(r)).collect();
        Some(LockResult {
            locks,
            deadlocks: self.knowledge.deadlocks().to_vec(),
        })
    }

    /// The request on `lock` as held now, with the version of every node that holds it, if it
    /// is held by its requirement.
    pub fn granted_lock(&self, lock: &LockId) -> Option<GrantedLock> {
        let r = self.requests.get(lock)?;
        r.is_held(&self.modes, &self.knowledge, &self.down)
            .then(|| self.grant_of(r))
    }

    /// The claimed requests, with the mode the client was told (what an abort takes away).
    pub fn claimed(&self) -> impl Iterator<Item = (&LockId, Mode)> {
        self.requests
            .values()
            .filter_map(|r| Some((&r.lock, r.claimed?)))
    }

    /// Whether [`AgentCore::claimed_remote_nodes`] names any node.
    pub fn relies_on_remote(&self, local: &NodeId) -> bool {
        self.contacted
            .iter()
            .any(|n| n != local && !self.down.contains(n))
    }

    /// The nodes this agent relies on for a lock the client was told it holds, other than
    /// `local`, each once: the nodes whose lease the actor checks before answering.
    pub fn claimed_remote_nodes(&self, local: &NodeId) -> BTreeSet<NodeId> {
        self.contacted
            .iter()
            .filter(|n| *n != local && !self.down.contains(*n))
            .cloned()
            .collect()
    }

    fn grant_of(&self, r: &LockRequest) -> GrantedLock {
        // Sized by the request's nodes: collecting the filtered iterator would reserve room
        // for four, and this list is built for every lock of the transaction.
        let mut nodes = GrantNodes::with_capacity(r.nodes.len());
        nodes.extend(
            r.held_nodes(&self.modes, &self.knowledge, &self.down)
                .map(|n| {
                    let v = self.knowledge.entry_version(&r.lock, n).unwrap_or(0);
                    (n.clone(), v)
                }),
        );
        GrantedLock {
            lock: r.lock.clone(),
            mode: r.mode,
            nodes,
        }
    }

    /// Tells the client of every claimed request found no longer held in its claimed mode, and
    /// makes it unclaimed: a later grant is a new one, reported with its new versions.
    pub(super) fn report_losses(&mut self, out: &mut Vec<AgentEffect>) {
        for lock in std::mem::take(&mut self.losses) {
            let Some(r) = self.requests.get_mut(&lock) else {
                continue;
            };
            let Some(mode) = r.claimed.take() else {
                continue;
            };
            self.unclaimed.push(lock.clone());
            let r = &self.requests[&lock];
            let nodes: Vec<NodeId> = r
                .nodes
                .iter()
                .filter(|n| {
                    self.down.contains(*n) || !held_on(&self.modes, &self.knowledge, &lock, mode, n)
                })
                .cloned()
                .collect();
            let cause = self.loss_cause(&lock, &nodes);
            out.push(AgentEffect::Lost(LostLock {
                lock,
                mode,
                nodes,
                cause,
            }));
        }
    }

    /// Why a claimed lock is no longer held on `nodes`: a node down (or its lease), else a
    /// surrender of it or of an ancestor, else the server took it back.
    fn loss_cause(&self, lock: &LockId, nodes: &[NodeId]) -> LossCause {
        if let Some(cause) = nodes.iter().find_map(|n| self.down_causes.get(n)) {
            return *cause;
        }
        let surrendered = nodes.iter().any(|n| {
            self.knowledge.is_suspended(lock, n)
                || lock.ancestors().any(|a| self.knowledge.is_suspended(&a, n))
        });
        if surrendered {
            LossCause::Surrendered
        } else {
            LossCause::Revoked
        }
    }

    /// The transaction aborts: every claimed lock is reported lost, before the abort itself.
    pub(super) fn report_abort_losses(&mut self, out: &mut Vec<AgentEffect>) {
        for r in self.requests.values_mut() {
            if let Some(mode) = r.claimed.take() {
                out.push(AgentEffect::Lost(LostLock {
                    lock: r.lock.clone(),
                    mode,
                    nodes: r.nodes.to_vec(),
                    cause: LossCause::Aborted,
                }));
            }
        }
    }
}
