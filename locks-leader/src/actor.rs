//! The member actor: a thin shell around one [`MemberCore`].
//!
//! Messages it handles:
//! - [`Deliver`] (from the [`Router`], under the member's agent id): lock-server notices and
//!   views of the election lock, other election agents' messages, node up and down;
//! - [`MemberDelivery`] (from the [`Router`], under the member id): messages of other members,
//!   decoded with `locks_core::codec`;
//! - [`Client`]: calls from the [`crate::Member`] handle;
//! - the sync lock's result, timers, and `Settle` (run once after each burst of inputs, so the
//!   election agent analyses a burst of notices once, as the agent actor does).
//!
//! Effects are carried out in order; the election agent's ([`MemberEffect::Agent`]) through the
//! agent actor's executor (`locks_agent::state_machine`), which also tells the agent of a lock server it
//! cannot reach. The sync lock is a [`Transaction`] the actor starts and
//! never waits for: the wait runs as a future beside the actor, and its result comes back as
//! a message. Who holds its address: the handle (every clone), and the router's registries as
//! recipients. It stops when the last handle is dropped or `stop` is called, when a callback
//! asks for it, or with its node; whichever way (a panic too), it says goodbye to the members
//! it knows, releases its locks and watches, and unregisters.

use crate::callbacks::{CallId, Callbacks};
use crate::core::{MemberCore, MemberEffect, Peer, SYNC_TIMEOUT, note_agent_effect};
use crate::error::{CallError, Error};
use crate::info::MemberInfo;
use crate::lease::SharedProof;
use crate::lease::lease_valid;
use crate::remembered::TermRecord;
use crate::term::Term;
use actix::prelude::*;
use futures::channel::oneshot;
use locks_agent::state_machine;
use locks_agent::{Options, Req, Transaction, begin_transaction};
use locks_core::codec;
use locks_core::{LockId, MemberId, Mode, NodeId};
use locks_server::embed::{AgentPort, Deliver, FreshAgent, MemberDelivery, NodeInternals};
use locks_server::{Node, RouteError};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::PoisonError;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{debug, trace, warn};

/// The largest encoded member message: a frame, less room for the envelope around it.
const MAX_PAYLOAD: usize = codec::DEFAULT_MAX_FRAME - 4096;

type ReplyTx<C> = oneshot::Sender<Result<<C as Callbacks>::Reply, CallError>>;

/// A request from the handle.
pub(crate) enum Client<C: Callbacks> {
    LeaderCall {
        req: C::Call,
        timeout: Duration,
        reply: ReplyTx<C>,
    },
    Call {
        req: C::Call,
        timeout: Duration,
        reply: ReplyTx<C>,
    },
    LeaderCast(C::Cast),
    Cast(C::Cast),
    Info(C::Info),
    Broadcast {
        msg: C::Broadcast,
        reply: oneshot::Sender<Result<(), CallError>>,
    },
    Query(oneshot::Sender<MemberInfo>),
    Stop(Option<oneshot::Sender<()>>),
}

impl<C: Callbacks> Message for Client<C> {
    type Result = ();
}

/// The sync lock's transaction for attempt `attempt`, or `None` if it could not be taken.
struct SyncDone {
    attempt: u64,
    txn: Option<Transaction>,
}

impl Message for SyncDone {
    type Result = ();
}

#[derive(Message)]
#[rtype(result = "()")]
struct Settle;

#[derive(Message)]
#[rtype(result = "()")]
struct Tick;

