//! The agent actor: a thin shell around one [`AgentCore`].
//!
//! Messages it handles:
//! - [`Deliver`] (from the [`Router`]): notices from lock servers, views forwarded by other
//!   agents, surrender reports. Fed to the core; a settle round is scheduled.
//! - [`LockCall`], [`AwaitAll`], [`GetStatus`], [`Unlock`], [`Convert`], [`End`]: from the
//!   [`crate::Transaction`] handle.
//!   `Deliver` also carries node up/down news from the node's cluster layer.
//! - [`SetOptions`], [`GetOptions`], [`SurrenderTo`] (`agent/calls.rs`) and [`Watch`],
//!   [`Unwatch`], [`DropWatch`] (`agent/watching.rs`, which also owns the client's watch
//!   streams): the rest of the Erlang original's API, from the handle and its
//!   [`crate::LockWatch`] streams.
//!
//! "Settle then analyse": every message that can change the status or taught the agent
//! something schedules one `Settle` message with `ctx.notify`, which runs after the messages
//! already in the mailbox, so a burst of notices is analysed once.
//!
//! Who holds its address: the `Transaction` handle and the router's agent registry (as a
//! recipient). It stops on `End`, when the handle is dropped (which sends `End`), on an abort
//! (abort_on_deadlock), or when the node stops. Whatever way it stops — even by a panic — its
//! [`AgentGuard`] unregisters it and tells every lock server it used to release its locks, and
//! waiting callers get an error saying why. The handle's `end` (and its drop) does that release
//! itself before it sends `End`, so that it need not wait for the agent: the set of servers used
//! ([`Contacted`]) is shared, and whichever releases first takes it.

use crate::core::{
    AgentCore, Deadlock, Effect, GrantedLock, LockResult, LossCause, TransactionEvent,
    TransactionStatus,
};
use crate::error::Error;
use crate::events::Locked;
use crate::options::{Options, Req};
use actix::prelude::*;
use futures::channel::oneshot;
use locks_core::proto::ServerRequest;
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId};
use locks_server::RouteError;
use locks_server::internal::{Deliver, DownCause, Router};
use smallvec::SmallVec;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use tracing::{debug, trace, warn};

/// Where an `await_all_locks` caller gets its answer: the locks held and the deadlocks resolved
/// so far, or why not.
pub(crate) type Reply = oneshot::Sender<Result<LockResult, Error>>;

/// Where a `lock` caller gets its answer: the lock as granted and the locks of the deadlocks
/// resolved so far (sorted, each once), or why not.
pub(crate) type LockReply = oneshot::Sender<Result<Locked, Error>>;

/// A blocked caller.
enum Waiter {
    /// A `lock` call, with the lock it asked for.
    Lock(LockId, LockReply),
    /// An `await_all_locks` call.
    All(Reply),
}

impl Waiter {
    fn fail(self, error: Error) {
        match self {
            Waiter::Lock(_, reply) => {
                let _ = reply.send(Err(error));
            }
            Waiter::All(reply) => {
                let _ = reply.send(Err(error));
            }
        }
    }
}

/// The locks named in `deadlocks`, sorted, each once: what `lock` returns.
fn deadlock_locks(deadlocks: &[Deadlock]) -> Vec<LockId> {
    let mut locks: Vec<LockId> = deadlocks.iter().map(|d| d.lock.clone()).collect();
    locks.sort();
    locks.dedup();
    locks
}

/// Why the agent stopped, shared with its handle so that late calls can say it.
pub(crate) type Outcome = Arc<Mutex<Option<Error>>>;

/// Reads the outcome, or `Error::Ended` if the agent stopped without recording one.
pub(crate) fn outcome_error(outcome: &Outcome) -> Error {
    outcome
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or(Error::Ended)
}

/// The lock servers an agent has sent requests to and not yet released, shared by the agent
/// and its handle so that either can release its locks.
pub(crate) type Contacted = Arc<Mutex<BTreeSet<NodeId>>>;

/// Unregisters agent `id` and asks every lock server in `contacted` to drop its entries (and
/// forgets them, so that a second release sends nothing again).
pub(crate) fn release(router: &Router, id: &AgentId, contacted: &Contacted) {
    router.unregister_agent(id);
    let nodes = std::mem::take(&mut *contacted.lock().unwrap_or_else(PoisonError::into_inner));
    for node in nodes {
        let request = ServerRequest::RemoveAgent { agent: id.clone() };
        if let Err(err) = router.send_server(&node, request) {
            debug!(agent = %id, %node, %err, "could not release locks at stop");
        }
    }
}

