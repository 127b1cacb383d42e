//! The blocking API, for synchronous callers (a storage engine's worker threads, a thread
//! pool without an async runtime): the same transaction, with calls that block the calling
//! thread until they are answered, named after tokio's convention
//! (`tokio::sync::Mutex::blocking_lock`). With [`Node::start_blocking`],
//! [`Node::wait_for_nodes_blocking`] and [`Node::shutdown_blocking`], a program needs no async
//! runtime of its own at all.
//!
//! An uncontended local lock never blocks: the fast path grants it on the calling thread, and
//! `begin_transaction_blocking`, `blocking_lock` (when the fast path decides it) and
//! `blocking_end` answer without running an executor at all. A call that has to wait parks the
//! calling thread, in an executor of its own, until the transaction's agent, on the node's
//! thread, answers; a bounded wait's timer runs there too.
//!
//! Every wait has a bounded form: [`Transaction::blocking_lock_timeout`] and
//! [`Transaction::blocking_lock_on_timeout`] (which withdraw the request when they give up),
//! [`Transaction::blocking_await_all_locks_timeout`] and [`Transaction::blocking_lost_timeout`]
//! (which ask for nothing, so leave everything queued). The queries (`blocking_status`,
//! `blocking_lock_state`, `blocking_options`, `blocking_watchers`) wait for no lock: the agent
//! answers them at once.
//!
//! Where they may be called: from any thread but the node's own, `spawn_blocking` included. On the
//! node's own thread (a task of [`Node::spawn`]) a call that would wait fails with [`Error::Node`]
//! holding [`locks_server::Error::OnNodeThread`]: that thread must compute the answer, so the call
//! would never return. On a thread that runs async tasks the call blocks them meanwhile, as any
//! blocking call does: use the `async` methods there.

use crate::core::{LockResult, LostLock, TransactionStatus};
use crate::core::{LockState, Locked};
use crate::error::Error;
use crate::options::{Options, Req};
use crate::transaction::fast::Fast;
use crate::transaction::{Transaction, begin_now};
use locks_core::{AgentId, LockId, Mode, NodeId};
use locks_server::Node;
use std::future::Future;
use std::time::Duration;

/// Runs `fut` to completion on the calling thread, unless that is `node`'s own thread (see the
/// module documentation).
fn block_on<T>(
    node: &Node,
    call: &'static str,
    fut: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    if node.is_node_thread() {
        return Err(locks_server::Error::OnNodeThread { call }.into());
    }
    futures::executor::block_on(fut)
}

/// [`begin_transaction`](crate::begin_transaction), blocking: starts a transaction on `node`.
/// It waits for nothing, so it may be called from any thread.
///
/// # Errors
///
/// Those of [`begin_transaction`](crate::begin_transaction): the node has stopped.
///
/// ```
/// use locks_agent::{Options, begin_transaction_blocking};
/// use locks_core::{Mode, lock_id};
/// use locks_server::{Node, NodeConfig};
/// // A plain program: no async runtime anywhere.
/// let node = Node::start_blocking(NodeConfig::new("doc")).unwrap();
/// let txn = begin_transaction_blocking(&node, Options::default()).unwrap();
/// let held = txn.blocking_lock(lock_id!["row", 7u64], Mode::WRITE).unwrap();
/// assert_eq!(held.granted.mode, Mode::WRITE);
/// txn.blocking_end().unwrap();
/// node.shutdown_blocking().unwrap();
/// ```
pub fn begin_transaction_blocking(node: &Node, options: Options) -> Result<Transaction, Error> {
    begin_now(node, options)
}

impl Transaction {
    /// [`Transaction::lock`], blocking the calling thread until the lock is held.
    ///
    /// A lock the fast path decides is answered without an executor: only a call that waits
    /// for the agent runs one.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::lock`], and [`locks_server::Error::OnNodeThread`] (as
    /// [`Error::Node`]) when it would wait on the node's own thread (a task of
    /// [`Node::spawn`]), which must compute the answer. It never panics: from any other thread
    /// it blocks, `spawn_blocking` included (on a thread that runs async tasks it blocks them
    /// too, so use the async methods there). Prefer [`Transaction::blocking_lock_timeout`]
    /// when the holder may keep the lock for long.
    pub fn blocking_lock(&self, lock: impl Into<LockId>, mode: Mode) -> Result<Locked, Error> {
        self.blocking_lock_within(lock.into(), mode, None)
    }

