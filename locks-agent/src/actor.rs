//! The agent actor: a thin shell around one [`AgentCore`].
//!
//! Messages it handles:
//! - [`Deliver`] (from the [`Router`]): notices from lock servers, views forwarded by other
//!   agents, surrender reports. Fed to the core; a settle round is scheduled.
//! - [`LockCall`], [`AwaitAll`], [`GetStatus`], [`Unlock`], [`End`]: from the
//!   [`crate::Transaction`] handle.
//!   `Deliver` also carries node up/down news from the node's cluster layer.
//! - [`Convert`], [`Dot`], [`SetOptions`], [`GetOptions`], [`SurrenderTo`]
//!   (`actor/other_calls.rs`) and [`Watch`],
//!   [`Unwatch`], [`DropWatch`] (`actor/subscriptions.rs`, which also owns the client's watch
//!   streams): the rest of the Erlang original's API, from the handle and its
//!   [`crate::LockWatch`] streams.
//!
//! "Settle then analyse": every message that can change the status or taught the agent
//! something asks for one settle round (`schedule_settle` sets a flag), which [`Settler`] runs
//! once the messages already in the mailbox are handled, so a burst of notices is analysed
//! once. The settler is one item of the actor's context, made when the actor starts and polled
//! by actix after the mailbox every time the actor runs: asking for a round allocates nothing
//! (a `ctx.notify` per round, a boxed item each, cost about 2 % of a hot lock's hand-offs).
//!
//! An `unlock`'s messages to other nodes wait for the agent's next turn (`Agent::unlocks`):
//! its answer reaches a caller on the node's thread (a gRPC session) before the node's links
//! write, and whatever the agent does next sends them first, so each node still gets the
//! agent's messages in order.
//!
//! Who holds its address: the `Transaction` handle and the router's agent registry (as a
//! recipient). It stops on `End`, when the handle is dropped (which sends `End`), on an abort
//! (abort_on_deadlock), or when the node stops. Whatever way it stops — even by a panic — it
//! is unregistered (its [`AgentGuard`]) and the core's end is carried out (`Drop for Agent`):
//! waiting callers get an error saying why and every lock server it used is told to release
//! its locks. The handle's `end` (and its drop) only unregisters it, so that messages to it
//! fail at once, and sends `End`: the release happens on the node's thread, after every
//! request sent before it.
//!
//! The core decides everything; this shell allocates a [`CallId`] per blocked caller and maps
//! it to the caller's oneshot sender, and carries out the effects through the one executor
//! (`executor.rs`).

use crate::core::Locked;
use crate::core::{
    AgentCore, AgentEffect, Answer, CallFailure, CallId, LockResult, TransactionEvent,
    TransactionStatus,
};
use crate::error::Error;
use crate::executor;
use crate::options::{Options, Req};
use actix::prelude::*;
use futures::channel::oneshot;
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId};
use locks_server::embed::{AgentPort, Deliver, Port};
use locks_server::lease;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, PoisonError};
use tracing::{debug, trace, warn};

/// Where an `await_all_locks` caller gets its answer: the locks held and the deadlocks resolved
/// so far, or why not.
pub(crate) type Reply = oneshot::Sender<Result<LockResult, Error>>;

/// Where a `lock` caller gets its answer: the lock as granted and the locks of the deadlocks
/// resolved so far (sorted, each once), or why not.
pub(crate) type LockReply = oneshot::Sender<Result<Locked, Error>>;

/// A blocked caller's sender.
enum Caller {
    /// A `lock` call.
    Lock(LockReply),
    /// An `await_all_locks` call.
    All(Reply),
}

/// The reply senders of the blocked callers, by the id the core knows them by.
#[derive(Default)]
struct Replies {
    waiting: HashMap<CallId, Caller>,
}

