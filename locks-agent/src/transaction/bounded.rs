//! The bounded forms of the waits that ask for nothing (`await_all_locks`, `lost`): the wait,
//! or `None` once its time has passed. The timer runs on the node's thread, so a caller on a
//! plain thread or on any runtime needs no timer of its own; it stops as soon as the wait is
//! answered.

use super::Transaction;
use crate::core::{LockResult, LostLock};
use crate::error::Error;
use futures::channel::oneshot;
use futures::future::{Either, select};
use locks_server::Node;
use std::future::Future;
use std::pin::pin;
use std::time::Duration;

/// `wait`'s answer, or `Ok(None)` once `limit` has passed on `node`'s clock. A node that has
/// stopped runs no timer: the wait then answers alone (with the node's end, as it does).
pub(super) async fn within<T>(
    node: &Node,
    limit: Duration,
    wait: impl Future<Output = Result<T, Error>>,
) -> Result<Option<T>, Error> {
    // Dropped when this returns, which ends the timer task at once.
    let (_stop, stopped) = oneshot::channel::<()>();
    let timer = node.spawn(async move {
        let _ = tokio::time::timeout(limit, stopped).await;
    });
    match select(pin!(wait), pin!(timer)).await {
        Either::Left((answer, _)) => answer.map(Some),
        Either::Right((Ok(()), _)) => Ok(None),
        Either::Right((Err(_), wait)) => wait.await.map(Some),
    }
}

impl Transaction {
    /// [`Transaction::await_all_locks`], giving up after `wait`: `Ok(None)` when the
    /// transaction did not hold everything it asked for by then. Nothing is withdrawn (the
    /// call asks for nothing): the requests stay queued, to be awaited again, unlocked, or
    /// ended with the transaction. The timer runs on the node's thread (the blocking form is
    /// [`Transaction::blocking_await_all_locks_timeout`]).
    pub async fn await_all_locks_timeout(
        &self,
        wait: Duration,
    ) -> Result<Option<LockResult>, Error> {
        within(&self.node, wait, self.await_all_locks()).await
    }

    /// [`Transaction::lost`], giving up after `wait`: `Ok(None)` when no lock the client was
    /// told it holds was lost by then. The timer runs on the node's thread (the blocking form
    /// is [`Transaction::blocking_lost_timeout`]).
    pub async fn lost_timeout(&self, wait: Duration) -> Result<Option<LostLock>, Error> {
        within(&self.node, wait, self.lost()).await
    }
}