/// The actor behind a [`crate::Member`].
pub(crate) struct MemberActor<C: Callbacks> {
    core: MemberCore<C>,
    node: Node,
    /// The port of the member's agent: its requests go in that agent's name only.
    router: AgentPort,
    /// The agent id the core was made with, until `started` registers the mailboxes.
    fresh: Option<FreshAgent>,
    sync_lock: LockId,
    epoch: Instant,
    calls: HashMap<CallId, (ReplyTx<C>, Duration)>,
    next_call: u64,
    leader_tx: watch::Sender<Option<Term>>,
    proof: SharedProof,
    syncs: HashMap<u64, Transaction>,
    timer: Option<(Duration, SpawnHandle)>,
    settle_scheduled: bool,
    ready: Option<oneshot::Sender<Result<(), Error>>>,
    stop_waiters: Vec<oneshot::Sender<()>>,
    released: bool,
    /// The group's term record in the node's data directory, if it has one.
    record: Option<TermRecord>,
}

impl<C: Callbacks> MemberActor<C> {
    pub(crate) fn new(
        core: MemberCore<C>,
        fresh: FreshAgent,
        node: Node,
        sync_lock: LockId,
        leader_tx: watch::Sender<Option<Term>>,
        proof: SharedProof,
        ready: oneshot::Sender<Result<(), Error>>,
    ) -> MemberActor<C> {
        let router = node.router().for_agent(&fresh);
        MemberActor {
            core,
            node,
            router,
            fresh: Some(fresh),
            sync_lock,
            epoch: Instant::now(),
            calls: HashMap::new(),
            next_call: 1,
            leader_tx,
            proof,
            syncs: HashMap::new(),
            timer: None,
            settle_scheduled: false,
            ready: Some(ready),
            stop_waiters: Vec::new(),
            released: false,
            record: None,
        }
    }

    /// Keeps the largest accepted term in `record` (see `crate::remembered`).
    pub(crate) fn with_record(mut self, record: Option<TermRecord>) -> MemberActor<C> {
        self.record = record;
        self
    }