/// Unregisters the agent and releases its locks on every node it used, when dropped — after
/// a normal stop or a panic alike.
struct AgentGuard {
    id: AgentId,
    router: Arc<Router>,
    contacted: Contacted,
}

impl AgentGuard {
    /// Unregisters the agent and asks every lock server it used to drop its entries. Done as
    /// soon as the agent decides to stop (and by the handle's `end` itself).
    fn release(&mut self) {
        release(&self.router, &self.id, &self.contacted);
    }
}

impl Drop for AgentGuard {
    fn drop(&mut self) {
        self.release();
    }
}

/// The actor behind a [`crate::Transaction`].
pub(crate) struct Agent {
    core: AgentCore,
    guard: AgentGuard,
    /// Blocked callers.
    waiters: Vec<Waiter>,
    settle_scheduled: bool,
    outcome: Outcome,
    /// The client's watch streams (`agent/watching.rs`).
    subscriptions: watching::Subscriptions,
    /// The `surrender_nowait` calls waiting for their nodes' answers (`agent/calls.rs`).
    surrender_calls: calls::SurrenderCalls,
    /// The client's event subscriptions and the losses not made good (`agent/events.rs`).
    events: events::Events,
}

impl Agent {
    pub(crate) fn new(
        id: AgentId,
        router: Arc<Router>,
        modes: ModeTable,
        options: Options,
        outcome: Outcome,
        contacted: Contacted,
    ) -> Agent {
        Agent {
            core: AgentCore::new(id.clone(), modes, options),
            guard: AgentGuard {
                id,
                router,
                contacted,
            },
            waiters: Vec::new(),
            settle_scheduled: false,
            outcome,
            subscriptions: watching::Subscriptions::default(),
            surrender_calls: calls::SurrenderCalls::default(),
            events: events::Events::default(),
        }
    }

    fn id(&self) -> &AgentId {
        &self.guard.id
    }

    fn schedule_settle(&mut self, ctx: &mut Context<Self>) {
        if !self.settle_scheduled {
            self.settle_scheduled = true;
            ctx.notify(Settle);
        }
    }

