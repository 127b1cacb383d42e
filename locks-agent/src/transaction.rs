//! The `Transaction` handle: what client code holds.
//!
//! A transaction starts without an agent actor. While every lock it asks for is on its own
//! node and granted at once, the handle takes it on the caller's thread through the node's
//! table (the fast path, `crate::fast`). The first request that has to wait, names another
//! node, or needs the agent's services (events, watches, deadlock resolution) starts the agent
//! actor, which takes the transaction over; from then on every call is a message to it and the
//! answer comes back on a oneshot channel. Requests are sent with `do_send`, so a request is
//! made when the call is made; the future of a call that waits (`lock`, `lock_on`,
//! `await_all_locks`) withdraws what the call asked for when it is dropped before its answer
//! (`transaction/pending.rs`), so that nobody waits behind a request nobody awaits.
//!
//! Dropping the handle ends the transaction and releases its locks (also when the task that owns
//! it panics, since the handle is dropped while unwinding).

use crate::actor::{
    Agent, AwaitAll, Convert, Dot, GetStatus, LockArgs, LockCall, Outcome, SetOptions, SurrenderTo,
    Unlock, next_call, outcome_error,
};
use crate::core::Locked;
use crate::core::{LockResult, TransactionStatus};
use crate::error::Error;
use crate::options::{Options, Req};
use actix::prelude::*;
use fast::{Fast, Queued};
use futures::channel::oneshot;
use futures::future::Either;
use locks_core::{AgentId, LockId, Mode, NodeId};
use locks_server::Node;
use locks_server::embed::{NodeInternals, Presence, Touched};
use pending::Pending;
use smallvec::SmallVec;
use std::future::Future;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

mod agent_calls;
mod bounded;
pub(crate) mod fast;
mod pending;
mod wait_time;
mod watching;

/// How many requests [`Transaction::lock_objects`] sends before it waits for the agent to accept
/// them. Sent all at once, a long list filled the agent's mailbox with one envelope per lock, and
/// the agent, handling them in one go, the lock server's with as many more: about 250 bytes per
/// lock that lived only until handled but left holes between the long-lived allocations made
/// meanwhile, which the allocator kept (bench MEM shows it). A slice keeps those transient
/// messages to a few hundred kilobytes; its acceptance costs one round trip per slice.
const LOCK_OBJECTS_SLICE: usize = 1024;

/// The answer of the fast path, after taking one unit of the task's budget: a loop of
/// transactions that are all granted at once would otherwise never give the other tasks of its
/// thread a turn (on the node's own thread, not even the agents and the lock server).
async fn cooperative<T>(result: T) -> T {
    tokio::task::coop::consume_budget().await;
    result
}

/// The answer of the fast path to a transaction's first lock, at once: the task does not take
/// from its budget here, where it would yield holding the lock it just got; `end` takes the
/// unit instead, once the lock is released. A task that yielded right after taking its one
/// lock makes every other task of the thread that wants it queue (and start an agent) behind
/// a holder that is not running. A loop of transactions still gives up the thread once per
/// transaction, and a transaction's further locks take their unit as they are granted.
async fn at_once<T>(result: T) -> T {
    result
}

/// Starts a transaction on `node`. Costs no actor and no message: the transaction's agent
/// actor starts only when it is needed (see the module documentation).
///
/// Fails only when the node has stopped. The transaction's locks are released by
/// [`Transaction::end`], or when the handle is dropped (a panicking task releases them too).
///
/// ```
/// use locks_agent::{Options, TransactionStatus, begin_transaction};
/// use locks_core::{Mode, lock_id};
/// use locks_server::{Node, NodeConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let node = Node::start(NodeConfig::new("doc")).await.unwrap();
/// let txn = begin_transaction(&node, Options::default()).await.unwrap();
/// // A write lock on one row; IX on ["bank"] and ["bank", "accounts"] come with it.
/// txn.lock(lock_id!["bank", "accounts", 42u64], Mode::WRITE).await.unwrap();
/// // Another transaction asks to read the row, and queues behind the writer.
/// let other = begin_transaction(&node, Options::default()).await.unwrap();
/// other.lock_nowait(lock_id!["bank", "accounts", 42u64], Mode::READ).await.unwrap();
/// assert_eq!(other.status().await.unwrap(), TransactionStatus::Waiting);
/// txn.end().await.unwrap(); // releases the row: the reader gets it
/// other.await_all_locks().await.unwrap();
/// # }
/// ```
pub async fn begin_transaction(node: &Node, options: Options) -> Result<Transaction, Error> {
    begin_now(node, options)
}

