//! [`LockWatch`]: the stream of views of a watched lock.

use crate::actor::{Agent, DropWatch};
use crate::core::WatchItem;
use actix::Addr;
use futures::Stream;
use futures::channel::mpsc;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The views of one lock on the nodes given to [`crate::Transaction::watch`], as a
/// [`Stream`]: the queue when the watch began, then after every change, in version order per
/// node (views of different nodes interleave as they arrive).
///
/// The stream ends when the transaction ends, or when [`crate::Transaction::unwatch`] has
/// stopped the views of every node it lists. Dropping it stops its views; the lock servers stop
/// sending them once no stream of the transaction watches the lock there. While a node is down
/// its views pause; when it comes back, the lock is watched there again and its current queue
/// comes first.
pub struct LockWatch {
    pub(crate) rx: mpsc::UnboundedReceiver<WatchItem>,
    pub(crate) id: u64,
    pub(crate) agent: Addr<Agent>,
}

impl std::fmt::Debug for LockWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockWatch")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Stream for LockWatch {
    type Item = WatchItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchItem>> {
        Pin::new(&mut self.rx).poll_next(cx)
    }
}

impl Drop for LockWatch {
    fn drop(&mut self) {
        // An agent that has stopped has no watch left to stop.
        self.agent.do_send(DropWatch(self.id));
    }
}
