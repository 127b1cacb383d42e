//! The callers waiting on the core, and the end of the transaction.
//!
//! A blocked `lock` or `await_all_locks` caller is recorded under an opaque [`CallId`] the
//! actor allocates; the core alone decides when it is answered and with what, as an
//! [`AgentEffect::Reply`]:
//! - at [`AgentCore::settle`], every caller when the transaction has all its locks (a `lock`
//!   caller with its lock as granted, an `await_all_locks` caller with the [`LockResult`]), or
//!   fails them all when it cannot be served;
//! - a `lock` caller whose request is withdrawn ([`AgentCore::unlock`]) is cancelled at once;
//! - a caller that goes away ([`AgentCore::withdraw`]: the client dropped the call's future)
//!   is forgotten, and a `lock` caller's request goes back to what it was before the call: a
//!   request the call made is withdrawn as by `unlock`, a mode the call raised is lowered again
//!   as by `convert`. Whatever another call asked for on the same lock since stays: such a
//!   call withdraws nothing;
//! - an abort fails every caller with the deadlock, and [`AgentCore::end`] with
//!   [`CallFailure::Ended`]; a caller that comes after either is failed at once.
//!
//! Each caller is answered exactly once, in the order the callers came.

use super::{AgentCore, AgentEffect, Phase};
use crate::core::error::RequestError;
use crate::core::knowledge::Knowledge;
use crate::core::status::{Deadlock, GrantNodes, GrantedLock, LockResult, TransactionStatus};
use crate::options::Req;
use locks_core::proto::ServerRequest;
use locks_core::{AgentId, LockId, Mode, NodeId};

/// A blocked caller, named by the actor (the core only hands it back in [`AgentEffect::Reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(pub u64);

/// What a waiting caller is answered when it succeeds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// To a `lock` caller: the lock as granted, and the deadlocks resolved so far.
    Locked {
        /// The lock, its mode and each granting node's version.
        granted: GrantedLock,
        /// The deadlocks resolved so far (as in [`LockResult::deadlocks`]).
        deadlocks: Vec<Deadlock>,
    },
    /// To an `await_all_locks` caller: every request as held, and the deadlocks.
    AllLocks(LockResult),
}

/// Why a waiting caller fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallFailure {
    /// Requests can no longer be met: these locks, because of these nodes.
    CannotServe {
        /// The locks.
        locks: Vec<LockId>,
        /// The nodes.
        nodes: Vec<NodeId>,
    },
    /// The lock server of `node` refused the request on `lock`, for `reason` (its requests
    /// cannot be met, as for `CannotServe`).
    Refused {
        /// The lock.
        lock: LockId,
        /// The node.
        node: NodeId,
        /// Why.
        reason: locks_core::proto::Rejection,
    },
    /// The request the caller waited for was withdrawn with `unlock`.
    Cancelled {
        /// The lock.
        lock: LockId,
    },
    /// The transaction aborted to break a deadlock on `lock` at `node`.
    Deadlock {
        /// The lock.
        lock: LockId,
        /// Its node.
        node: NodeId,
    },
    /// The transaction ended.
    Ended,
    /// The call's bounded wait ran out ([`AgentCore::time_out`]): what it asked for was
    /// withdrawn.
    TimedOut {
        /// The lock the call asked for.
        lock: LockId,
        /// The copies of the transaction's requests not held when it gave up (lock and node).
        waited_on: Vec<(LockId, NodeId)>,
        /// The agents it was waiting for there, as far as it knew.
        holders: Vec<AgentId>,
    },
}

/// What a caller waits for.
#[derive(Clone, Debug)]
enum Waiting {
    /// A `lock` call, and what withdrawing it undoes.
    Lock(LockId, Undo),
    All,
}

/// What withdrawing a `lock` caller undoes of its request ([`AgentCore::withdraw`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Undo {
    /// Nothing: the call asked for nothing new, or a later call asked for the lock too.
    Nothing,
    /// The call made the request: withdraw it (`unlock`).
    Remove,
    /// The call raised the request's mode from this one: lower it back (`convert`).
    Lower(Mode),
}

/// The waiting callers, in arrival order, and the abort that fails late ones.
#[derive(Clone, Debug, Default)]
pub(super) struct Callers {
    waiting: Vec<(CallId, Waiting)>,
    aborted: Option<(LockId, NodeId)>,
}

impl Callers {
    /// The lock `lock` caller `call` waits for, if it waits.
    pub(super) fn waiting_lock(&self, call: CallId) -> Option<&LockId> {
        self.waiting.iter().find_map(|(c, w)| match w {
            Waiting::Lock(lock, _) if *c == call => Some(lock),
            _ => None,
        })
    }
}

