//! Conversions down ([`AgentCore::convert`]) and what the agent makes of a lock server's
//! refusal ([`AgentCore::on_rejected`]).
//!
//! Invariants:
//! - a request's mode is the agent's direct mode on its lock on every node of the request that
//!   is up and did not refuse it: a conversion lowers the request and sends `Convert` to all of
//!   those nodes at once, and the table takes it whatever the state of the entry there;
//! - until the answer to a conversion of a copy comes, that copy counts for no mode stronger
//!   than the one converted to (`Knowledge::converting_down`): the notices already on their way
//!   describe the entry before the conversion;
//! - a node that refused a request holds nothing of it: a refusal that leaves the server with a
//!   direct lock in another mode than the request's is followed by an `Unlock` there.

use super::{AgentCore, AgentEffect};
use crate::core::error::RequestError;
use locks_core::proto::{Rejection, ServerRequest};
use locks_core::{LockId, Mode, NodeId};
use std::ops::Bound;

impl AgentCore {
    /// Converts a request down to a weaker mode (StickyLocking's S→IS), held or not.
    ///
    /// `Convert` goes to every node of the request that is up and has not refused it, whatever
    /// the agent's entry there: granted, converting up (for a lock on a descendant, or a
    /// stronger lock on the same id), or waiting. The server takes it in every one of these
    /// states and never makes it wait, so the request's mode is lowered at once: from here on
    /// each of those servers has the agent's direct lock in this mode, exactly as the request
    /// says. Sending it only where the request is held would leave the stronger mode pending, or
    /// held, on the other copies, which the client no longer knows about. A request still
    /// pending now waits for the weaker mode (and a `lock` call waiting on it returns once that
    /// is held).
    pub fn convert(&mut self, lock: &LockId, mode: Mode) -> Result<Vec<AgentEffect>, RequestError> {
        self.check_running()?;
        if !self.modes.contains(mode) {
            return Err(RequestError::ModeNotInTable(mode));
        }
        let r = self
            .requests
            .get_mut(lock)
            .ok_or_else(|| RequestError::NoSuchRequest(lock.clone()))?;
        if mode == r.mode || !self.modes.covers(r.mode, mode) {
            return Err(RequestError::NotWeaker {
                lock: lock.clone(),
                held: r.mode,
                requested: mode,
            });
        }
        // A conversion of a request that retreated asks again where it left first (`gate.rs`).
        let mut out = Vec::new();
        if self.retreats.contains_key(lock) || self.busy.contains_key(lock) {
            self.return_through_gate(lock, &mut out);
        }
        let Some(r) = self.requests.get_mut(lock) else {
            return Ok(out);
        };
        r.mode = mode;
        // The client asked for less: what it was told it holds is lowered too, not lost.
        if r.claimed.is_some() {
            r.claimed = Some(mode);
        }
        // A node that refused the request has no direct lock of it to convert.
        let nodes: Vec<NodeId> = r
            .nodes
            .iter()
            .filter(|n| {
                !self.down.contains(*n)
                    && !self.rejected.contains_key(&(lock.clone(), (*n).clone()))
            })
            .cloned()
            .collect();
        self.mark_request(lock);
        for node in nodes {
            // Until the answer, what the agent last heard of this copy may overstate it, and so
            // may what it heard of the ancestors' copies.
            self.knowledge.converting_down(lock, &node, mode);
            self.cap_ancestors(lock, &node);
            let msg = ServerRequest::Convert {
                agent: self.id.clone(),
                lock: lock.clone(),
                mode,
            };
            self.send(&mut out, node, msg);
        }
        self.refresh_status(&mut out);
        Ok(out)
    }