    /// Records the core's accepted term if it grew, before any effect of the step that
    /// accepted it is carried out. A member that cannot record it stops: acknowledging a term
    /// it would forget could let a later leader take a lower one.
    fn keep_accepted(&mut self, ctx: &mut Context<Self>) -> bool {
        let (Some(record), Some(term)) = (&mut self.record, self.core.accepted()) else {
            return true;
        };
        match record.keep(term) {
            Ok(()) => true,
            Err(err) => {
                tracing::error!(member = %self.core.me(), %err, "cannot record the accepted term; stopping");
                self.release();
                ctx.stop();
                false
            }
        }
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn me(&self) -> MemberId {
        self.core.me().clone()
    }

    /// Before any input: a majority-mode leader whose leases no longer prove a majority steps
    /// down, so nothing it answers next rests on an expired lease.
    fn check_leases(&mut self, ctx: &mut Context<Self>) {
        let router = self.router.clone();
        let now = self.now();
        let effects = self.core.check_leases(|n| lease_valid(&router, n), now);
        if !effects.is_empty() {
            self.execute(effects, ctx);
        }
    }

    /// Carries out the core's effects, feeding delivery failures back to it.
    fn execute(&mut self, effects: Vec<MemberEffect<C>>, ctx: &mut Context<Self>) {
        self.execute_effects(effects, ctx);
        self.publish_proof();
    }

    fn publish_proof(&self) {
        *self.proof.write().unwrap_or_else(PoisonError::into_inner) = self.core.leader_proof();
    }

    fn execute_effects(&mut self, effects: Vec<MemberEffect<C>>, ctx: &mut Context<Self>) {
        let mut queue = std::collections::VecDeque::from(effects);
        // Checked before each effect: a delivery failure fed back may make the core accept.
        while self.keep_accepted(ctx)
            && let Some(effect) = queue.pop_front()
        {
            let now = self.now();
            match effect {
                MemberEffect::StartSync { attempt, nodes } => self.start_sync(attempt, nodes, ctx),
                MemberEffect::EndSync { attempt } => {
                    // Dropping the transaction ends it and releases the sync lock.
                    self.syncs.remove(&attempt);
                }
                MemberEffect::Stopped { reason } => {
                    debug!(member = %self.me(), %reason, "member stopped by its callbacks");
                    self.release();
                    ctx.stop();
                }
                other => {
                    if let Some(more) = self.send(other, now) {
                        queue.extend(more);
                    }
                }
            }
        }
    }

    /// Carries out an effect that needs no actor context; returns what the core says to a
    /// delivery failure.
    fn send(&mut self, effect: MemberEffect<C>, now: Duration) -> Option<Vec<MemberEffect<C>>> {
        match effect {
            MemberEffect::ToServer { node, request } => {
                match self.router.send_server(&node, request) {
                    Ok(()) => None,
                    Err(err) => {
                        trace!(member = %self.me(), %node, %err, "lock server unreachable");
                        Some(self.core.server_unreachable(&node, now))
                    }
                }
            }
            MemberEffect::Agent(effect) => {
                let me = self.me();
                if let Some(agent) = self.core.agent_mut() {
                    // The agent actor's executor: it also tells the agent of a lock server it
                    // cannot reach; the member reassesses at its next settle.
                    let _ =
                        state_machine::execute(&self.router, agent, vec![effect], &mut |effect| {
                            note_agent_effect(&me, effect);
                            ControlFlow::Continue(())
                        });
                }
                None
            }
            MemberEffect::ToMember { to, msg } => self.send_member(&to, &msg, now),
            MemberEffect::Reply { call, result } => {
                if let Some((reply, _)) = self.calls.remove(&call) {
                    let _ = reply.send(result);
                }
                None
            }
            MemberEffect::LeaderChanged(term) => {
                // The proof first: whoever sees the new leader on the watch and asks
                // `is_leader` gets an answer that agrees with it.
                self.publish_proof();
                self.leader_tx.send_replace(term);
                None
            }
            MemberEffect::StartSync { .. }
            | MemberEffect::EndSync { .. }
            | MemberEffect::Stopped { .. } => None,
        }
    }

    fn send_member(
        &mut self,
        to: &MemberId,
        msg: &Peer<C>,
        now: Duration,
    ) -> Option<Vec<MemberEffect<C>>> {
        let payload = match codec::encode(msg, MAX_PAYLOAD) {
            Ok(p) => p,
            Err(err) => {
                warn!(member = %self.me(), %to, %err, "cannot encode a member message; dropped");
                return None;
            }
        };
        match self.router.send_member(to, payload) {
            Ok(()) => None,
            Err(RouteError::UnknownMember(m)) => Some(self.core.member_unreachable(&m, now)),
            Err(err) => {
                trace!(member = %self.me(), %to, %err, "member message not delivered");
                None
            }
        }
    }

    fn start_sync(&mut self, attempt: u64, nodes: Vec<NodeId>, ctx: &mut Context<Self>) {
        let node = self.node.clone();
        let lock = self.sync_lock.clone();
        let me = self.me();
        let take = async move {
            let options = Options {
                abort_on_deadlock: true,
                await_nodes: false,
            };
            let txn = begin_transaction(&node, options).await.ok()?;
            match txn.lock_on(lock, Mode::WRITE, &nodes, Req::AllAlive).await {
                Ok(_) => Some(txn),
                Err(err) => {
                    debug!(member = %me, attempt, %err, "sync lock not taken");
                    None
                }
            }
        };
        let fut = async move {
            actix::clock::timeout(SYNC_TIMEOUT, take)
                .await
                .ok()
                .flatten()
        };
        ctx.spawn(
            fut.into_actor(self)
                .map(move |txn, _act, ctx| ctx.notify(SyncDone { attempt, txn })),
        );
    }

    /// After every input: settle once the mailbox's burst is done, and keep the timer right.
    fn after(&mut self, ctx: &mut Context<Self>) {
        if !self.settle_scheduled {
            self.settle_scheduled = true;
            ctx.notify(Settle);
        }
    }

    fn reschedule(&mut self, ctx: &mut Context<Self>) {
        let next = self
            .core
            .next_deadline()
            .into_iter()
            .chain(self.calls.values().map(|(_, d)| *d))
            .min();
        match (next, &self.timer) {
            (Some(at), Some((t, _))) if *t == at => {}
            (next, _) => {
                if let Some((_, handle)) = self.timer.take() {
                    ctx.cancel_future(handle);
                }
                if let Some(at) = next {
                    let wait = at.saturating_sub(self.now()) + Duration::from_millis(1);
                    let handle = ctx.run_later(wait, |act, ctx| {
                        act.timer = None;
                        ctx.notify(Tick);
                    });
                    self.timer = Some((at, handle));
                }
            }
        }
    }

    fn client_call(
        &mut self,
        leader: bool,
        req: C::Call,
        timeout: Duration,
        reply: ReplyTx<C>,
        ctx: &mut Context<Self>,
    ) {
        let call = CallId(self.next_call);
        self.next_call += 1;
        let now = self.now();
        let deadline = now + timeout;
        self.calls.insert(call, (reply, deadline));
        let effects = if leader {
            self.core.leader_call(call, req, deadline, now)
        } else {
            self.core.call(call, req, now)
        };
        self.execute(effects, ctx);
    }

    fn info(&self) -> MemberInfo {
        MemberInfo {
            me: self.core.me().clone(),
            role: self.core.role(),
            leader: self.core.leader().cloned(),
            candidates: self.core.candidates(),
            workers: self.core.workers(),
            alive: self.core.alive(),
            nodes: self.core.nodes(),
            mode: self.core.mode(),
            group_nodes: self.core.group_nodes(),
        }
    }

    /// Says goodbye, releases the locks and watches, answers every caller, unregisters. Done
    /// once, whichever way the member stops.
    fn release(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        let now = self.now();
        let effects = self.core.stop("stopped");
        for effect in effects {
            let _ = self.send(effect, now);
        }
        self.syncs.clear();
        for (_, (reply, _)) in self.calls.drain() {
            let _ = reply.send(Err(CallError::Stopped("stopped".into())));
        }
        self.router.unregister_agent();
        self.router.unregister_member();
        self.leader_tx.send_replace(None);
        *self.proof.write().unwrap_or_else(PoisonError::into_inner) = None;
        for w in self.stop_waiters.drain(..) {
            let _ = w.send(());
        }
    }
}

impl<C: Callbacks> Actor for MemberActor<C> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(fresh) = self.fresh.take() {
            let member = ctx.address().recipient();
            self.router
                .register_agent(fresh, ctx.address().recipient(), Some(member));
        }
        // Registered first, then the nodes read: a node that comes up in between is reported
        // by an event too, and a second report changes nothing.
        let nodes = self.node.nodes();
        let now = self.now();
        match self.core.start(&nodes, now) {
            Ok(effects) => {
                if let Some(ready) = self.ready.take() {
                    let _ = ready.send(Ok(()));
                }
                debug!(member = %self.me(), role = %self.core.role(), "member started");
                self.execute(effects, ctx);
                self.after(ctx);
            }
            Err(reason) => {
                if let Some(ready) = self.ready.take() {
                    let _ = ready.send(Err(Error::Init(reason)));
                }
                self.released = true;
                self.router.unregister_agent();
                self.router.unregister_member();
                ctx.stop();
            }
        }
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.release();
        trace!(member = %self.me(), "member actor stopped");
    }
}