impl AgentCore {
    /// [`AgentCore::request`], with a `lock` caller `call` that waits until the transaction
    /// has all its locks. A refused request records no caller: the error is its answer.
    pub fn lock_and_wait(
        &mut self,
        call: CallId,
        lock: LockId,
        mode: Mode,
        nodes: &[NodeId],
        req: Req,
    ) -> Result<Vec<AgentEffect>, RequestError> {
        let before = self
            .requests
            .get(&lock)
            .map(|r| (r.mode, r.nodes.clone(), r.req));
        let out = self.request(lock.clone(), mode, nodes, req)?;
        let after = &self.requests[&lock];
        let undo = match before {
            None => Undo::Remove,
            Some((m, n, q)) if m != after.mode && n == after.nodes && q == after.req => {
                Undo::Lower(m)
            }
            // Nothing new, or more nodes or a stronger requirement: those stay.
            Some(_) => Undo::Nothing,
        };
        self.callers.waiting.push((call, Waiting::Lock(lock, undo)));
        Ok(out)
    }

    /// [`AgentCore::lock_and_wait`] for a request the node's fast path queued just before this
    /// agent took the transaction over (`AgentCore::adopt` has it already): `held` is the mode
    /// its entry on the lock held before (the table's `Converting` state), `None` if it waited
    /// for a new grant. Withdrawing the call lowers the request back to `held`, or withdraws
    /// it. (`held` may include the intention modes of requests on descendants, which the entry
    /// held anyway.)
    pub fn lock_and_wait_queued(
        &mut self,
        call: CallId,
        lock: LockId,
        mode: Mode,
        nodes: &[NodeId],
        held: Option<Mode>,
    ) -> Result<Vec<AgentEffect>, RequestError> {
        let out = self.request(lock.clone(), mode, nodes, Req::All)?;
        let undo = match held {
            None => Undo::Remove,
            Some(held) if self.requests[&lock].mode != held => Undo::Lower(held),
            Some(_) => Undo::Nothing,
        };
        self.callers.waiting.push((call, Waiting::Lock(lock, undo)));
        Ok(out)
    }

    /// The caller `call` went away (the client dropped the call's future) without its answer:
    /// it is forgotten, and what it asked for is undone (module documentation), with the effects
    /// of `unlock` or `convert`: the lock servers are told, and the deadlock detection forgets
    /// the wait. A caller already answered (or never recorded) changes nothing: a grant that
    /// came first stays, claimed and reported. Returns the lock whose request was withdrawn
    /// whole, if one was.
    pub fn withdraw(&mut self, call: CallId) -> (Option<LockId>, Vec<AgentEffect>) {
        let Some(i) = self.callers.waiting.iter().position(|(c, _)| *c == call) else {
            return (None, Vec::new());
        };
        let (_, waiting) = self.callers.waiting.remove(i);
        match waiting {
            Waiting::Lock(lock, Undo::Remove) => {
                let out = self.unlock(&lock).unwrap_or_default();
                (Some(lock), out)
            }
            Waiting::Lock(lock, Undo::Lower(mode)) => {
                (None, self.convert(&lock, mode).unwrap_or_default())
            }
            Waiting::Lock(_, Undo::Nothing) | Waiting::All => (None, Vec::new()),
        }
    }

    /// Another request on `lock` was made: the `lock` callers waiting for it no longer undo
    /// anything when withdrawn (what they asked for is asked again).
    pub(super) fn asked_again(&mut self, lock: &LockId) {
        for (_, waiting) in &mut self.callers.waiting {
            if let Waiting::Lock(l, undo) = waiting
                && l == lock
            {
                *undo = Undo::Nothing;
            }
        }
    }

    /// Records an `await_all_locks` caller, answered at a later [`AgentCore::settle`] (or
    /// failed at once if the transaction aborted or ended).
    pub fn await_all(&mut self, call: CallId) -> Vec<AgentEffect> {
        match self.phase {
            Phase::Running => {
                self.callers.waiting.push((call, Waiting::All));
                Vec::new()
            }
            Phase::Aborted | Phase::Ended => vec![AgentEffect::Reply {
                call,
                result: Err(self.stopped_failure()),
            }],
        }
    }

    /// Ends the transaction: the waiting callers fail, then `RemoveAgent` goes to every node
    /// the agent sent anything to, and every probe it holds goes back to its victim refuted.
    /// The core accepts nothing afterwards (a probe is sent back refuted); a second `end` does
    /// nothing.
    pub fn end(&mut self) -> Vec<AgentEffect> {
        let mut out = Vec::new();
        if self.phase == Phase::Ended {
            return out;
        }
        self.phase = Phase::Ended;
        self.fail_callers(CallFailure::Ended, &mut out);
        out.extend(std::mem::take(&mut self.contacted).into_iter().map(|node| {
            AgentEffect::ToServer {
                node,
                request: ServerRequest::RemoveAgent {
                    agent: self.id.clone(),
                },
            }
        }));
        self.bounce_held_probes(&mut out);
        self.requests.clear();
        self.knowledge = Knowledge::default();
        self.probes = super::probe::Probes::default();
        self.clear_status();
        self.status = TransactionStatus::NoLocks;
        out
    }

