//! How a client learns what it holds and when it stops holding it: the grant a `lock` call
//! returns ([`Locked`](crate::Locked)), the transaction's event stream
//! ([`TransactionEvents`]), the lost-lock signal ([`Transaction::lost`]) and the state of one
//! lock ([`LockState`]).
//!
//! A lock is *claimed* once the client is told it holds it: when the transaction has all its
//! locks, each lock is reported [`TransactionEvent::Granted`] with the fencing version of every
//! node that grants it. From then on the agent watches it: if it is no longer held in that mode
//! — a node it depends on went down or its lease ran out, it was surrendered to resolve a
//! deadlock, the transaction aborted — the client gets [`TransactionEvent::Lost`] saying which
//! lock, on which nodes and why, and [`Transaction::lost`] resolves. A lock granted again later
//! is a new grant, reported again with its new versions. Before it answers anything (status,
//! `lock`, `lost`, `lock_state`) the agent checks the lease of every remote node it relies on,
//! so a process resumed after a pause hears "lost" before anything stale.
//!
//! A resource that must not accept writes from a holder that lost its lock checks the fencing
//! versions (see `locks_core::fence`); the signal here tells the holder, the versions protect the
//! resource from a holder that has not heard yet.

use crate::actor::{AwaitLost, GetLockState, Subscribe, outcome_error};
use crate::core::{LockState, LostLock, TransactionEvent};
use crate::error::Error;
use crate::transaction::Transaction;
use futures::channel::{mpsc, oneshot};
use locks_core::LockId;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The events of one subscription ([`Transaction::events`]): every status change, grant and
/// loss from the moment it was made, in order. Ends when the transaction ends.
///
/// Nothing is dropped: a subscription that is not read keeps its events in memory (a few per
/// lock and change); drop it when done.
#[derive(Debug)]
pub struct TransactionEvents {
    rx: mpsc::UnboundedReceiver<TransactionEvent>,
}

impl TransactionEvents {
    /// The next event; `None` once the transaction has ended.
    pub async fn recv(&mut self) -> Option<TransactionEvent> {
        futures::StreamExt::next(&mut self.rx).await
    }
}

impl futures::Stream for TransactionEvents {
    type Item = TransactionEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.rx).poll_next(cx)
    }
}

impl Transaction {
    /// A stream of the transaction's events from now on: status changes, each lock as it is
    /// claimed (with its fencing versions) and each claimed lock lost (the Erlang original's
    /// `notify` option). Several subscriptions may be open; each gets every event.
    ///
    /// ```
    /// use locks_agent::{Options, TransactionEvent, begin_transaction};
    /// use locks_core::{Mode, lock_id};
    /// # use locks_server::{Node, NodeConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let node = Node::start(NodeConfig::new("doc")).await.unwrap();
    /// let txn = begin_transaction(&node, Options::default()).await.unwrap();
    /// let mut events = txn.events();
    /// let locked = txn.lock(lock_id!["a"], Mode::WRITE).await.unwrap();
    /// loop {
    ///     if let Some(TransactionEvent::Granted(g)) = events.recv().await {
    ///         assert_eq!(g, locked.granted);
    ///         break;
    ///     }
    /// }
    /// # }
    /// ```
    pub fn events(&self) -> TransactionEvents {
        let (tx, rx) = mpsc::unbounded();
        self.addr().do_send(Subscribe(tx));
        TransactionEvents { rx }
    }

    /// A stream of the transaction's events from the moment its agent starts, without starting
    /// it (as [`Transaction::events`] does): for a client that forwards the events and wants
    /// its local locks taken on the fast path (see `transaction/fast.rs`). Before the agent
    /// starts there is nothing to report that the calls did not answer: a lock granted at
    /// once was returned by its call, and such a lock is lost only by the transaction's own
    /// end. Once the agent starts (at the first request that waits, names another node, or
    /// needs it) the stream carries what [`Transaction::events`] would from then on, the
    /// losses of the locks granted before included.
    ///
    /// ```
    /// use locks_agent::{Options, TransactionEvent, begin_transaction};
    /// use locks_core::{Mode, lock_id};
    /// # use locks_server::{Node, NodeConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let node = Node::start(NodeConfig::new("doc")).await.unwrap();
    /// let txn = begin_transaction(&node, Options::default()).await.unwrap();
    /// let mut events = txn.events_once_started();
    /// txn.lock(lock_id!["a"], Mode::WRITE).await.unwrap(); // granted at once: no agent
    /// assert!(!txn.has_agent());
    /// let other = begin_transaction(&node, Options::default()).await.unwrap();
    /// other.lock(lock_id!["b"], Mode::WRITE).await.unwrap();
    /// let waiting = txn.lock(lock_id!["b"], Mode::READ); // queued: the agent starts
    /// assert!(txn.has_agent());
    /// other.end().await.unwrap();
    /// waiting.await.unwrap();
    /// loop {
    ///     if let Some(TransactionEvent::Granted(g)) = events.recv().await {
    ///         assert_eq!(g.lock, lock_id!["b"]);
    ///         break;
    ///     }
    /// }
    /// # }
    /// ```
    pub fn events_once_started(&self) -> TransactionEvents {
        let (tx, rx) = mpsc::unbounded();
        let agent = self.agent_slot();
        match &*agent {
            Some(addr) => addr.do_send(Subscribe(tx)),
            None => self.defer_subscription(tx),
        }
        TransactionEvents { rx }
    }

    /// Whether the transaction's agent actor has started (see [`Transaction::events_once_started`]):
    /// while it has not, every lock the transaction asked for was granted at once on its node.
    pub fn has_agent(&self) -> bool {
        self.agent_slot().is_some()
    }

    /// Resolves when a lock the client was told it holds is no longer held, saying which lock,
    /// on which nodes and why — at once if one was lost already and not granted again since.
    /// Fails when the transaction ends first.
    ///
    /// ```no_run
    /// # use locks_agent::Transaction;
    /// # use locks_core::{Mode, lock_id};
    /// # async fn work() {}
    /// # async fn example(txn: Transaction) -> Result<(), locks_agent::Error> {
    /// let locked = txn.lock(lock_id!["jobs", 7], Mode::WRITE).await?;
    /// tokio::select! {
    ///     // Polled first: after a pause both may be ready, and the loss must win.
    ///     biased;
    ///     lost = txn.lost() => eprintln!("stop: {}", lost?),
    ///     () = work() => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) -> Result<LostLock, Error> {
        let (tx, rx) = oneshot::channel();
        self.addr().do_send(AwaitLost(tx));
        match rx.await {
            Ok(result) => result,
            Err(_) => Err(outcome_error(self.outcome())),
        }
    }

    /// Where `lock` stands for this transaction now: held (with its versions), waiting, lost,
    /// or not requested. Leases are checked first.
    pub async fn lock_state(&self, lock: impl Into<LockId>) -> Result<LockState, Error> {
        let lock = lock.into();
        if let Some(state) = self.fast_lock_state(&lock) {
            return Ok(state);
        }
        self.addr()
            .send(GetLockState(lock))
            .await
            .map_err(|_| outcome_error(self.outcome()))
    }
}
