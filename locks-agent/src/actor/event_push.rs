//! What the agent pushes to its client: status changes, grants and losses
//! ([`crate::Transaction::events`], [`crate::Transaction::lost`],
//! [`crate::Transaction::lock_state`]), and the lease check that comes before any answer.
//!
//! Invariants: every event the core reports goes to every live subscription, in the core's
//! order; `lost` holds exactly the claimed locks whose loss was reported and that have not been
//! granted again since, so a `lost()` call made after the loss still sees it.

use super::Agent;
use crate::core::LockState;
use crate::core::{LostLock, TransactionEvent};
use crate::error::Error;
use actix::prelude::*;
use futures::channel::{mpsc, oneshot};
use locks_core::LockId;
use locks_server::lease::Lease;
use std::collections::BTreeMap;

/// The client's subscriptions and the losses not made good yet.
#[derive(Default)]
pub(crate) struct Events {
    subscribers: Vec<mpsc::UnboundedSender<TransactionEvent>>,
    lost: BTreeMap<LockId, LostLock>,
    lost_waiters: Vec<oneshot::Sender<Result<LostLock, Error>>>,
}

impl Events {
    /// Passes one event on, and keeps the losses up to date.
    pub(crate) fn publish(&mut self, event: TransactionEvent) {
        match &event {
            TransactionEvent::Granted(granted) => {
                self.lost.remove(&granted.lock);
            }
            TransactionEvent::Lost(lost) => {
                self.lost.insert(lost.lock.clone(), lost.clone());
                for waiter in self.lost_waiters.drain(..) {
                    let _ = waiter.send(Ok(lost.clone()));
                }
            }
            TransactionEvent::Status(_) => {}
        }
        if !self.subscribers.is_empty() {
            self.subscribers
                .retain(|s| s.unbounded_send(event.clone()).is_ok());
        }
    }

    /// A lock given up by the client is no longer "lost".
    pub(crate) fn forget(&mut self, lock: &LockId) {
        self.lost.remove(lock);
    }
}

impl Agent {
    /// Checks this node's lease on every remote node the agent relies on, before anything is
    /// answered (`AgentCore::check_leases` decides). Part of every settle round.
    pub(super) fn check_leases(&mut self, ctx: &mut Context<Self>) {
        let router = &self.guard.router;
        // A link that ended (or is gone from the router) is a node down whose news is on its
        // way; asking whether the node is still reachable instead raced with the link's end,
        // which ends its lease before the router forgets the node.
        let effects = self.core.check_leases(router.node(), |node| {
            if router.lease_valid(node) {
                Lease::Valid
            } else if router.lease_ran_out(node) {
                Lease::RanOut
            } else {
                Lease::Ended
            }
        });
        self.execute(effects, ctx);
    }
}

/// Subscribe to the transaction's events.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Subscribe(pub mpsc::UnboundedSender<TransactionEvent>);

impl Handler<Subscribe> for Agent {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, _ctx: &mut Self::Context) {
        self.events.subscribers.push(msg.0);
    }
}

/// Answer with the first claimed lock lost and not granted again (at once if there is one).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct AwaitLost(pub oneshot::Sender<Result<LostLock, Error>>);

impl Handler<AwaitLost> for Agent {
    type Result = ();

    fn handle(&mut self, msg: AwaitLost, ctx: &mut Self::Context) {
        self.settle(ctx);
        match self.events.lost.values().next() {
            Some(lost) => {
                let _ = msg.0.send(Ok(lost.clone()));
            }
            None => self.events.lost_waiters.push(msg.0),
        }
    }
}

/// Where one lock stands for the client.
#[derive(Message)]
#[rtype(result = "LockState")]
pub(crate) struct GetLockState(pub LockId);

impl Handler<GetLockState> for Agent {
    type Result = MessageResult<GetLockState>;

    fn handle(&mut self, msg: GetLockState, ctx: &mut Self::Context) -> Self::Result {
        self.settle(ctx);
        let lock = msg.0;
        let state = if self.core.request_on(&lock).is_none() {
            LockState::NotRequested
        } else if let Some(lost) = self.events.lost.get(&lock) {
            LockState::Lost(lost.clone())
        } else if let Some(granted) = self.core.granted_lock(&lock) {
            LockState::Held(granted)
        } else {
            LockState::Waiting
        };
        MessageResult(state)
    }
}