/// A new id for a blocked call. Made by the handle, so that a call's future can name it in
/// [`Withdraw`] when dropped; unique in the process, so unique per agent.
pub(crate) fn next_call() -> CallId {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    CallId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

impl Replies {
    fn add(&mut self, call: CallId, caller: Caller) -> CallId {
        self.waiting.insert(call, caller);
        call
    }

    /// Answers a caller the core never recorded (its request was refused).
    fn refuse(&mut self, call: CallId, error: Error) {
        match self.waiting.remove(&call) {
            Some(Caller::Lock(reply)) => drop(reply.send(Err(error))),
            Some(Caller::All(reply)) => drop(reply.send(Err(error))),
            None => {}
        }
    }

    /// Passes the core's answer on; a failure names the nodes this node never heard of as
    /// unknown rather than down.
    fn answer(&mut self, call: CallId, result: Result<Answer, CallFailure>, router: &Port) {
        let explain =
            |failure: CallFailure| Error::from(failure).naming_unknown(|n| router.has_heard_of(n));
        let Some(caller) = self.waiting.remove(&call) else {
            return;
        };
        match (caller, result) {
            (Caller::Lock(reply), Ok(Answer::Locked { granted, deadlocks })) => {
                drop(reply.send(Ok(Locked { granted, deadlocks })))
            }
            (Caller::All(reply), Ok(Answer::AllLocks(result))) => drop(reply.send(Ok(result))),
            (Caller::Lock(reply), Err(failure)) => drop(reply.send(Err(explain(failure)))),
            (Caller::All(reply), Err(failure)) => drop(reply.send(Err(explain(failure)))),
            // The core answers each kind of caller with its kind of answer; were it not so,
            // the caller would see the sender dropped, and the agent's outcome.
            (_, Ok(answer)) => warn!(?call, ?answer, "an answer of the wrong kind dropped"),
        }
    }
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

/// The agent's port (which carries its id); unregisters the agent when dropped (after a
/// normal stop or a panic alike).
struct AgentGuard {
    router: AgentPort,
}

impl Drop for AgentGuard {
    fn drop(&mut self) {
        self.router.unregister_agent();
    }
}

/// The actor behind a [`crate::Transaction`].
pub(crate) struct Agent {
    /// Boxed: the actor is moved several times as it starts (into its context, then into
    /// its task), and the core is most of its size.
    core: Box<AgentCore>,
    guard: AgentGuard,
    /// The blocked callers' reply senders.
    replies: Replies,
    settle_scheduled: bool,
    outcome: Outcome,
    /// The client's watch streams (`actor/subscriptions.rs`).
    subscriptions: subscriptions::Subscriptions,
    /// The `surrender_nowait` calls waiting for their nodes' answers (`actor/other_calls.rs`).
    surrender_calls: other_calls::SurrenderCalls,
    /// The client's event subscriptions and the losses not made good (`actor/event_push.rs`).
    events: event_push::Events,
    /// What `unlock` calls answered in this turn send to other nodes, sent at the agent's next
    /// turn ([`Settler`]): the answer goes first, so a gRPC session's client has it before the
    /// node writes to its links. Any execution before then sends these first, so every node
    /// gets the agent's messages in the core's order.
    unlocks: Vec<AgentEffect>,
    /// The agent let the thread's other tasks run once since `unlocks` filled.
    unlocks_waited: bool,
}

impl Agent {
    /// The agent of the transaction `router` is the port of.
    pub(crate) fn new(
        router: AgentPort,
        modes: ModeTable,
        options: Options,
        outcome: Outcome,
    ) -> Agent {
        Agent {
            core: Box::new(AgentCore::new(router.agent().clone(), modes, options)),
            guard: AgentGuard { router },
            replies: Replies::default(),
            settle_scheduled: false,
            outcome,
            subscriptions: subscriptions::Subscriptions::default(),
            surrender_calls: other_calls::SurrenderCalls::default(),
            events: event_push::Events::default(),
            unlocks: Vec::new(),
            unlocks_waited: false,
        }
    }

    fn id(&self) -> &AgentId {
        self.guard.router.agent()
    }

    /// Asks for a settle round once the mailbox is drained ([`Settler`]).
    fn schedule_settle(&mut self, _ctx: &mut Context<Self>) {
        self.settle_scheduled = true;
    }

    /// Carries out the core's effects through the executor. A lock server found unreachable
    /// needs another settle round; an abort stops the agent.
    fn execute(&mut self, effects: Vec<AgentEffect>, ctx: &mut Context<Self>) {
        let effects = if self.unlocks.is_empty() {
            effects
        } else {
            self.unlocks_waited = false;
            let mut all = std::mem::take(&mut self.unlocks);
            all.extend(effects);
            all
        };
        let mut abort = None;
        let router = &self.guard.router;
        let id = router.agent();
        let (replies, events, subscriptions, surrender_calls) = (
            &mut self.replies,
            &mut self.events,
            &mut self.subscriptions,
            &mut self.surrender_calls,
        );
        let done = executor::execute(&self.guard.router, &mut self.core, effects, &mut |effect| {
            match effect {
                AgentEffect::Reply { call, result } => {
                    trace!(target: "lock_path", hop = 11, ?call, "answered");
                    replies.answer(call, result, router)
                }
                AgentEffect::StatusChanged(status) => {
                    trace!(agent = %id, ?status, "status changed");
                    events.publish(TransactionEvent::Status(status));
                }
                AgentEffect::Granted(granted) => {
                    events.publish(TransactionEvent::Granted(granted));
                }
                AgentEffect::Lost(lost) => {
                    debug!(agent = %id, %lost, "a claimed lock is lost");
                    events.publish(TransactionEvent::Lost(lost));
                }
                AgentEffect::Abort { lock, node } => {
                    debug!(agent = %id, %lock, %node, "aborting on deadlock");
                    abort = Some(Error::Deadlock { lock, node });
                    return ControlFlow::Break(());
                }
                AgentEffect::Rejected { node, lock, reason } => {
                    // The status tells the client when it matters; the log says why, as often
                    // as a peer's server may make it.
                    locks_server::limited!(
                        router.warnings(), reason.name(), warn,
                        agent = %id, %lock, %node, %reason, "lock server refused a request"
                    );
                }
                AgentEffect::Watched { node, lock, view } => {
                    subscriptions.deliver(&node, &lock, &view);
                }
                AgentEffect::SurrenderAnswered {
                    lock,
                    node,
                    to,
                    refused,
                } => surrender_calls.answer(lock, node, to, refused),
                // Sent by the executor.
                AgentEffect::ToServer { .. } | AgentEffect::ToAgent { .. } => {}
            }
            ControlFlow::Continue(())
        });
        if let Some(error) = abort {
            self.stop_with(error, ctx);
        } else if done.unreachable {
            self.schedule_settle(ctx);
        }
    }

    fn settle(&mut self, ctx: &mut Context<Self>) {
        self.settle_scheduled = false;
        self.check_leases(ctx);
        let effects = self.core.settle();
        self.execute(effects, ctx);
    }

    fn stop_with(&mut self, error: Error, ctx: &mut Context<Self>) {
        {
            let mut outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
            if outcome.is_none() {
                *outcome = Some(error);
            }
        }
        self.release();
        // Unregistered now, the router sends a probe that comes from here on back to its
        // victim; one already in the mailbox is handled first (the ended core sends it back),
        // because actix drops what is left in a stopping actor's mailbox, and a probe dropped
        // leaves its victim waiting for it for ever.
        ctx.notify(Stop);
    }

    /// Unregisters the agent and carries out the core's end: the callers fail, every lock
    /// server used is told to release. Done as soon as the agent decides to stop, and again
    /// (doing nothing then) when it is dropped.
    fn release(&mut self) {
        let router = &self.guard.router;
        if !self.unlocks.is_empty() {
            // Sends only: nothing for `rest`.
            let unlocks = std::mem::take(&mut self.unlocks);
            let _ = executor::execute(router, &mut self.core, unlocks, &mut |_| {
                ControlFlow::Continue(())
            });
        }
        self.guard.router.unregister_agent();
        let replies = &mut self.replies;
        let router = &self.guard.router;
        executor::end(router, &mut self.core, &mut |effect| {
            if let AgentEffect::Reply { call, result } = effect {
                replies.answer(call, result, router);
            }
            ControlFlow::Continue(())
        });
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // However the actor stopped (a panic, the node stopping), its locks are released.
        self.release();
    }
}

impl Actor for Agent {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // The context's first item: actix polls its items after the mailbox, in order.
        ctx.spawn(Settler);
        // Registered by whoever started it (`Router::attach_agent`, after its adoption of the table's state), not here:
        // this may run before that, and must not drop the messages kept for the transaction.
        trace!(agent = %self.id(), "agent started");
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        trace!(agent = %self.id(), "agent stopped");
    }
}

/// How many settle rounds [`Settler`] runs in a row before it lets the thread's other tasks
/// run (a round that finds a lock server unreachable asks for another).
const SETTLES_IN_A_ROW: usize = 8;

/// The item of the agent's context that runs the settle rounds asked for: actix polls it each
/// time the actor runs, after handling every message in the mailbox, so one round follows each
/// burst. It never completes, so the agent does not stop by losing its last address; it
/// stops by `ctx.stop()` after `End` (which the handle's end and its drop both
/// send) or on an abort, and with its node's arbiter.
struct Settler;

impl ActorFuture<Agent> for Settler {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        agent: &mut Agent,
        ctx: &mut Context<Agent>,
        task: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if !agent.unlocks.is_empty() && ctx.state() == ActorState::Running {
            if !agent.unlocks_waited {
                // The tasks woken by this turn (an unlock's caller) run before the next.
                agent.unlocks_waited = true;
                task.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            agent.execute(Vec::new(), ctx);
        }
        for _ in 0..SETTLES_IN_A_ROW {
            if !agent.settle_scheduled || ctx.state() != ActorState::Running {
                return std::task::Poll::Pending;
            }
            agent.settle(ctx);
        }
        if agent.settle_scheduled {
            // More rounds to run: the task is polled again after the others had a turn.
            task.waker().wake_by_ref();
        }
        std::task::Poll::Pending
    }
}

impl Handler<Deliver> for Agent {
    type Result = ();

    fn handle(&mut self, msg: Deliver, ctx: &mut Self::Context) {
        let effects = match msg {
            Deliver::Message(msg) => self.core.receive(msg),
            Deliver::NodeDown(node, cause) => {
                self.core.node_down_because(&node, lease::loss_cause(cause))
            }
            Deliver::NodeUp(node) => self.core.node_up(&node),
        };
        // A message that taught the agent nothing (a view it had already) needs no settling;
        // a changed status must still be answered.
        let changed = effects
            .iter()
            .any(|e| matches!(e, AgentEffect::StatusChanged(_)));
        self.execute(effects, ctx);
        if changed || self.core.needs_settle() {
            self.schedule_settle(ctx);
        }
    }
}

/// The options of one lock call, carried as one value from the transaction's call to the
/// agent's core: what is asked for (the lock, its mode, its nodes, the requirement) and how
/// the call waits. A new per-lock option is a field here, set by the call that takes it
/// (`transaction/agent_calls.rs`) and read where it is acted on.
#[derive(Clone, Debug)]
pub(crate) struct LockArgs {
    pub lock: LockId,
    pub mode: Mode,
    /// Inline for one node, the common case: a burst of requests is one allocation fewer each.
    pub nodes: SmallVec<[NodeId; 1]>,
    pub req: Req,
    /// How long a `lock` call waits before it gives up (`AgentCore::time_out`).
    pub wait: Option<std::time::Duration>,
}

impl LockArgs {
    /// `lock` in `mode` on `nodes` with `req`, with every other option at its default.
    pub(crate) fn new(lock: LockId, mode: Mode, nodes: SmallVec<[NodeId; 1]>, req: Req) -> Self {
        LockArgs {
            lock,
            mode,
            nodes,
            req,
            wait: None,
        }
    }
}

/// A lock request from the client; `reply` is set for a blocking `lock`, with the call's id.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct LockCall {
    pub args: LockArgs,
    pub reply: Option<(CallId, LockReply)>,
    /// Set when the node's fast path queued the request just before this agent took over:
    /// the mode its entry held before (`AgentCore::lock_and_wait_queued`).
    pub queued: Option<Option<Mode>>,
    /// For `lock_nowait`: told whether the request was accepted.
    pub accepted: Option<oneshot::Sender<Result<(), Error>>>,
}

