//! Surrendering a held lock to a waiter of the client's choosing (the Erlang original's
//! `surrender_nowait/4`).
//!
//! The client names a lock its transaction holds, the agent it wants to let in, and nodes.
//! Whether the transaction holds the lock on each node is the agent's own knowledge, checked at
//! once ([`SurrenderRefusal::NotHeld`], nothing sent). Whether the other agent waits there only
//! the lock server knows for sure (a copy may be older than the queue), so each listed server gets a [`ServerRequest::SurrenderTo`] and decides: it either
//! requeues this agent's entries on the lock and its descendants behind the waiters (the
//! notices carry [`Note::SurrenderedTo`]) or refuses and changes nothing. Either way the agent's
//! knowledge follows the server's notices, so it stays consistent with the table; the request
//! stays, so the transaction is waiting again until the lock comes back.
//!
//! Invariants: at most one surrender to a waiter per `(lock, node)` is outstanding; each is
//! answered exactly once, by [`AgentEffect::SurrenderAnswered`]: applied, refused, or the node
//! went down first. A refusal is not a refusal of the lock request (the request keeps its
//! grant and is never counted as unservable for it).

use super::{AgentCore, AgentEffect};
use crate::core::error::{RequestError, SurrenderRefusal};
use locks_core::proto::{AgentMessage, Note, Rejection, ServerRequest};
use locks_core::{AgentId, LockId, NodeId};
use std::collections::BTreeMap;

/// The surrenders sent and not answered yet, with the agent each was for.
#[derive(Clone, Debug, Default)]
pub(super) struct Surrendering(BTreeMap<(LockId, NodeId), AgentId>);

impl AgentCore {
    /// Surrenders `lock` on each of `nodes` to `to`, which must be waiting (or converting)
    /// there: a [`ServerRequest::SurrenderTo`] goes to each node, whose server checks that
    /// `to` waits and requeues this agent's entries on the lock and its descendants behind the
    /// waiters. The request stays, pending again once the servers have done it. Each node's
    /// answer comes as [`AgentEffect::SurrenderAnswered`].
    ///
    /// Refused at once, with nothing sent, when the transaction has no request on `lock`, or
    /// does not hold it on one of `nodes` (as far as its servers have told it), or a surrender
    /// of it there is still under way.
    pub fn surrender_to(
        &mut self,
        lock: &LockId,
        to: &AgentId,
        nodes: &[NodeId],
    ) -> Result<Vec<AgentEffect>, RequestError> {
        self.check_running()?;
        if nodes.is_empty() {
            return Err(RequestError::NoNodes { lock: lock.clone() });
        }
        let r = self
            .requests
            .get(lock)
            .ok_or_else(|| RequestError::NoSuchRequest(lock.clone()))?;
        let mut nodes = nodes.to_vec();
        nodes.sort();
        nodes.dedup();
        let refuse = |node: &NodeId, why| RequestError::CannotSurrender {
            lock: lock.clone(),
            to: to.clone(),
            node: node.clone(),
            why,
        };
        for node in &nodes {
            let held = r.nodes.contains(node)
                && !self.down.contains(node)
                && r.held_on(&self.modes, &self.knowledge, node);
            if !held {
                return Err(refuse(node, SurrenderRefusal::NotHeld));
            }
            if self
                .surrendering
                .0
                .contains_key(&(lock.clone(), node.clone()))
            {
                return Err(refuse(node, SurrenderRefusal::Pending));
            }
        }
        let mut out = Vec::new();
        for node in nodes {
            self.surrendering
                .0
                .insert((lock.clone(), node.clone()), to.clone());
            let msg = ServerRequest::SurrenderTo {
                agent: self.id.clone(),
                lock: lock.clone(),
                to: to.clone(),
            };
            self.send(&mut out, node, msg);
        }
        Ok(out)
    }

    /// Notes a server's answer to an outstanding surrender to a waiter. Returns whether the
    /// message is used up (a refusal of it, which must not count as a refusal of the lock);
    /// a notice goes on to be taken in as usual.
    pub(super) fn on_surrender_answer(
        &mut self,
        msg: &AgentMessage,
        out: &mut Vec<AgentEffect>,
    ) -> bool {
        let (node, lock, refused, used_up) = match msg {
            AgentMessage::Notice(n) => match n.note.as_deref() {
                Some(Note::SurrenderedTo { agent, .. }) if *agent == self.id => {
                    (&n.node, &n.lock, None, false)
                }
                _ => return false,
            },
            AgentMessage::Rejected { node, lock, reason } => match reason {
                Rejection::SurrenderNotHeld { .. } => {
                    (node, lock, Some(SurrenderRefusal::NotHeld), true)
                }
                Rejection::NotWaiting { .. } => {
                    (node, lock, Some(SurrenderRefusal::NotWaiting), true)
                }
                _ => return false,
            },
            _ => return false,
        };
        if let Some(to) = self.surrendering.0.remove(&(lock.clone(), node.clone())) {
            out.push(AgentEffect::SurrenderAnswered {
                lock: lock.clone(),
                node: node.clone(),
                to,
                refused,
            });
        }
        used_up
    }

    /// The server of `node` went down: its outstanding surrenders will never be answered.
    pub(super) fn fail_surrenders(&mut self, node: &NodeId, out: &mut Vec<AgentEffect>) {
        let gone: Vec<(LockId, NodeId)> = self
            .surrendering
            .0
            .keys()
            .filter(|(_, n)| n == node)
            .cloned()
            .collect();
        for key in gone {
            if let Some(to) = self.surrendering.0.remove(&key) {
                out.push(AgentEffect::SurrenderAnswered {
                    lock: key.0,
                    node: key.1,
                    to,
                    refused: Some(SurrenderRefusal::NodeDown),
                });
            }
        }
    }
}