/// What [`begin_transaction`] does, on the caller's thread (it waits for nothing).
pub(crate) fn begin_now(node: &Node, options: Options) -> Result<Transaction, Error> {
    if !node.is_running() {
        return Err(locks_server::Error::Stopped.into());
    }
    let presence = node.begin_agent();
    node.router().metrics().transactions_begun.increment(1);
    Ok(Transaction {
        presence,
        node: node.clone(),
        options,
        agent: Mutex::new(None),
        deferred: Mutex::new(Vec::new()),
        touched: Touched::default(),
        outcome: OnceLock::new(),
        ended: false,
    })
}

/// Starts a transaction on `node`, asks for every lock of `objects` on this node and waits until
/// it holds them all (the Erlang original's `begin_transaction(Objects, Options)`). Returns the
/// transaction with what [`Transaction::await_all_locks`] reports. The list is the one
/// [`Transaction::lock_objects`] takes: `(lock, mode)` pairs, all on `node`; a lock listed twice
/// takes the stronger (or combined) mode, as two `lock` calls would.
///
/// An empty list returns at once with an empty result. If the locks cannot be had (a request is refused, or the transaction cannot be served), the
/// transaction is ended, which releases whatever it got, and the error is returned.
///
/// ```
/// use locks_agent::{Options, begin_transaction_with};
/// use locks_core::{Mode, lock_id};
/// # use locks_server::{Node, NodeConfig};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let node = Node::start(NodeConfig::new("doc")).await.unwrap();
/// let objects = [(lock_id!["a"], Mode::WRITE), (lock_id!["b"], Mode::READ)];
/// let (txn, held) = begin_transaction_with(&node, objects, Options::default())
///     .await
///     .unwrap();
/// assert_eq!(held.locks.len(), 2);
/// assert!(held.deadlocks.is_empty());
/// txn.end().await.unwrap();
/// # }
/// ```
pub async fn begin_transaction_with(
    node: &Node,
    objects: impl IntoIterator<Item = (LockId, Mode)>,
    options: Options,
) -> Result<(Transaction, LockResult), Error> {
    let txn = begin_transaction(node, options).await?;
    let mut objects = objects.into_iter().peekable();
    if objects.peek().is_none() {
        // Nothing to wait for (`await_all_locks` would wait for a first request).
        return Ok((txn, LockResult::default()));
    }
    // On an error the handle is dropped here, which ends the agent and releases its locks.
    txn.lock_objects(objects).await?;
    let held = txn.await_all_locks().await?;
    Ok((txn, held))
}

/// A running transaction: the client's handle on its locks and, once started, its agent.
pub struct Transaction {
    /// The agent id, live for the router until the end (which makes a mailbox for the
    /// transaction when a message comes before it has an agent).
    presence: Presence,
    node: Node,
    /// The options the agent starts with.
    options: Options,
    /// The agent actor, once the transaction needed one (see `crate::fast`).
    agent: Mutex<Option<Addr<Agent>>>,
    /// Subscriptions made by [`Transaction::events_once_started`] while there was no agent:
    /// handed to the agent when it starts, before anything else (locked after `agent`).
    deferred: Mutex<Vec<futures::channel::mpsc::UnboundedSender<crate::core::TransactionEvent>>>,
    /// The shards of the node's table the fast path put requests in (what `end` releases
    /// while there is no agent).
    touched: Touched,
    /// Why the agent stopped, shared with it: made when the agent starts (or when a failed
    /// call asks), so a transaction that never needs one allocates nothing for it.
    outcome: OnceLock<Outcome>,
    ended: bool,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("agent", self.id())
            .finish_non_exhaustive()
    }
}