impl Handler<LockCall> for Agent {
    type Result = ();

    fn handle(&mut self, msg: LockCall, ctx: &mut Self::Context) {
        let args = msg.args;
        trace!(target: "lock_path", hop = 3, agent = %self.core.id(), lock = %args.lock, "to the core");
        let call = msg
            .reply
            .map(|(call, reply)| self.replies.add(call, Caller::Lock(reply)));
        let requested = match (call, msg.queued) {
            (Some(call), Some(held)) => {
                self.core
                    .lock_and_wait_queued(call, args.lock, args.mode, &args.nodes, held)
            }
            (Some(call), None) => {
                self.core
                    .lock_and_wait(call, args.lock, args.mode, &args.nodes, args.req)
            }
            (None, _) => self
                .core
                .request(args.lock, args.mode, &args.nodes, args.req),
        };
        match requested {
            Ok(effects) => {
                if let Some(accepted) = msg.accepted {
                    let _ = accepted.send(Ok(()));
                }
                if let (Some(call), Some(wait)) = (call, args.wait) {
                    ctx.run_later(wait, move |agent, ctx| agent.time_out(call, ctx));
                }
                self.execute(effects, ctx);
                self.schedule_settle(ctx);
            }
            Err(err) => {
                let error = Error::Request(err);
                if let Some(accepted) = msg.accepted {
                    let _ = accepted.send(Err(error.clone()));
                }
                // A refused request records no caller in the core: the refusal is the answer.
                if let Some(call) = call {
                    self.replies.refuse(call, error);
                }
            }
        }
    }
}