    /// Carries out the core's effects. A lock server found unreachable is reported to the core
    /// as a node down, which needs another settle round.
    fn execute(&mut self, effects: Vec<Effect>, ctx: &mut Context<Self>) {
        let mut later = Vec::new();
        for effect in effects {
            match effect {
                Effect::ToServer { node, request } => {
                    let sent = self.guard.router.send_server(&node, request);
                    // Noted after sending: if the handle's release takes the set after this
                    // note, its `RemoveAgent` goes out after this request; if it took the set
                    // before, the node stays in it for the agent's own release when it stops.
                    {
                        let mut contacted = self
                            .guard
                            .contacted
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner);
                        if !contacted.contains(&node) {
                            contacted.insert(node.clone());
                        }
                    }
                    match sent {
                        Ok(()) => {}
                        Err(RouteError::NodeDown(node)) => later.push(node),
                        Err(err) => {
                            warn!(agent = %self.id(), %node, %err, "lock server unreachable");
                            later.push(node);
                        }
                    }
                }
                Effect::ToAgent { to, msg } => {
                    if let Err(err) = self.guard.router.send_agent(&to, msg) {
                        trace!(agent = %self.id(), %to, %err, "agent message not delivered");
                    }
                }
                Effect::StatusChanged(status) => {
                    trace!(agent = %self.id(), ?status, "status changed");
                    self.events.publish(TransactionEvent::Status(status));
                }
                Effect::Granted(granted) => {
                    self.events.publish(TransactionEvent::Granted(granted));
                }
                Effect::Lost(lost) => {
                    debug!(agent = %self.id(), %lost, "a claimed lock is lost");
                    self.events.publish(TransactionEvent::Lost(lost));
                }
                Effect::Abort { lock, node } => {
                    debug!(agent = %self.id(), %lock, %node, "aborting on deadlock");
                    self.stop_with(Error::Deadlock { lock, node }, ctx);
                    return;
                }
                Effect::Rejected { node, lock, reason } => {
                    // The status tells the client when it matters; the log says why.
                    warn!(agent = %self.id(), %lock, %node, %reason, "lock server refused a request");
                }
                Effect::Watched { node, lock, view } => {
                    self.subscriptions.deliver(&node, &lock, &view);
                }
                Effect::SurrenderAnswered {
                    lock,
                    node,
                    to,
                    refused,
                } => self.surrender_calls.answer(lock, node, to, refused),
            }
        }
        for node in later {
            let effects = self.core.node_down(&node);
            self.execute(effects, ctx);
            self.schedule_settle(ctx);
        }
    }

    fn settle(&mut self, ctx: &mut Context<Self>) {
        self.settle_scheduled = false;
        self.check_leases(ctx);
        let effects = self.core.settle();
        self.execute(effects, ctx);
        self.answer_waiters();
    }

    /// Answers the blocked callers when the transaction has all its locks or cannot be served.
    /// A `lock` caller gets only the deadlocks; the whole [`LockResult`] (one entry per request)
    /// is built only for an `await_all_locks` caller, once per answer.
    fn answer_waiters(&mut self) {
        if self.waiters.is_empty() {
            return;
        }
        match self.core.status_ref() {
            TransactionStatus::HaveAllLocks { deadlocks } => {
                let mut locks = None;
                let mut all: Vec<Reply> = Vec::new();
                for waiter in self.waiters.drain(..) {
                    match waiter {
                        Waiter::Lock(lock, reply) => {
                            let locks = locks.get_or_insert_with(|| deadlock_locks(deadlocks));
                            // Every request is held now (a withdrawn one's caller was
                            // cancelled with it); the fallback only keeps this total.
                            let granted = match self.core.granted_lock(&lock) {
                                Some(granted) => granted,
                                None => GrantedLock {
                                    mode: self
                                        .core
                                        .request_on(&lock)
                                        .map_or(locks_core::Mode::IS, |r| r.mode),
                                    lock,
                                    nodes: Vec::new(),
                                },
                            };
                            let _ = reply.send(Ok(Locked {
                                granted,
                                deadlocks: locks.clone(),
                            }));
                        }
                        Waiter::All(reply) => all.push(reply),
                    }
                }
                // One entry per request: built once, and moved to the last caller rather than
                // copied (a transaction of a million locks would hold it twice).
                if let Some(last) = all.pop() {
                    let result = self.core.lock_result().unwrap_or_else(|| LockResult {
                        locks: Vec::new(),
                        deadlocks: deadlocks.clone(),
                    });
                    for reply in all {
                        let _ = reply.send(Ok(result.clone()));
                    }
                    let _ = last.send(Ok(result));
                }
            }
            TransactionStatus::CannotServe { locks, nodes } => {
                let error = Error::CannotServe {
                    locks: locks.clone(),
                    nodes: nodes.clone(),
                };
                for waiter in self.waiters.drain(..) {
                    waiter.fail(error.clone());
                }
            }
            TransactionStatus::NoLocks | TransactionStatus::Waiting => {}
        }
    }

    fn stop_with(&mut self, error: Error, ctx: &mut Context<Self>) {
        {
            let mut outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
            if outcome.is_none() {
                *outcome = Some(error.clone());
            }
        }
        for waiter in self.waiters.drain(..) {
            waiter.fail(error.clone());
        }
        self.guard.release();
        ctx.stop();
    }
}

impl Actor for Agent {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.guard
            .router
            .register_agent(self.id().clone(), ctx.address().recipient());
        trace!(agent = %self.id(), "agent started");
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        let error = outcome_error(&self.outcome);
        for waiter in self.waiters.drain(..) {
            waiter.fail(error.clone());
        }
        trace!(agent = %self.id(), "agent stopped");
    }
}

/// Internal: run the status computation and deadlock analysis once.
#[derive(Message)]
#[rtype(result = "()")]
struct Settle;

impl Handler<Settle> for Agent {
    type Result = ();

    fn handle(&mut self, _msg: Settle, ctx: &mut Self::Context) {
        self.settle(ctx);
    }
}

impl Handler<Deliver> for Agent {
    type Result = ();

    fn handle(&mut self, msg: Deliver, ctx: &mut Self::Context) {
        let effects = match msg {
            Deliver::Message(msg) => self.core.receive(msg),
            Deliver::NodeDown(node, DownCause::LeaseExpired) => {
                self.core.node_down_because(&node, LossCause::LeaseExpired)
            }
            Deliver::NodeDown(node, _) => self.core.node_down(&node),
            Deliver::NodeUp(node) => self.core.node_up(&node),
        };
        // A message that taught the agent nothing (a view it had already) needs no settling;
        // a changed status must still be answered.
        let changed = effects
            .iter()
            .any(|e| matches!(e, Effect::StatusChanged(_)));
        self.execute(effects, ctx);
        if changed || self.core.needs_settle() {
            self.schedule_settle(ctx);
        }
    }
}