    /// [`Transaction::lock_timeout`], blocking: gives up after `wait` with
    /// [`Error::TimedOut`], having withdrawn the request.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::lock_timeout`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_lock_timeout(
        &self,
        lock: impl Into<LockId>,
        mode: Mode,
        wait: Duration,
    ) -> Result<Locked, Error> {
        self.blocking_lock_within(lock.into(), mode, Some(wait))
    }

    fn blocking_lock_within(
        &self,
        lock: LockId,
        mode: Mode,
        wait: Option<Duration>,
    ) -> Result<Locked, Error> {
        match self.try_fast(lock, mode) {
            Fast::Done(result) => result,
            Fast::Agent(addr, lock, queued) => block_on(
                self.node(),
                "Transaction::blocking_lock",
                self.lock_by_agent(addr, lock, mode, queued, wait),
            ),
        }
    }

    /// [`Transaction::lock_on`], blocking.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::lock_on`], and `OnNodeThread` (see [`Transaction::blocking_lock`]).
    pub fn blocking_lock_on(
        &self,
        lock: impl Into<LockId>,
        mode: Mode,
        nodes: &[NodeId],
        req: Req,
    ) -> Result<Locked, Error> {
        let fut = self.lock_on_within(lock.into(), mode, nodes, req, None);
        block_on(self.node(), "Transaction::blocking_lock_on", fut)
    }

    /// [`Transaction::lock_on_timeout`], blocking: gives up after `wait`, having withdrawn the
    /// request on every node.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::lock_on_timeout`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_lock_on_timeout(
        &self,
        lock: impl Into<LockId>,
        mode: Mode,
        nodes: &[NodeId],
        req: Req,
        wait: Duration,
    ) -> Result<Locked, Error> {
        let fut = self.lock_on_within(lock.into(), mode, nodes, req, Some(wait));
        block_on(self.node(), "Transaction::blocking_lock_on_timeout", fut)
    }

    /// [`Transaction::lock_nowait`], blocking until the agent accepted the request.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::lock_nowait`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_lock_nowait(&self, lock: impl Into<LockId>, mode: Mode) -> Result<(), Error> {
        let fut = self.lock_nowait(lock, mode);
        block_on(self.node(), "Transaction::blocking_lock_nowait", fut)
    }

    /// [`Transaction::lock_nowait_on`], blocking until the agent accepted the request.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::lock_nowait_on`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_lock_nowait_on(
        &self,
        lock: impl Into<LockId>,
        mode: Mode,
        nodes: &[NodeId],
        req: Req,
    ) -> Result<(), Error> {
        let fut = self.lock_nowait_on(lock, mode, nodes, req);
        block_on(self.node(), "Transaction::blocking_lock_nowait_on", fut)
    }

    /// [`Transaction::await_all_locks`], blocking.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::await_all_locks`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_await_all_locks(&self) -> Result<LockResult, Error> {
        let fut = self.await_all_locks();
        block_on(self.node(), "Transaction::blocking_await_all_locks", fut)
    }

    /// [`Transaction::await_all_locks_timeout`], blocking: `Ok(None)` when the transaction did
    /// not hold everything it asked for within `wait` (its requests stay queued).
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::await_all_locks`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_await_all_locks_timeout(
        &self,
        wait: Duration,
    ) -> Result<Option<LockResult>, Error> {
        let fut = self.await_all_locks_timeout(wait);
        block_on(
            self.node(),
            "Transaction::blocking_await_all_locks_timeout",
            fut,
        )
    }

    /// [`Transaction::unlock`], blocking.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::unlock`], and `OnNodeThread` (see [`Transaction::blocking_lock`]).
    pub fn blocking_unlock(&self, lock: impl Into<LockId>) -> Result<(), Error> {
        block_on(
            self.node(),
            "Transaction::blocking_unlock",
            self.unlock(lock),
        )
    }

    /// [`Transaction::convert`], blocking.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::convert`], and `OnNodeThread` (see [`Transaction::blocking_lock`]).
    pub fn blocking_convert(&self, lock: impl Into<LockId>, mode: Mode) -> Result<(), Error> {
        let fut = self.convert(lock, mode);
        block_on(self.node(), "Transaction::blocking_convert", fut)
    }

    /// [`Transaction::status`], blocking.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::status`], and `OnNodeThread` (see [`Transaction::blocking_lock`]).
    pub fn blocking_status(&self) -> Result<TransactionStatus, Error> {
        block_on(self.node(), "Transaction::blocking_status", self.status())
    }

    /// [`Transaction::lock_state`], blocking.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::lock_state`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_lock_state(&self, lock: impl Into<LockId>) -> Result<LockState, Error> {
        let fut = self.lock_state(lock);
        block_on(self.node(), "Transaction::blocking_lock_state", fut)
    }

    /// [`Transaction::lost`], blocking until a lock the client was told it holds is lost (or
    /// the transaction ends). A worker thread that must stop writing when its lock is gone
    /// runs this on a thread of its own, or checks [`Transaction::blocking_lock_state`]
    /// between writes.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::lost`], and `OnNodeThread` (see [`Transaction::blocking_lock`]).
    pub fn blocking_lost(&self) -> Result<LostLock, Error> {
        block_on(self.node(), "Transaction::blocking_lost", self.lost())
    }

    /// [`Transaction::lost_timeout`], blocking: `Ok(None)` when no lock the client was told it
    /// holds was lost within `wait`. A worker thread can check between two pieces of work
    /// with a short `wait`, or with [`Transaction::blocking_lock_state`].
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::lost`], and `OnNodeThread` (see [`Transaction::blocking_lock`]).
    pub fn blocking_lost_timeout(&self, wait: Duration) -> Result<Option<LostLock>, Error> {
        block_on(
            self.node(),
            "Transaction::blocking_lost_timeout",
            self.lost_timeout(wait),
        )
    }

    /// [`Transaction::set_options`], blocking.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::set_options`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_set_options(&self, options: Options) -> Result<(), Error> {
        let fut = self.set_options(options);
        block_on(self.node(), "Transaction::blocking_set_options", fut)
    }

    /// [`Transaction::options`], blocking.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::options`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_options(&self) -> Result<Options, Error> {
        block_on(self.node(), "Transaction::blocking_options", self.options())
    }

    /// [`Transaction::surrender_nowait`], blocking until every node has answered.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::surrender_nowait`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_surrender_nowait(
        &self,
        lock: impl Into<LockId>,
        to: &AgentId,
        nodes: &[NodeId],
    ) -> Result<(), Error> {
        let fut = self.surrender_nowait(lock, to, nodes);
        block_on(self.node(), "Transaction::blocking_surrender_nowait", fut)
    }

    /// [`Transaction::watchers`], blocking.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::watchers`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_watchers(&self, lock: impl Into<LockId>) -> Result<Vec<AgentId>, Error> {
        let fut = self.watchers(lock);
        block_on(self.node(), "Transaction::blocking_watchers", fut)
    }

    /// [`Transaction::wait_for_graph`], blocking.
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::wait_for_graph`], and `OnNodeThread` (see
    /// [`Transaction::blocking_lock`]).
    pub fn blocking_wait_for_graph(&self) -> Result<String, Error> {
        let fut = self.wait_for_graph();
        block_on(self.node(), "Transaction::blocking_wait_for_graph", fut)
    }

    /// [`Transaction::end`], blocking (it waits for nothing, so no executor runs, and it may
    /// be called from any thread).
    ///
    /// # Errors
    ///
    /// Those of [`Transaction::end`]: the error that ended the transaction earlier, if one did.
    pub fn blocking_end(self) -> Result<(), Error> {
        self.end_now()
    }
}