impl Transaction {
    /// The id of this transaction's agent.
    pub fn id(&self) -> &AgentId {
        self.presence.id()
    }

    /// The agent's slot, locked.
    pub(crate) fn agent_slot(&self) -> std::sync::MutexGuard<'_, Option<Addr<Agent>>> {
        self.agent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps a subscription for the agent to take when it starts (called with the agent's
    /// slot locked and empty, so that `start_agent` cannot miss it).
    pub(crate) fn defer_subscription(
        &self,
        tx: futures::channel::mpsc::UnboundedSender<crate::core::TransactionEvent>,
    ) {
        self.deferred
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tx);
    }

    /// The agent actor, started now if the transaction has none yet.
    pub(crate) fn addr(&self) -> Addr<Agent> {
        let mut agent = self.agent.lock().unwrap_or_else(PoisonError::into_inner);
        self.start_agent(&mut agent, None).0
    }

    pub(crate) fn outcome(&self) -> &Outcome {
        self.outcome.get_or_init(Outcome::default)
    }

    /// The node the agent runs on.
    pub fn node(&self) -> &Node {
        &self.node
    }

    fn local(&self) -> SmallVec<[NodeId; 1]> {
        smallvec::smallvec![self.node.id().clone()]
    }

    /// Whether a request on `nodes` with `req` is one the fast path may take: on this node
    /// alone, with the default requirement.
    fn is_local(&self, nodes: &[NodeId], req: Req) -> bool {
        req == Req::All && nodes.len() == 1 && nodes[0] == *self.node.id()
    }