impl<C: Callbacks> Drop for MemberActor<C> {
    fn drop(&mut self) {
        // After a panic the actor is dropped without `stopped`: still leave properly.
        self.release();
    }
}

impl<C: Callbacks> Handler<Deliver> for MemberActor<C> {
    type Result = ();

    fn handle(&mut self, msg: Deliver, ctx: &mut Self::Context) {
        self.check_leases(ctx);
        let now = self.now();
        let effects = match msg {
            Deliver::Message(msg) => self.core.deliver(msg, now),
            Deliver::NodeUp(node) => self.core.node_up(&node, now),
            Deliver::NodeDown(node, _) => self.core.node_down(&node, now),
        };
        self.execute(effects, ctx);
        self.after(ctx);
    }
}

impl<C: Callbacks> Handler<MemberDelivery> for MemberActor<C> {
    type Result = ();

    fn handle(&mut self, msg: MemberDelivery, ctx: &mut Self::Context) {
        self.check_leases(ctx);
        let envelope: Peer<C> = match codec::decode(&msg.payload, codec::DEFAULT_MAX_FRAME) {
            Ok(e) => e,
            Err(err) => {
                warn!(member = %self.me(), from = %msg.from, %err, "malformed member message dropped");
                return;
            }
        };
        let now = self.now();
        let effects = self.core.peer(&msg.from, envelope, now);
        self.execute(effects, ctx);
        self.after(ctx);
    }
}

