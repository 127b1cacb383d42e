//! The fast path: a transaction's local locks taken and released on the caller's thread.
//!
//! A transaction has no agent actor until it needs one. While it has none, a `lock` (or
//! `lock_nowait`, `lock_objects`) on its own node with the default requirement is applied to
//! the node's table at once, on the caller's thread ([`LocalTable::fast_lock`]): the same `Lock`
//! request the agent would send, decided by the same function of the table, so FIFO, hierarchy
//! and fencing versions are the table's as for any request. When it is granted, the call
//! returns the grant with no actor hop and no wake-up of another thread. `unlock` and `end`
//! release the same way, and `status`, `await_all_locks` and `lock_state` read the table.
//!
//! The agent actor starts (`Transaction::start_agent`) at the first request that is not
//! granted at once (it stays queued in the table, exactly as if the agent had sent it), that
//! names another node or another requirement, that comes during the node's start-delay, or at
//! the first call that needs the agent (events, watches, conversions, options, surrenders).
//! It adopts the state the table gives the transaction (`LocalTable::agent_state`, read
//! from the shards of the table its fast path used, which are all it has anything in), taken
//! in by `AgentCore::adopt`: its requests, one notice per entry, the locks the client was told
//! it holds. Then the router hands it, in order, every message that came for the transaction
//! while it had no actor.
//!
//! **Why every guarantee holds.** The agent that starts late is in the state an agent that had
//! run from the start would be in after the same requests, having handled the table's notices
//! late: nothing is lost, since (1) its requests were applied by the table in the same order,
//! (2) what the table said to it is re-read from the table, at versions at least as new, and
//! (3) every message other agents sent it was kept by the router ([`Router::attach_agent`]).
//! Messages may reach an agent arbitrarily late in the agent protocol, so deadlock resolution
//! (`core/agent/resolve.rs`) is unaffected: a transaction with no actor waits for nothing and is
//! in no cycle (a probe through it is refuted, as through an agent that ended, until the table
//! queues one of its requests); from the moment the table queues one, everything it is sent is
//! kept for the actor that starts right after. A transaction whose locks were all granted on
//! the fast path is lost only by its own end: a holder is never surrendered while it waits for
//! nothing, and its locks are on its own node, so no node down or lease applies to them.

use super::Transaction;
use crate::actor::{Adopt, Agent, Subscribe};
use crate::core::agent::status_without_agent;
use crate::core::{GrantNodes, GrantedLock, LockResult, RequestError, TransactionStatus};
use crate::core::{LockState, Locked};
use crate::error::Error;
use actix::prelude::*;
use locks_core::{LockId, Mode};
use locks_server::embed::{FastLock, NodeInternals};
use std::sync::PoisonError;

/// What the fast path did with a lock request.
pub(crate) enum Fast {
    /// Decided on the caller's thread: granted, or refused.
    Done(Result<Locked, Error>),
    /// The agent takes it from here: send it the request (the lock, given back), and, when
    /// the table queued it just now, the mode its entry held before ([`Queued`]).
    Agent(Addr<Agent>, LockId, Queued),
}

/// Whether the fast path queued a request before handing it to the agent, and if so the mode
/// the transaction's entry on the lock held before (`None`: it held nothing there). A `lock`
/// call's withdrawal goes back to that (`AgentCore::lock_and_wait_queued`).
pub(crate) type Queued = Option<Option<Mode>>;

impl Transaction {
    /// Tries `lock` in `mode` on this node on the caller's thread, if the transaction has no
    /// agent; otherwise (or if it must wait) returns the agent to send the request to. Takes the
    /// lock id by value: a grant or a refusal moves it into the answer (a clone and a drop of
    /// its reference count fewer per fast-path lock).
    pub(crate) fn try_fast(&self, lock: LockId, mode: Mode) -> Fast {
        let mut agent = self.agent.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(addr) = &*agent {
            return Fast::Agent(addr.clone(), lock, None);
        }
        if !self.node.modes().contains(mode) {
            return Fast::Done(Err(RequestError::ModeNotInTable(mode).into()));
        }
        // The agent's copy of the node's name (see `Node::next_agent_id`): cloned on this
        // thread's own counter.
        let here = self.id().node();
        match self
            .node
            .local_table()
            .fast_lock(&self.presence, &lock, mode, &self.touched)
        {
            FastLock::Granted { mode, version } => Fast::Done(Ok(Locked {
                granted: GrantedLock {
                    lock,
                    mode,
                    nodes: GrantNodes::one(here.clone(), version),
                },
                deadlocks: Vec::new(),
            })),
            FastLock::Rejected(reason) => Fast::Done(Err(RequestError::Refused {
                lock,
                node: here.clone(),
                reason,
            }
            .into())),
            FastLock::Stopped => Fast::Done(Err(Error::Ended)),
            FastLock::Queued => {
                let (addr, held) = self.start_agent(&mut agent, Some(&lock));
                Fast::Agent(addr, lock, Some(held))
            }
            FastLock::NotNow => Fast::Agent(self.start_agent(&mut agent, None).0, lock, None),
        }
    }