/// A lock request from the client; `reply` is set for a blocking `lock`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct LockCall {
    pub lock: LockId,
    pub mode: Mode,
    /// Inline for one node, the common case: a burst of requests is one allocation fewer each.
    pub nodes: SmallVec<[NodeId; 1]>,
    pub req: Req,
    pub reply: Option<LockReply>,
    /// For `lock_nowait`: told whether the request was accepted.
    pub accepted: Option<oneshot::Sender<Result<(), Error>>>,
}

impl Handler<LockCall> for Agent {
    type Result = ();

    fn handle(&mut self, msg: LockCall, ctx: &mut Self::Context) {
        let lock = msg.lock.clone();
        match self.core.request(msg.lock, msg.mode, &msg.nodes, msg.req) {
            Ok(effects) => {
                if let Some(accepted) = msg.accepted {
                    let _ = accepted.send(Ok(()));
                }
                if let Some(reply) = msg.reply {
                    self.waiters.push(Waiter::Lock(lock, reply));
                }
                self.execute(effects, ctx);
                self.schedule_settle(ctx);
            }
            Err(err) => {
                let error = Error::Request(err);
                if let Some(accepted) = msg.accepted {
                    let _ = accepted.send(Err(error.clone()));
                }
                if let Some(reply) = msg.reply {
                    let _ = reply.send(Err(error));
                }
            }
        }
    }
}

/// Wait until every request is granted.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct AwaitAll(pub Reply);

impl Handler<AwaitAll> for Agent {
    type Result = ();

    fn handle(&mut self, msg: AwaitAll, ctx: &mut Self::Context) {
        self.waiters.push(Waiter::All(msg.0));
        self.schedule_settle(ctx);
    }
}

/// The current status, settled first.
#[derive(Message)]
#[rtype(result = "TransactionStatus")]
pub(crate) struct GetStatus;

impl Handler<GetStatus> for Agent {
    type Result = MessageResult<GetStatus>;

    fn handle(&mut self, _msg: GetStatus, ctx: &mut Self::Context) -> Self::Result {
        self.settle(ctx);
        MessageResult(self.core.status())
    }
}

/// Release (or withdraw) one lock.
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct Unlock(pub LockId);

impl Handler<Unlock> for Agent {
    type Result = Result<(), Error>;

    fn handle(&mut self, msg: Unlock, ctx: &mut Self::Context) -> Self::Result {
        let effects = self.core.unlock(&msg.0).map_err(Error::Request)?;
        self.events.forget(&msg.0);
        // A `lock` call waiting for the withdrawn request will never be granted it.
        let (cancelled, kept) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|w| matches!(w, Waiter::Lock(lock, _) if *lock == msg.0));
        self.waiters = kept;
        for waiter in cancelled {
            waiter.fail(Error::Cancelled {
                lock: msg.0.clone(),
            });
        }
        self.execute(effects, ctx);
        self.schedule_settle(ctx);
        Ok(())
    }
}

/// Convert a lock down to a weaker mode.
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct Convert(pub LockId, pub Mode);

impl Handler<Convert> for Agent {
    type Result = Result<(), Error>;

    fn handle(&mut self, msg: Convert, ctx: &mut Self::Context) -> Self::Result {
        let effects = self.core.convert(&msg.0, msg.1).map_err(Error::Request)?;
        self.execute(effects, ctx);
        self.schedule_settle(ctx);
        Ok(())
    }
}

/// End the transaction: release everything and stop.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct End;

impl Handler<End> for Agent {
    type Result = ();

    fn handle(&mut self, _msg: End, ctx: &mut Self::Context) {
        self.stop_with(Error::Ended, ctx);
    }
}

/// The wait-for graph as the agent sees it, in DOT.
#[derive(Message)]
#[rtype(result = "String")]
pub(crate) struct Dot;

impl Handler<Dot> for Agent {
    type Result = String;

    fn handle(&mut self, _msg: Dot, _ctx: &mut Self::Context) -> String {
        self.core.wait_for_graph_dot()
    }
}

mod calls;
mod events;
mod watching;
pub(crate) use calls::{GetOptions, SetOptions, SurrenderTo};
pub(crate) use events::{AwaitLost, GetLockState, Subscribe};
pub(crate) use watching::{DropWatch, Unwatch, Watch};