impl<C: Callbacks> Handler<Client<C>> for MemberActor<C> {
    type Result = ();

    fn handle(&mut self, msg: Client<C>, ctx: &mut Self::Context) {
        self.check_leases(ctx);
        let now = self.now();
        match msg {
            Client::LeaderCall {
                req,
                timeout,
                reply,
            } => self.client_call(true, req, timeout, reply, ctx),
            Client::Call {
                req,
                timeout,
                reply,
            } => self.client_call(false, req, timeout, reply, ctx),
            Client::LeaderCast(msg) => {
                let effects = self.core.leader_cast(msg, now);
                self.execute(effects, ctx);
            }
            Client::Cast(msg) => {
                let effects = self.core.cast(msg, now);
                self.execute(effects, ctx);
            }
            Client::Info(msg) => {
                let effects = self.core.info(msg, now);
                self.execute(effects, ctx);
            }
            Client::Broadcast { msg, reply } => match self.core.broadcast(msg, now) {
                Ok(effects) => {
                    self.execute(effects, ctx);
                    let _ = reply.send(Ok(()));
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            Client::Query(reply) => {
                let _ = reply.send(self.info());
            }
            Client::Stop(done) => {
                if let Some(done) = done {
                    self.stop_waiters.push(done);
                }
                self.release();
                ctx.stop();
                return;
            }
        }
        self.after(ctx);
    }
}

impl<C: Callbacks> Handler<SyncDone> for MemberActor<C> {
    type Result = ();

    fn handle(&mut self, msg: SyncDone, ctx: &mut Self::Context) {
        self.check_leases(ctx);
        let ok = msg.txn.is_some();
        if let Some(txn) = msg.txn {
            self.syncs.insert(msg.attempt, txn);
        }
        let now = self.now();
        let effects = self.core.sync_result(msg.attempt, ok, now);
        self.execute(effects, ctx);
        self.after(ctx);
    }
}

impl<C: Callbacks> Handler<Settle> for MemberActor<C> {
    type Result = ();

    fn handle(&mut self, _msg: Settle, ctx: &mut Self::Context) {
        self.check_leases(ctx);
        self.settle_scheduled = false;
        let now = self.now();
        let effects = self.core.settle(now);
        self.execute(effects, ctx);
        self.reschedule(ctx);
    }
}

impl<C: Callbacks> Handler<Tick> for MemberActor<C> {
    type Result = ();

    fn handle(&mut self, _msg: Tick, ctx: &mut Self::Context) {
        self.check_leases(ctx);
        let now = self.now();
        let expired: Vec<CallId> = self
            .calls
            .iter()
            .filter(|(_, (_, d))| *d <= now)
            .map(|(c, _)| *c)
            .collect();
        for call in expired {
            if let Some((reply, _)) = self.calls.remove(&call) {
                let _ = reply.send(Err(CallError::Timeout));
            }
        }
        let effects = self.core.tick(now);
        self.execute(effects, ctx);
        self.after(ctx);
    }
}