    /// Starts the agent actor if the transaction has none yet (see the module documentation).
    /// `pending` is a lock just queued by the fast path, which the client was not told it holds;
    /// returned with the agent is the mode the transaction's entry there holds while it waits
    /// (what it held before the request).
    pub(crate) fn start_agent(
        &self,
        agent: &mut Option<Addr<Agent>>,
        pending: Option<&LockId>,
    ) -> (Addr<Agent>, Option<Mode>) {
        if let Some(addr) = &*agent {
            return (addr.clone(), None);
        }
        let here = self.node.id().clone();
        let state = self
            .node
            .local_table()
            .agent_state(self.id(), &self.touched);
        let mut locks = Vec::new();
        let mut claimed = Vec::new();
        let mut notices = Vec::with_capacity(state.len());
        let mut held_before = None;
        for (notice, direct) in state {
            if let Some(mode) = direct {
                locks.push((notice.lock.clone(), mode));
                if Some(&notice.lock) != pending {
                    claimed.push(notice.lock.clone());
                } else {
                    held_before = notice.state.held();
                }
            }
            notices.push(notice);
        }
        // Before the agent can send anything: its removal reaches the fast path's shards too.
        self.node
            .local_table()
            .agent_started(&self.presence, &self.touched);
        let router = self.node.router().clone();
        let agent_router = router.for_transaction(&self.presence);
        let (modes, options, outcome) = (
            self.node.modes().clone(),
            self.options.clone(),
            self.outcome().clone(),
        );
        let make = move |_: &mut Context<Agent>| Agent::new(agent_router, modes, options, outcome);
        // An agent started because the fast path queued a request (`pending`) on the node's
        // thread (a client task there) starts here, so its waiting request is served without a
        // hop through the node's arbiter. Other agents go through the arbiter: measured on W6,
        // agents of transactions whose first request names other nodes run slower when started
        // in place.
        let addr = if pending.is_some() && self.node.is_node_thread() {
            Agent::create(make)
        } else {
            Agent::start_in_arbiter(self.node.arbiter(), make)
        };
        // First in the mailbox: the deferred subscribers hear everything the agent reports.
        for tx in self
            .deferred
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            addr.do_send(Subscribe(tx));
        }
        if !locks.is_empty() {
            addr.do_send(Adopt {
                node: here,
                locks,
                notices,
                claimed,
            });
        }
        // After the adoption: the messages kept for the transaction follow it in the mailbox.
        router.attach_agent(&self.presence, addr.clone().recipient());
        *agent = Some(addr.clone());
        (addr, held_before)
    }

    /// The transaction's locks as `await_all_locks` reports them, if it has no agent and has
    /// locks (all held, then).
    pub(crate) fn fast_result(&self) -> Option<LockResult> {
        let agent = self.agent.lock().unwrap_or_else(PoisonError::into_inner);
        if agent.is_some() {
            return None;
        }
        let here = self.node.id();
        let locks: Vec<GrantedLock> = self
            .node
            .local_table()
            .direct_locks_of(self.id(), &self.touched)
            .into_iter()
            .map(|(lock, mode, version)| GrantedLock {
                lock,
                mode,
                nodes: GrantNodes::one(here.clone(), version),
            })
            .collect();
        (!locks.is_empty()).then(|| LockResult {
            locks,
            deadlocks: Vec::new(),
        })
    }

    /// The status, if the transaction has no agent (`status_without_agent` says which).
    pub(crate) fn fast_status(&self) -> Option<TransactionStatus> {
        let agent = self.agent.lock().unwrap_or_else(PoisonError::into_inner);
        if agent.is_some() {
            return None;
        }
        let has_locks = self.node.local_table().knows(self.id(), &self.touched);
        Some(status_without_agent(has_locks))
    }

    /// Releases `lock` on the fast path, if the transaction has no agent.
    pub(crate) fn fast_unlock(&self, lock: &LockId) -> Option<Result<(), Error>> {
        let agent = self.agent.lock().unwrap_or_else(PoisonError::into_inner);
        if agent.is_some() {
            return None;
        }
        Some(
            self.node
                .local_table()
                .unlock(&self.presence, lock)
                .map_err(|_| RequestError::NoSuchRequest(lock.clone()).into()),
        )
    }

    /// Where `lock` stands, if the transaction has no agent.
    pub(crate) fn fast_lock_state(&self, lock: &LockId) -> Option<LockState> {
        let agent = self.agent.lock().unwrap_or_else(PoisonError::into_inner);
        if agent.is_some() {
            return None;
        }
        let held = self.node.local_table().holds(self.id(), lock);
        Some(match held {
            Some((mode, version)) => LockState::Held(GrantedLock {
                lock: lock.clone(),
                mode,
                nodes: GrantNodes::one(self.node.id().clone(), version),
            }),
            None => LockState::NotRequested,
        })
    }

    /// Ends the transaction: releases its locks in this node's table now and, if it has an
    /// agent, tells it to stop, which releases them on every node it used.
    pub(crate) fn finish(&mut self) {
        // `&mut`: the end and the drop own the transaction, so no call can race this one and
        // the agent's slot is read without locking its mutex (two atomic operations fewer).
        let agent = self
            .agent
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match agent {
            None => {
                // Ended for the router first: the release tells the transaction nothing it
                // needs.
                self.node.router().end_transaction(&self.presence);
                self.node
                    .local_table()
                    .release(&self.presence, &self.touched);
            }
            // The agent releases everything its core contacted (this node's table included:
            // `AgentCore::adopt` counts it) when it stops; unregistered first, so that messages
            // to it fail once `end` returns. This node's locks (in the shards its fast path and
            // its messages used so far) are released here as well, before
            // the agent's turn: a waiter on a busy node would otherwise wait for every message
            // queued before `End` in the agent's mailbox (W4 lost a third of its rate to that).
            // The agent's own release comes after whatever it sent before, so a request that
            // reaches the table after this release is released then; releasing twice is a no-op.
            Some(addr) => {
                self.node.router().end_transaction(&self.presence);
                self.node
                    .local_table()
                    .release_started(&self.presence, &self.touched);
                addr.do_send(crate::actor::End);
            }
        }
    }
}
