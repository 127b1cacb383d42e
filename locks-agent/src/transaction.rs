//! The `Transaction` handle: what client code holds.
//!
//! A transaction is one agent actor on a node. Every call is a message to it; the answer comes
//! back on a oneshot channel. Requests are sent with `do_send`, so once a call has been made the
//! request is queued for good: dropping the future of [`Transaction::lock`] before it completes
//! leaves the request queued, exactly as [`Transaction::lock_nowait`] would.
//!
//! Dropping the handle ends the transaction and releases its locks (also when the task that owns
//! it panics, since the handle is dropped while unwinding).

use crate::agent::{
    Agent, AwaitAll, Contacted, Convert, Dot, End, GetStatus, Outcome, Request, Unlock,
    outcome_error, release,
};
use crate::core::{LockResult, TransactionStatus};
use crate::error::Error;
use crate::options::{Options, Req};
use actix::prelude::*;
use futures::channel::oneshot;
use locks_core::{AgentId, LockId, Mode, NodeId};
use locks_server::Node;
use smallvec::SmallVec;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

/// How many requests [`Transaction::lock_objects`] sends before it waits for the agent to accept
/// them. Sent all at once, a long list filled the agent's mailbox with one envelope per lock, and
/// the agent, handling them in one go, the lock server's with as many more: about 250 bytes per
/// lock that lived only until handled but left holes between the long-lived allocations made
/// meanwhile, which the allocator kept (`BENCHMARKS.md`, MEM). A slice keeps those transient
/// messages to a few hundred kilobytes; its acceptance costs one round trip per slice.
const LOCK_OBJECTS_SLICE: usize = 1024;

/// Starts a transaction (an agent) on `node`.
pub async fn begin_transaction(node: &Node, options: Options) -> Result<Transaction, Error> {
    if !node.is_running() {
        return Err(locks_server::Error::Stopped.into());
    }
    let id = node.next_agent_id();
    let outcome: Outcome = Arc::new(Mutex::new(None));
    let contacted: Contacted = Arc::default();
    let (router, modes, agent_id, agent_outcome, agent_contacted) = (
        node.router().clone(),
        node.modes().clone(),
        id.clone(),
        outcome.clone(),
        contacted.clone(),
    );
    let addr = Agent::start_in_arbiter(node.arbiter(), move |_ctx| {
        Agent::new(
            agent_id,
            router,
            modes,
            options,
            agent_outcome,
            agent_contacted,
        )
    });
    Ok(Transaction {
        id,
        addr,
        node: node.clone(),
        outcome,
        contacted,
        ended: false,
    })
}

/// A running transaction: the client's handle on its agent.
pub struct Transaction {
    id: AgentId,
    addr: Addr<Agent>,
    node: Node,
    outcome: Outcome,
    /// The lock servers the agent used, for [`Transaction::end`] to release directly.
    contacted: Contacted,
    ended: bool,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("agent", &self.id)
            .finish_non_exhaustive()
    }
}

impl Transaction {
    /// The id of this transaction's agent.
    pub fn id(&self) -> &AgentId {
        &self.id
    }

    /// The node the agent runs on.
    pub fn node(&self) -> &Node {
        &self.node
    }

    fn local(&self) -> SmallVec<[NodeId; 1]> {
        smallvec::smallvec![self.node.id().clone()]
    }

