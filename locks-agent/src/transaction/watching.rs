//! Watching locks without queueing on them (the Erlang original's `watch/2`, `unwatch/2` and
//! `watchers/1`): served by the transaction's agent, which starts for it.

use super::Transaction;
use crate::actor::{Unwatch, Watch, outcome_error};
use crate::error::Error;
use crate::lock_watch::LockWatch;
use locks_core::{AgentId, LockId, NodeId};

impl Transaction {
    /// Watches `lock` on `nodes` without queueing on it (the Erlang original's `watch/2`): the
    /// returned [`LockWatch`] stream yields `(node, lock, queue)` with the lock's queue on each
    /// node now and after every change, in version order per node. A lock with no entries
    /// shows an empty queue. The queue of `[a]` shows the holders of every lock below it as
    /// holders of intention modes, so a watch of `[a]` sees who holds `[a, b]`.
    ///
    /// Dropping the stream, [`Transaction::unwatch`] or the end of the transaction stops the
    /// views. Several streams may watch the same lock; each gets every view from its start.
    ///
    /// ```
    /// use futures::StreamExt;
    /// use locks_agent::{Options, begin_transaction};
    /// use locks_core::{Mode, lock_id};
    /// # use locks_server::{Node, NodeConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let node = Node::start(NodeConfig::new("doc")).await.unwrap();
    /// let observer = begin_transaction(&node, Options::default()).await.unwrap();
    /// let mut views = observer
    ///     .watch(lock_id!["a"], &[node.id().clone()])
    ///     .await
    ///     .unwrap();
    /// let (_, _, first) = views.next().await.unwrap();
    /// assert!(first.granted.is_empty());
    ///
    /// let writer = begin_transaction(&node, Options::default()).await.unwrap();
    /// writer.lock(lock_id!["a"], Mode::WRITE).await.unwrap();
    /// let (_, _, next) = views.next().await.unwrap();
    /// assert!(next.holds(writer.id()));
    /// assert!(next.version > first.version);
    /// # }
    /// ```
    pub async fn watch(
        &self,
        lock: impl Into<LockId>,
        nodes: &[NodeId],
    ) -> Result<LockWatch, Error> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let msg = Watch {
            lock: lock.into(),
            nodes: nodes.to_vec(),
            tx,
        };
        let id = self
            .addr()
            .send(msg)
            .await
            .map_err(|_| outcome_error(self.outcome()))??;
        Ok(LockWatch {
            rx,
            id,
            agent: self.addr(),
        })
    }

    /// Stops watching `lock` on `nodes` (the Erlang original's `unwatch/2`), for every stream
    /// of this transaction: the lock servers stop sending views, and a stream that watched
    /// nothing else ends. Nodes not watched are ignored.
    pub async fn unwatch(&self, lock: impl Into<LockId>, nodes: &[NodeId]) -> Result<(), Error> {
        let msg = Unwatch {
            lock: lock.into(),
            nodes: nodes.to_vec(),
        };
        self.addr()
            .send(msg)
            .await
            .map_err(|_| outcome_error(self.outcome()))?
    }

    /// The agents that watch `lock` on this transaction's node, in id order (the Erlang
    /// original's `watchers/1`), as its lock server knows them now.
    pub async fn watchers(&self, lock: impl Into<LockId>) -> Result<Vec<AgentId>, Error> {
        Ok(self.node.watchers(lock.into()).await?)
    }
}