    /// Caps the copies of `lock`'s ancestors on `node`, until the answer to the conversion down
    /// or unlock of `lock` just sent there, at what the server keeps of them once it has
    /// applied it: the group of the agent's request on each ancestor and of the intention modes
    /// of its requests below it, as they are now (see `knowledge/answers.rs`).
    pub(super) fn cap_ancestors(&mut self, lock: &LockId, node: &NodeId) {
        for ancestor in lock.ancestors() {
            let mut cap: Option<Mode> = None;
            let under = self
                .requests
                .range::<LockId, _>((Bound::Included(&ancestor), Bound::Unbounded))
                .take_while(|(l, _)| **l == ancestor || ancestor.is_ancestor_of(l))
                .filter(|(l, r)| r.nodes.contains(node) && !self.left_copy(l, node));
            for (l, r) in under {
                let need = if *l == ancestor {
                    r.mode
                } else {
                    self.modes.intention(r.mode)
                };
                cap = Some(cap.map_or(need, |c| self.modes.group(need, c)));
            }
            self.knowledge.cap_until_answered(ancestor, node, lock, cap);
        }
    }

    /// Takes in a lock server's refusal of a request of this agent (reported as
    /// [`AgentEffect::Rejected`], but for the answer to an unlock and a `TryLock`'s `Busy`, which
    /// say nothing went wrong). What the agent counts as held comes from the server's
    /// notices alone; a refusal says what the server did *not* do:
    /// - a refused lock request (or up-conversion) can never be granted there;
    /// - `NotWeaker` and `ModeNotInTable` (a `Convert` gets them when the server's direct lock
    ///   is not in the mode the agent thinks, or the mode is not in that node's table) leave the
    ///   server with the agent's direct lock in another mode than the request's. The agent
    ///   cannot describe that copy, so it counts the node as having refused the request, as for
    ///   a lock request, and releases the copy: otherwise the server would keep a mode the
    ///   client does not know it holds. The status then says `CannotServe` if the request
    ///   cannot be met without that node, and blocked callers fail naming it;
    /// - `NotHeld`: the server has no direct lock of this agent there. A `Convert` goes only
    ///   where a `Lock` went first on the same ordered channel and was not refused, so this
    ///   means the server lost the agent's entries, which the node monitor reports as that node
    ///   going down (and `node_down` forgets the copy); an `Unlock` is answered so when the lock
    ///   was already gone, or a `TryLock` before it found the copy busy. Nothing to undo.
    ///
    /// A refusal a `Convert` can get also answers the oldest unanswered conversion of that copy.
    pub(super) fn on_rejected(
        &mut self,
        node: NodeId,
        lock: LockId,
        reason: Rejection,
        out: &mut Vec<AgentEffect>,
    ) {
        // A `TryLock` found the copy busy: the gate's business, not the client's (`gate.rs`).
        if reason == Rejection::Busy {
            self.on_busy(node, &lock);
            return;
        }
        let convert_refusal = matches!(
            reason,
            Rejection::NotHeld | Rejection::NotWeaker { .. } | Rejection::ModeNotInTable(_)
        );
        // A refusal answers the oldest of this agent's requests on the copy still unanswered: a
        // conversion, or else an unlock (whose answer says the server had no direct lock).
        let conversion_answered =
            convert_refusal && self.knowledge.conversion_answered(&lock, &node);
        let unlock_answered = convert_refusal
            && !conversion_answered
            && reason == Rejection::NotHeld
            && self.knowledge.unlock_answered(&lock, &node);
        if conversion_answered || unlock_answered {
            self.dirty = true;
            self.mark_tree(&lock);
        }
        // The copy had no entry when the `Unlock` came (a `TryLock` found it busy, or it was
        // gone already): what the unlock was for is done, and nothing the client asked for
        // went wrong.
        if unlock_answered {
            return;
        }
        let names_node = self
            .requests
            .get(&lock)
            .is_some_and(|r| r.nodes.contains(&node))
            && !self.down.contains(&node);
        if names_node && !matches!(reason, Rejection::NotHeld) {
            let release = matches!(
                reason,
                Rejection::NotWeaker { .. } | Rejection::ModeNotInTable(_)
            );
            if let std::collections::btree_map::Entry::Vacant(e) =
                self.rejected.entry((lock.clone(), node.clone()))
            {
                e.insert(reason.clone());
                self.mark_request(&lock);
                if release {
                    let msg = ServerRequest::Unlock {
                        agent: self.id.clone(),
                        lock: lock.clone(),
                    };
                    self.knowledge.unlock_sent(&lock, &node);
                    self.send(out, node.clone(), msg);
                }
            }
        }
        out.push(AgentEffect::Rejected { node, lock, reason });
    }
}
