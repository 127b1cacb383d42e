//! The blocking API, for synchronous callers (a storage engine's worker threads, a thread
//! pool without an async runtime): the same transaction, with calls that block the calling
//! thread until they are answered, named after tokio's convention
//! (`tokio::sync::Mutex::blocking_lock`).
//!
//! An uncontended local lock never blocks: the fast path grants it on the calling thread, and
//! `begin_transaction_blocking`, `blocking_lock` (when the fast path decides it) and
//! `blocking_end` answer without running an executor at all. A call that has to wait parks the
//! calling thread, in an executor of its own, until the transaction's agent, on the node's
//! thread, answers.
//!
//! # Panics
//!
//! Every blocking call panics when made from within an asynchronous runtime (a tokio task, or
//! the node's own thread, which runs one): blocking there would stall the tasks of that
//! runtime, and on the node's thread it would wait forever for an answer that thread must
//! compute. Use the `async` methods there.

use crate::error::Error;
use crate::events::Locked;
use crate::options::Options;
use crate::transaction::fast::Fast;
use crate::transaction::{Transaction, begin_now};
use locks_core::{LockId, Mode};
use locks_server::Node;

/// Panics if the calling thread runs an async runtime (see the module documentation).
fn not_in_runtime(call: &str) {
    assert!(
        tokio::runtime::Handle::try_current().is_err(),
        "locks_agent::{call} called from within an async runtime; use the async method there"
    );
}

/// Runs `fut` to completion on the calling thread, which must not be running an async runtime.
fn block_on<F: std::future::Future>(call: &str, fut: F) -> F::Output {
    not_in_runtime(call);
    futures::executor::block_on(fut)
}

/// [`begin_transaction`](crate::begin_transaction), blocking: starts a transaction on `node`.
///
/// ```
/// use locks_agent::{Options, begin_transaction_blocking};
/// use locks_core::{Mode, lock_id};
/// # use locks_server::{Node, NodeConfig};
/// # let rt = tokio::runtime::Runtime::new().unwrap();
/// # let node = rt.block_on(Node::start(NodeConfig::new("doc"))).unwrap();
/// // On a plain thread, with no async runtime:
/// std::thread::spawn(move || {
///     let txn = begin_transaction_blocking(&node, Options::default()).unwrap();
///     let held = txn.blocking_lock(lock_id!["row", 7u64], Mode::WRITE).unwrap();
///     assert_eq!(held.granted.mode, Mode::WRITE);
///     txn.blocking_end().unwrap();
/// })
/// .join()
/// .unwrap();
/// ```
pub fn begin_transaction_blocking(node: &Node, options: Options) -> Result<Transaction, Error> {
    not_in_runtime("begin_transaction_blocking");
    begin_now(node, options)
}

impl Transaction {
    /// [`Transaction::lock`], blocking the calling thread until the lock is held.
    ///
    /// A lock the fast path decides is answered without an executor: only a call that waits
    /// for the agent runs one.
    pub fn blocking_lock(&self, lock: impl Into<LockId>, mode: Mode) -> Result<Locked, Error> {
        not_in_runtime("Transaction::blocking_lock");
        match self.try_fast(lock.into(), mode) {
            Fast::Done(result) => result,
            Fast::Agent(addr, lock, queued) => {
                futures::executor::block_on(self.lock_by_agent(addr, lock, mode, queued))
            }
        }
    }

    /// [`Transaction::unlock`], blocking.
    pub fn blocking_unlock(&self, lock: impl Into<LockId>) -> Result<(), Error> {
        block_on("Transaction::blocking_unlock", self.unlock(lock))
    }

    /// [`Transaction::end`], blocking (it waits for nothing, so no executor runs).
    pub fn blocking_end(self) -> Result<(), Error> {
        not_in_runtime("Transaction::blocking_end");
        self.end_now()
    }
}