    /// The transaction aborts on the deadlock on `lock` at `node`: every caller fails.
    pub(super) fn abort_callers(
        &mut self,
        lock: &LockId,
        node: &NodeId,
        out: &mut Vec<AgentEffect>,
    ) {
        self.callers.aborted = Some((lock.clone(), node.clone()));
        let failure = self.stopped_failure();
        self.fail_callers(failure, out);
    }

    /// The request on `lock` was withdrawn: its `lock` callers will never be granted it.
    pub(super) fn cancel_callers(&mut self, lock: &LockId, out: &mut Vec<AgentEffect>) {
        self.callers
            .waiting
            .retain(|(call, waiting)| match waiting {
                Waiting::Lock(l, _) if l == lock => {
                    out.push(AgentEffect::Reply {
                        call: *call,
                        result: Err(CallFailure::Cancelled { lock: lock.clone() }),
                    });
                    false
                }
                _ => true,
            });
    }

    /// Answers every caller when the transaction has all its locks or cannot be served. A
    /// `lock` caller gets only the deadlocks' locks; the whole [`LockResult`] (one entry per
    /// request) is built only for `await_all_locks` callers, once per answer.
    pub(super) fn answer_callers(&mut self, out: &mut Vec<AgentEffect>) {
        if self.callers.waiting.is_empty() {
            return;
        }
        match &self.status {
            TransactionStatus::HaveAllLocks { deadlocks } => {
                let waiting = std::mem::take(&mut self.callers.waiting);
                // One entry per request: built once, and moved to the last caller rather than
                // copied (a transaction of a million locks would hold it twice).
                let last_all = waiting.iter().rposition(|(_, w)| matches!(w, Waiting::All));
                let mut all = None;
                for (i, (call, waiting)) in waiting.into_iter().enumerate() {
                    let answer = match waiting {
                        Waiting::Lock(lock, _) => Answer::Locked {
                            granted: self.granted_or_requested(lock),
                            deadlocks: deadlocks.clone(),
                        },
                        Waiting::All => {
                            let result = all.get_or_insert_with(|| {
                                self.lock_result().unwrap_or_else(|| LockResult {
                                    locks: Vec::new(),
                                    deadlocks: deadlocks.clone(),
                                })
                            });
                            Answer::AllLocks(if Some(i) == last_all {
                                std::mem::take(result)
                            } else {
                                result.clone()
                            })
                        }
                    };
                    out.push(AgentEffect::Reply {
                        call,
                        result: Ok(answer),
                    });
                }
            }
            TransactionStatus::CannotServe { locks, nodes } => {
                let failure =
                    self.refusal_among(locks, nodes)
                        .unwrap_or_else(|| CallFailure::CannotServe {
                            locks: locks.clone(),
                            nodes: nodes.clone(),
                        });
                self.fail_callers(failure, out);
            }
            TransactionStatus::NoLocks | TransactionStatus::Waiting => {}
        }
    }

    /// Every request is held when this is asked (a withdrawn one's caller was cancelled with
    /// it); the fallback only keeps the answer total.
    fn granted_or_requested(&self, lock: LockId) -> GrantedLock {
        match self.granted_lock(&lock) {
            Some(granted) => granted,
            None => GrantedLock {
                mode: self.request_on(&lock).map_or(Mode::IS, |r| r.mode),
                lock,
                nodes: GrantNodes::new(),
            },
        }
    }

    /// A lock server's refusal of one of `locks` at one of `nodes`, if that is why they cannot
    /// be served: the callers are told the server's reason rather than only its name.
    fn refusal_among(&self, locks: &[LockId], nodes: &[NodeId]) -> Option<CallFailure> {
        self.rejected
            .iter()
            .find(|((lock, node), _)| locks.contains(lock) && nodes.contains(node))
            .map(|((lock, node), reason)| CallFailure::Refused {
                lock: lock.clone(),
                node: node.clone(),
                reason: reason.clone(),
            })
    }

    fn fail_callers(&mut self, failure: CallFailure, out: &mut Vec<AgentEffect>) {
        for (call, _) in self.callers.waiting.drain(..) {
            out.push(AgentEffect::Reply {
                call,
                result: Err(failure.clone()),
            });
        }
    }

    fn stopped_failure(&self) -> CallFailure {
        match &self.callers.aborted {
            Some((lock, node)) => CallFailure::Deadlock {
                lock: lock.clone(),
                node: node.clone(),
            },
            None => CallFailure::Ended,
        }
    }
}