    /// The answer to a blocking call: its reply, or why the agent stopped. Owns what it needs,
    /// so the request can be sent before the returned future is first polled.
    fn wait<T: Send + 'static>(
        &self,
        rx: oneshot::Receiver<Result<T, Error>>,
    ) -> impl Future<Output = Result<T, Error>> + Send + 'static {
        let outcome = self.outcome().clone();
        async move {
            match rx.await {
                Ok(result) => result,
                Err(_) => Err(outcome_error(&outcome)),
            }
        }
    }

    fn send_request(
        addr: &Addr<Agent>,
        args: LockArgs,
        accepted: Option<oneshot::Sender<Result<(), Error>>>,
    ) {
        addr.do_send(LockCall {
            args,
            reply: None,
            queued: None,
            accepted,
        });
    }

    /// Locks `lock` in `mode` on this transaction's node and waits until this and every earlier
    /// request of the transaction is granted. Returns the lock as granted, with the fencing
    /// version of the node, and the locks involved in the deadlocks that were resolved on the
    /// way (empty when there were none). [`Transaction::lost`] says when it is no longer held.
    ///
    /// ```
    /// use locks_agent::{Options, begin_transaction};
    /// use locks_core::{Mode, lock_id};
    /// # use locks_server::{Node, NodeConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let node = Node::start(NodeConfig::new("doc")).await.unwrap();
    /// let first = begin_transaction(&node, Options::default()).await.unwrap();
    /// let a = first.lock(lock_id!["row", 1], Mode::WRITE).await.unwrap();
    /// first.end().await.unwrap();
    /// let second = begin_transaction(&node, Options::default()).await.unwrap();
    /// let b = second.lock(lock_id!["row", 1], Mode::WRITE).await.unwrap();
    /// // Each new holder gets a larger version: a resource can refuse the older one.
    /// assert!(b.version_on(node.id()) > a.version_on(node.id()));
    /// # }
    /// ```
    ///
    /// # Cancellation
    ///
    /// The request is made when `lock` is called, not when the future is first polled.
    /// Dropping the future before it returns (`tokio::time::timeout`, a `select!` branch that
    /// lost, an aborted task, or never awaiting it) withdraws what the call asked for, on every
    /// node, as [`Transaction::unlock`] of a waiting request would (other waiters are served,
    /// the deadlock detection forgets the wait): a request the call made is withdrawn, a mode
    /// it raised (an upgrade of a lock held in a weaker mode) goes back to the mode held before.
    /// Only what this call asked for is undone: a mode held before stays, and so does a request
    /// another call made on the same lock since. A grant that comes before the withdrawal is
    /// withdrawn with it; a grant already answered when the future is dropped stays held, and
    /// is reported as any grant ([`Transaction::lock_state`] says `Held`, and
    /// [`Transaction::events`] carried it). Calls that add nodes or a stronger requirement to
    /// a request already made keep them. Use [`Transaction::lock_nowait`] to queue a request
    /// that stays without anybody waiting for it.
    pub fn lock(
        &self,
        lock: impl Into<LockId>,
        mode: Mode,
    ) -> impl Future<Output = Result<Locked, Error>> + Send + 'static {
        let first = self.touched.none();
        let (addr, lock, queued) = match self.try_fast(lock.into(), mode) {
            Fast::Done(result) if first => {
                return Either::Left(Either::Left(at_once(result)));
            }
            Fast::Done(result) => return Either::Left(Either::Right(cooperative(result))),
            Fast::Agent(addr, lock, queued) => (addr, lock, queued),
        };
        tracing::trace!(target: "lock_path", hop = 1, %lock, queued = queued.is_some(), "to the agent");
        Either::Right(self.lock_by_agent(addr, lock, mode, queued, None))
    }

    /// Sends `lock` in `mode` on this node to the agent, and returns the wait for its answer.
    pub(crate) fn lock_by_agent(
        &self,
        addr: Addr<Agent>,
        lock: LockId,
        mode: Mode,
        queued: Queued,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Locked, Error>> + Send + 'static {
        let args = LockArgs {
            wait,
            ..LockArgs::new(lock, mode, self.local(), Req::All)
        };
        self.call_lock(addr, args, queued)
    }

    /// Locks `lock` on several nodes, held when `req` is met (see [`Req`]), and waits as
    /// [`Transaction::lock`] does.
    /// Like `lock`, the request is made at the call, and dropping the future before it returns
    /// withdraws it on every node it names (see the cancellation rule of [`Transaction::lock`]).
    ///
    /// Two nodes on loopback, and a write lock held on both (a service would use
    /// [`Req::Majority`] over three or more nodes, so that one node's loss does not stop it):
    ///
    /// ```
    /// use locks_agent::{Options, Req, begin_transaction};
    /// use locks_core::{Mode, lock_id};
    /// use locks_server::{Node, NodeConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let loopback = "127.0.0.1:0".parse().unwrap(); // any free port
    /// let a = Node::start(NodeConfig::new("a").listen(loopback).cookie("secret")).await.unwrap();
    /// let b = Node::start(NodeConfig::new("b").listen(loopback).cookie("secret")).await.unwrap();
    /// a.connect(b.local_addr().unwrap()).await.unwrap();
    ///
    /// let txn = begin_transaction(&a, Options::default()).await.unwrap();
    /// let nodes = [a.id().clone(), b.id().clone()];
    /// let locked = txn.lock_on(lock_id!["jobs", 7], Mode::WRITE, &nodes, Req::All).await.unwrap();
    /// // One fencing version per granting node: send them with every write to the resource.
    /// assert!(locked.version_on(b.id()).is_some());
    /// txn.end().await.unwrap();
    /// # }
    /// ```
    pub fn lock_on(
        &self,
        lock: impl Into<LockId>,
        mode: Mode,
        nodes: &[NodeId],
        req: Req,
    ) -> impl Future<Output = Result<Locked, Error>> + Send + 'static {
        self.lock_on_within(lock.into(), mode, nodes, req, None)
    }

    /// Queues a lock request on this node without waiting for the grant; returns once the agent
    /// has accepted it. Use [`Transaction::await_all_locks`] to wait.
    pub async fn lock_nowait(&self, lock: impl Into<LockId>, mode: Mode) -> Result<(), Error> {
        let (addr, lock) = match self.try_fast(lock.into(), mode) {
            Fast::Done(result) => return cooperative(result).await.map(|_| ()),
            Fast::Agent(addr, lock, _) => (addr, lock),
        };
        let (tx, rx) = oneshot::channel();
        Self::send_request(
            &addr,
            LockArgs::new(lock, mode, self.local(), Req::All),
            Some(tx),
        );
        self.wait(rx).await
    }

    /// [`Transaction::lock_nowait`] on several nodes.
    pub async fn lock_nowait_on(
        &self,
        lock: impl Into<LockId>,
        mode: Mode,
        nodes: &[NodeId],
        req: Req,
    ) -> Result<(), Error> {
        let lock = lock.into();
        let (addr, lock) = if self.is_local(nodes, req) {
            match self.try_fast(lock, mode) {
                Fast::Done(result) => return cooperative(result).await.map(|_| ()),
                Fast::Agent(addr, lock, _) => (addr, lock),
            }
        } else {
            (self.addr(), lock)
        };
        let (tx, rx) = oneshot::channel();
        let nodes = nodes.iter().cloned().collect();
        Self::send_request(&addr, LockArgs::new(lock, mode, nodes, req), Some(tx));
        self.wait(rx).await
    }

    /// Queues several lock requests on this node (like `lock_nowait` for each).
    ///
    /// The requests go out in slices of 1,024, each waiting for the agent to accept the slice's
    /// last one before the next is sent, so that a long list never sits whole in the mailboxes
    /// (the memory those messages took stayed with the allocator). Dropping the future before it
    /// completes leaves the slices sent so far queued, as dropping a sequence of `lock_nowait`
    /// calls would.
    pub async fn lock_objects(
        &self,
        objects: impl IntoIterator<Item = (LockId, Mode)>,
    ) -> Result<(), Error> {
        // The agent handles messages in order, so a slice's last acceptance covers the slice
        // (only the last request asks for one); an earlier refusal is reported by the status.
        let mut objects = objects.into_iter().peekable();
        // On the fast path while every lock is granted at once; a refusal there is the
        // caller's answer at once (the table changed nothing for it).
        let addr = loop {
            let Some((lock, mode)) = objects.next() else {
                return Ok(());
            };
            match self.try_fast(lock, mode) {
                Fast::Done(Ok(_)) => tokio::task::coop::consume_budget().await,
                Fast::Done(Err(err)) => return Err(err),
                Fast::Agent(addr, lock, _) => {
                    let (tx, rx) = oneshot::channel();
                    let last = objects.peek().is_none();
                    Self::send_request(
                        &addr,
                        LockArgs::new(lock, mode, self.local(), Req::All),
                        Some(tx),
                    );
                    let accepted = self.wait(rx).await;
                    if last {
                        return accepted;
                    }
                    break addr;
                }
            }
        };
        let mut sent = 0;
        while let Some((lock, mode)) = objects.next() {
            sent += 1;
            let last = objects.peek().is_none();
            if last || sent % LOCK_OBJECTS_SLICE == 0 {
                let (tx, rx) = oneshot::channel();
                Self::send_request(
                    &addr,
                    LockArgs::new(lock, mode, self.local(), Req::All),
                    Some(tx),
                );
                let accepted = self.wait(rx).await;
                // Only the very last request's outcome is the caller's answer, as when every
                // request went out at once: a slice's acceptance only paces the sending.
                if last {
                    return accepted;
                }
            } else {
                Self::send_request(
                    &addr,
                    LockArgs::new(lock, mode, self.local(), Req::All),
                    None,
                );
            }
        }
        Ok(())
    }

    /// Waits until every request of the transaction is granted; returns the deadlocks resolved
    /// so far. With no requests at all it waits until one is made and granted.
    ///
    /// Dropping the future before it returns withdraws nothing: `await_all_locks` asks for
    /// nothing itself, and the requests made with [`Transaction::lock_nowait`] stay queued
    /// (withdraw them with [`Transaction::unlock`], or end the transaction).
    pub async fn await_all_locks(&self) -> Result<LockResult, Error> {
        if let Some(result) = self.fast_result() {
            return Ok(result);
        }
        let (tx, rx) = oneshot::channel();
        let (addr, call) = (self.addr(), next_call());
        addr.do_send(AwaitAll(call, tx));
        Pending::new(rx, self.outcome().clone(), addr, call).await
    }

    /// The transaction's status now.
    pub async fn status(&self) -> Result<TransactionStatus, Error> {
        if let Some(status) = self.fast_status() {
            return Ok(status);
        }
        self.addr()
            .send(GetStatus)
            .await
            .map_err(|_| outcome_error(self.outcome()))
    }

    /// Releases one lock of the running transaction, or withdraws its pending request. Other
    /// agents waiting for it are served; the deadlock detection forgets it.
    pub async fn unlock(&self, lock: impl Into<LockId>) -> Result<(), Error> {
        let lock = lock.into();
        if let Some(result) = self.fast_unlock(&lock) {
            return result;
        }
        self.addr()
            .send(Unlock(lock))
            .await
            .map_err(|_| outcome_error(self.outcome()))?
    }

    /// Converts a lock down to a weaker mode (for example `X` to `S`), at once: the request
    /// takes the weaker mode on every node, held or not yet (a pending request then waits for
    /// the weaker mode, and a `lock` call waiting on it returns once that is held). Fails if
    /// there is no request on `lock` or `mode` is not weaker than the request's mode.
    ///
    /// Should a lock server refuse the conversion (its copy of the lock is not in the mode the
    /// transaction thinks, which the protocol does not produce), the transaction releases that
    /// copy and counts the node as having refused the request: [`Transaction::status`] and
    /// blocked calls then report `CannotServe` if the request cannot be met without it.
    pub async fn convert(&self, lock: impl Into<LockId>, mode: Mode) -> Result<(), Error> {
        self.addr()
            .send(Convert(lock.into(), mode))
            .await
            .map_err(|_| outcome_error(self.outcome()))?
    }

    /// Changes the transaction's options while it runs (the Erlang original's `change_flag/3`,
    /// for both of its flags at once). The status is settled again before this returns: a
    /// transaction waiting for a node that is down becomes
    /// [`TransactionStatus::CannotServe`] when `await_nodes` is switched off, and the callers
    /// waiting for its locks fail with [`Error::CannotServe`], as when the node goes down
    /// without `await_nodes`. Switching `abort_on_deadlock` applies from the next deadlock on.
    ///
    /// ```
    /// # use locks_agent::{Options, begin_transaction};
    /// # use locks_server::{Node, NodeConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let node = Node::start(NodeConfig::new("doc")).await.unwrap();
    /// let txn = begin_transaction(&node, Options::default()).await.unwrap();
    /// txn.set_options(Options { await_nodes: true, ..Options::default() })
    ///     .await
    ///     .unwrap();
    /// assert!(txn.options().await.unwrap().await_nodes);
    /// # }
    /// ```
    pub async fn set_options(&self, options: Options) -> Result<(), Error> {
        self.addr()
            .send(SetOptions(options))
            .await
            .map_err(|_| outcome_error(self.outcome()))?
    }

    /// The options in force.
    pub async fn options(&self) -> Result<Options, Error> {
        if self
            .agent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
        {
            return Ok(self.options.clone());
        }
        self.addr()
            .send(crate::actor::GetOptions)
            .await
            .map_err(|_| outcome_error(self.outcome()))
    }

    /// Surrenders `lock`, which this transaction holds, to `to`, which waits for it, on each of
    /// `nodes` (the Erlang original's `surrender_nowait/4`). On each node the lock server
    /// checks that `to` waits or converts on the lock and, if so, moves this transaction's
    /// entries on the lock and its descendants to the back of their queues, behind `to`. The
    /// request stays: the transaction is waiting again, and [`Transaction::await_all_locks`]
    /// returns once it has the lock back. This is no deadlock: nothing is added to the
    /// deadlocks reported. Returns once every node has answered.
    ///
    /// Fails with [`RequestError::CannotSurrender`](crate::RequestError::CannotSurrender),
    /// naming the lock, `to` and the node, when the transaction does not hold the lock on a
    /// listed node (nothing is sent then) or when `to` does not wait for it there (the original
    /// kills the agent instead). Every node decides on its own: a refusal on one node does not
    /// undo the surrender on another, and the error names the first refusal.
    ///
    /// The race: `to` may stop waiting (be granted, withdraw, end) between the caller looking
    /// at the queue and the server receiving the surrender. The server decides on its queue at
    /// that moment, so the surrender is then refused and changes nothing; and if `to` leaves
    /// just after, the surrender stands and this transaction gets the lock back in queue order.
    ///
    /// ```
    /// use locks_agent::{Options, TransactionStatus, begin_transaction};
    /// use locks_core::{Mode, lock_id};
    /// # use locks_server::{Node, NodeConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let node = Node::start(NodeConfig::new("doc")).await.unwrap();
    /// let here = [node.id().clone()];
    /// let holder = begin_transaction(&node, Options::default()).await.unwrap();
    /// holder.lock(lock_id!["l"], Mode::WRITE).await.unwrap();
    /// let waiter = begin_transaction(&node, Options::default()).await.unwrap();
    /// let granted = waiter.lock(lock_id!["l"], Mode::WRITE);
    /// // Wait until the waiter is queued (a watch shows the queue).
    /// # use futures::StreamExt;
    /// let mut views = holder.watch(lock_id!["l"], &here).await.unwrap();
    /// while views.next().await.unwrap().2.waiting.is_empty() {}
    /// holder.surrender_nowait(lock_id!["l"], waiter.id(), &here).await.unwrap();
    /// granted.await.unwrap();
    /// assert_eq!(holder.status().await.unwrap(), TransactionStatus::Waiting);
    /// waiter.end().await.unwrap();
    /// assert!(holder.await_all_locks().await.unwrap().deadlocks.is_empty());
    /// # }
    /// ```
    pub async fn surrender_nowait(
        &self,
        lock: impl Into<LockId>,
        to: &AgentId,
        nodes: &[NodeId],
    ) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        self.addr().do_send(SurrenderTo {
            lock: lock.into(),
            to: to.clone(),
            nodes: nodes.to_vec(),
            reply: tx,
        });
        self.wait(rx).await
    }

    /// The agent's wait-for graph in DOT, for debugging.
    pub async fn wait_for_graph(&self) -> Result<String, Error> {
        self.addr()
            .send(Dot)
            .await
            .map_err(|_| outcome_error(self.outcome()))
    }

    /// Ends the transaction: the agent stops and every lock is released.
    ///
    /// It waits for nothing. The transaction's locks on its own node are released before `end`
    /// returns, on the caller's thread, so that the next holder need not wait for the node's
    /// thread; except, when the caller is the node's own thread, what is beyond the first 256
    /// locks of one shard of the table: those are released by the node's lock server right
    /// after, a part at a time with the thread's other work let in between, so that no end
    /// holds the node's thread (and its links' heartbeats) for long. The handle unregisters
    /// the agent, so that messages to it fail when `end`
    /// returns, and tells it to stop; the agent then asks every lock server it used (its own
    /// node's again, for any request sent before `end` that reached the server after that
    /// release) to release its locks, on the node's thread. Returns the error that ended the
    /// transaction earlier, if one did (an abort on deadlock).
    pub async fn end(self) -> Result<(), Error> {
        let ended = self.end_now();
        // Released: the place to give the thread's other tasks a turn (see `at_once`).
        tokio::task::coop::consume_budget().await;
        ended
    }

    /// What `end` does, on the caller's thread: releases, and says why the agent stopped.
    pub(crate) fn end_now(mut self) -> Result<(), Error> {
        self.ended = true;
        self.finish();
        // No outcome was ever made: no agent ran, nothing can have gone wrong.
        let outcome = self
            .outcome
            .get()
            .and_then(|o| o.lock().unwrap_or_else(PoisonError::into_inner).clone());
        match outcome {
            None | Some(Error::Ended) => Ok(()),
            Some(other) => Err(other),
        }
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        // Every handle is dropped once, after `end` too: the one place to count an end.
        self.node.router().metrics().transactions_ended.increment(1);
        if !self.ended {
            self.finish();
        }
    }
}