impl Agent {
    /// The bounded wait of `call` ran out: settled first, so that a grant that came in time is
    /// answered as one; then the core withdraws the call and fails it (`core/agent/time_out.rs`).
    fn time_out(&mut self, call: CallId, ctx: &mut Context<Self>) {
        if ctx.state() != ActorState::Running {
            return;
        }
        self.settle(ctx);
        let effects = self.core.time_out(call);
        if !effects.is_empty() {
            self.execute(effects, ctx);
            self.schedule_settle(ctx);
        }
    }
}

/// Wait until every request is granted.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct AwaitAll(pub CallId, pub Reply);

impl Handler<AwaitAll> for Agent {
    type Result = ();

    fn handle(&mut self, msg: AwaitAll, ctx: &mut Self::Context) {
        let call = self.replies.add(msg.0, Caller::All(msg.1));
        let effects = self.core.await_all(call);
        self.execute(effects, ctx);
        self.schedule_settle(ctx);
    }
}

/// The client dropped the future of a blocked call before its answer: forget the caller and
/// undo what it asked for (`AgentCore::withdraw`). Sent by the future's drop, after the call's
/// own message on the same mailbox.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Withdraw(pub CallId);

impl Handler<Withdraw> for Agent {
    type Result = ();

    fn handle(&mut self, msg: Withdraw, ctx: &mut Self::Context) {
        self.replies.waiting.remove(&msg.0);
        let (removed, effects) = self.core.withdraw(msg.0);
        if let Some(lock) = removed {
            self.events.forget(&lock);
        }
        if !effects.is_empty() {
            self.execute(effects, ctx);
            self.schedule_settle(ctx);
        }
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
        // The messages to other nodes wait for the agent's next turn (see `Agent::unlocks`);
        // the rest (the status, callers cancelled, this node's server) is carried out now.
        let here = self.guard.router.node();
        let (remote, now): (Vec<_>, Vec<_>) = effects.into_iter().partition(|e| match e {
            AgentEffect::ToServer { node, .. } => node != here,
            AgentEffect::ToAgent { .. } => true,
            _ => false,
        });
        self.execute(now, ctx);
        self.unlocks.extend(remote);
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

/// Stop, the agent having ended: queued after the messages already in its mailbox.
#[derive(Message)]
#[rtype(result = "()")]
struct Stop;

impl Handler<Stop> for Agent {
    type Result = ();

    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

mod adopt;
mod event_push;
mod other_calls;
mod subscriptions;
pub(crate) use adopt::Adopt;
pub(crate) use event_push::{AwaitLost, GetLockState, Subscribe};
pub(crate) use other_calls::{Convert, Dot, GetOptions, SetOptions, SurrenderTo};
pub(crate) use subscriptions::{DropWatch, Unwatch, Watch};