    /// The answer to a blocking call: its reply, or why the agent stopped. Owns what it needs,
    /// so the request can be sent before the returned future is first polled.
    fn wait<T: Send + 'static>(
        &self,
        rx: oneshot::Receiver<Result<T, Error>>,
    ) -> impl Future<Output = Result<T, Error>> + Send + 'static {
        let outcome = self.outcome.clone();
        async move {
            match rx.await {
                Ok(result) => result,
                Err(_) => Err(outcome_error(&outcome)),
            }
        }
    }

    fn send_request(
        &self,
        lock: LockId,
        mode: Mode,
        nodes: SmallVec<[NodeId; 1]>,
        req: Req,
        reply: Option<crate::agent::LockReply>,
        accepted: Option<oneshot::Sender<Result<(), Error>>>,
    ) {
        self.addr.do_send(Request {
            lock,
            mode,
            nodes,
            req,
            reply,
            accepted,
        });
    }

    /// Locks `lock` in `mode` on this transaction's node and waits until this and every earlier
    /// request of the transaction is granted. Returns the locks involved in the deadlocks that
    /// were resolved on the way (empty when there were none).
    ///
    /// The request is made when `lock` is called, not when the future is first polled: dropping
    /// the future (or never awaiting it) leaves the request queued, as
    /// [`Transaction::lock_nowait`] would, and a later call or [`Transaction::await_all_locks`]
    /// waits for it too. Use [`Transaction::unlock`] to withdraw it.
    pub fn lock(
        &self,
        lock: impl Into<LockId>,
        mode: Mode,
    ) -> impl Future<Output = Result<Vec<LockId>, Error>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        self.send_request(lock.into(), mode, self.local(), Req::All, Some(tx), None);
        self.wait(rx)
    }

    /// Locks `lock` on several nodes, held when `req` is met (see [`Req`]), and waits as
    /// [`Transaction::lock`] does.
    /// Like `lock`, the request is made at the call.
    pub fn lock_on(
        &self,
        lock: impl Into<LockId>,
        mode: Mode,
        nodes: &[NodeId],
        req: Req,
    ) -> impl Future<Output = Result<Vec<LockId>, Error>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        self.send_request(
            lock.into(),
            mode,
            nodes.iter().cloned().collect(),
            req,
            Some(tx),
            None,
        );
        self.wait(rx)
    }

    /// Queues a lock request on this node without waiting for the grant; returns once the agent
    /// has accepted it. Use [`Transaction::await_all_locks`] to wait.
    pub async fn lock_nowait(&self, lock: impl Into<LockId>, mode: Mode) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        self.send_request(lock.into(), mode, self.local(), Req::All, None, Some(tx));
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
        let (tx, rx) = oneshot::channel();
        self.send_request(
            lock.into(),
            mode,
            nodes.iter().cloned().collect(),
            req,
            None,
            Some(tx),
        );
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
        let mut sent = 0;
        while let Some((lock, mode)) = objects.next() {
            sent += 1;
            let last = objects.peek().is_none();
            if last || sent % LOCK_OBJECTS_SLICE == 0 {
                let (tx, rx) = oneshot::channel();
                self.send_request(lock, mode, self.local(), Req::All, None, Some(tx));
                let accepted = self.wait(rx).await;
                // Only the very last request's outcome is the caller's answer, as when every
                // request went out at once: a slice's acceptance only paces the sending.
                if last {
                    return accepted;
                }
            } else {
                self.send_request(lock, mode, self.local(), Req::All, None, None);
            }
        }
        Ok(())
    }

    /// Waits until every request of the transaction is granted; returns the deadlocks resolved
    /// so far. With no requests at all it waits until one is made and granted.
    pub async fn await_all_locks(&self) -> Result<LockResult, Error> {
        let (tx, rx) = oneshot::channel();
        self.addr.do_send(AwaitAll(tx));
        self.wait(rx).await
    }

    /// The transaction's status now.
    pub async fn status(&self) -> Result<TransactionStatus, Error> {
        self.addr
            .send(GetStatus)
            .await
            .map_err(|_| outcome_error(&self.outcome))
    }

    /// Releases one lock of the running transaction, or withdraws its pending request. Other
    /// agents waiting for it are served; the deadlock detection forgets it.
    pub async fn unlock(&self, lock: impl Into<LockId>) -> Result<(), Error> {
        self.addr
            .send(Unlock(lock.into()))
            .await
            .map_err(|_| outcome_error(&self.outcome))?
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
        self.addr
            .send(Convert(lock.into(), mode))
            .await
            .map_err(|_| outcome_error(&self.outcome))?
    }

    /// The agent's wait-for graph in DOT, for debugging.
    pub async fn wait_for_graph(&self) -> Result<String, Error> {
        self.addr
            .send(Dot)
            .await
            .map_err(|_| outcome_error(&self.outcome))
    }

    /// Ends the transaction: the agent stops and every lock is released.
    ///
    /// It waits for nothing: the handle itself unregisters the agent and asks every lock
    /// server the agent used to release its locks, then tells the agent to stop. So when `end`
    /// returns, messages to the agent fail and each server has the release queued, as if the
    /// agent had done it; from another runtime this saves a wait for the node's thread. (A
    /// request still queued in the agent's mailbox may reach a server after the release: the
    /// server then finds the agent gone when it answers and releases that lock too, and the
    /// agent, stopping, releases any server it used since.) Returns the error that ended the
    /// transaction earlier, if one did (an abort on deadlock).
    pub async fn end(mut self) -> Result<(), Error> {
        self.ended = true;
        self.finish();
        let outcome = self
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match outcome {
            None | Some(Error::Ended) => Ok(()),
            Some(other) => Err(other),
        }
    }

    /// Releases the agent's locks and tells it to stop.
    fn finish(&self) {
        release(self.node.router(), &self.id, &self.contacted);
        self.addr.do_send(End);
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.ended {
            self.finish();
        }
    }
}
