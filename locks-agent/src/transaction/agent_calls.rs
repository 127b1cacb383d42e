//! Lock calls that wait through the agent: the one place a `lock` call's request is sent with
//! its caller (`call_lock`), and the bounded forms of `lock` and `lock_on`.
//!
//! A waiting call's future withdraws the call when dropped before its answer
//! (`transaction/pending.rs`); a bounded call also carries its wait, whose timer the agent runs
//! on the node's thread (`AgentCore::time_out`), so that the caller needs no timer of its own.

use super::fast::{Fast, Queued};
use super::pending::Pending;
use super::{Transaction, cooperative, wait_time};
use crate::actor::{Agent, LockArgs, LockCall, next_call};
use crate::core::Locked;
use crate::error::Error;
use crate::options::Req;
use actix::Addr;
use futures::channel::oneshot;
use futures::future::Either;
use locks_core::{LockId, Mode, NodeId};
use std::future::Future;
use std::time::Duration;

impl Transaction {
    /// Sends a `lock` call's request with its caller and its options (`args`: its bound, if
    /// `wait`), and returns the wait for its answer, which withdraws the call if dropped before
    /// it (`transaction/pending.rs`).
    pub(crate) fn call_lock(
        &self,
        addr: Addr<Agent>,
        args: LockArgs,
        queued: Queued,
    ) -> impl Future<Output = Result<Locked, Error>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let call = next_call();
        tracing::trace!(target: "lock_path", hop = 2, lock = %args.lock, "sent to the agent actor");
        addr.do_send(LockCall {
            args,
            reply: Some((call, tx)),
            queued,
            accepted: None,
        });
        wait_time::timed(
            &self.node,
            Pending::new(rx, self.outcome().clone(), addr, call),
        )
    }

    /// [`Transaction::lock`], giving up after `wait`: fails with [`Error::TimedOut`], naming
    /// the lock, the copies not granted and the transactions it waited for, once `wait` has
    /// passed without the grant. What the call asked for is then withdrawn as when the future
    /// of `lock` is dropped (see its cancellation rule), and the transaction goes on. The
    /// timer runs on the node's thread, so no async runtime of the caller's is needed (the
    /// blocking form is [`Transaction::blocking_lock_timeout`]). A lock the fast path grants at
    /// once is answered at once, whatever `wait`.
    ///
    /// ```
    /// use locks_agent::{Error, Options, begin_transaction};
    /// use locks_core::{Mode, lock_id};
    /// use std::time::Duration;
    /// # use locks_server::{Node, NodeConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let node = Node::start(NodeConfig::new("doc")).await.unwrap();
    /// let holder = begin_transaction(&node, Options::default()).await.unwrap();
    /// holder.lock(lock_id!["job", 1], Mode::WRITE).await.unwrap();
    /// let other = begin_transaction(&node, Options::default()).await.unwrap();
    /// let wait = Duration::from_millis(20);
    /// match other.lock_timeout(lock_id!["job", 1], Mode::WRITE, wait).await {
    ///     Err(Error::TimedOut { holders, .. }) => assert_eq!(holders, [holder.id().clone()]),
    ///     other => panic!("the holder keeps it: {other:?}"),
    /// }
    /// # }
    /// ```
    pub fn lock_timeout(
        &self,
        lock: impl Into<LockId>,
        mode: Mode,
        wait: Duration,
    ) -> impl Future<Output = Result<Locked, Error>> + Send + 'static {
        let (addr, lock, queued) = match self.try_fast(lock.into(), mode) {
            Fast::Done(result) => return Either::Left(cooperative(result)),
            Fast::Agent(addr, lock, queued) => (addr, lock, queued),
        };
        Either::Right(self.lock_by_agent(addr, lock, mode, queued, Some(wait)))
    }

    /// [`Transaction::lock_on`], giving up after `wait` as [`Transaction::lock_timeout`] does:
    /// the request is then withdrawn on every node it names.
    pub fn lock_on_timeout(
        &self,
        lock: impl Into<LockId>,
        mode: Mode,
        nodes: &[NodeId],
        req: Req,
        wait: Duration,
    ) -> impl Future<Output = Result<Locked, Error>> + Send + 'static {
        self.lock_on_within(lock.into(), mode, nodes, req, Some(wait))
    }

    /// `lock_on`, bounded by `wait` if given.
    pub(crate) fn lock_on_within(
        &self,
        lock: LockId,
        mode: Mode,
        nodes: &[NodeId],
        req: Req,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Locked, Error>> + Send + 'static {
        let (addr, lock, queued) = if self.is_local(nodes, req) {
            match self.try_fast(lock, mode) {
                Fast::Done(result) => return Either::Left(cooperative(result)),
                Fast::Agent(addr, lock, queued) => (addr, lock, queued),
            }
        } else {
            (self.addr(), lock, None)
        };
        let args = LockArgs {
            wait,
            ..LockArgs::new(lock, mode, nodes.iter().cloned().collect(), req)
        };
        Either::Right(self.call_lock(addr, args, queued))
    }
}
