//! The queue from a session to the stream of its events (`server.rs`'s `Driven`), which polls
//! the session itself: a bounded queue whose sender never wakes the receiver.
//!
//! The receiver runs the sender: it polls the session, then takes what the session queued, in
//! the same poll. A channel that wakes its receiver on every send (as `futures`' mpsc does)
//! would wake the very task that is sending, and every answer would cost that task one more
//! poll for nothing (the session's inputs, the HTTP/2 stream's state, all polled again). Here a
//! send only queues; the only wake is the sender's, when it waited for room (the queue was full
//! because the client stopped reading) and the receiver took an item.
//!
//! Invariants: at most `capacity` items are queued; a send fails once the receiver is dropped;
//! the receiver sees every item sent before it, in order. Items sent by a sender that is not
//! polled by the receiver's task are not announced: such a receiver would have to be polled
//! again by other means (this queue is for `Driven` only).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};

struct Inner<T> {
    queue: VecDeque<T>,
    capacity: usize,
    /// The sender waiting for room.
    sender: Option<Waker>,
    /// The receiver is gone.
    closed: bool,
}

fn lock<T>(inner: &Mutex<Inner<T>>) -> MutexGuard<'_, Inner<T>> {
    inner.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The sending end.
pub(crate) struct Outbox<T> {
    inner: Arc<Mutex<Inner<T>>>,
}

/// The receiving end: it must poll whatever sends into the [`Outbox`] before it takes.
pub(crate) struct Outlet<T> {
    inner: Arc<Mutex<Inner<T>>>,
}

/// The receiver is gone: the item was not queued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Closed;

/// A queue of at most `capacity` items (at least one).
pub(crate) fn outbox<T>(capacity: usize) -> (Outbox<T>, Outlet<T>) {
    let inner = Arc::new(Mutex::new(Inner {
        queue: VecDeque::new(),
        capacity: capacity.max(1),
        sender: None,
        closed: false,
    }));
    (
        Outbox {
            inner: inner.clone(),
        },
        Outlet { inner },
    )
}

impl<T> Outbox<T> {
    /// Queues `item`, waiting while the queue is full.
    pub(crate) async fn send(&mut self, item: T) -> Result<(), Closed> {
        let mut item = Some(item);
        poll_fn(|cx| {
            let mut inner = lock(&self.inner);
            if inner.closed {
                return Poll::Ready(Err(Closed));
            }
            if inner.queue.len() < inner.capacity {
                if let Some(item) = item.take() {
                    inner.queue.push_back(item);
                }
                return Poll::Ready(Ok(()));
            }
            inner.sender = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

impl<T> Outlet<T> {
    /// The oldest item queued, if any; wakes a sender that waits for room.
    pub(crate) fn take(&mut self) -> Option<T> {
        let mut inner = lock(&self.inner);
        let item = inner.queue.pop_front()?;
        let waiting = inner.sender.take();
        drop(inner);
        if let Some(sender) = waiting {
            sender.wake();
        }
        Some(item)
    }
}

impl<T> Drop for Outlet<T> {
    fn drop(&mut self) {
        let mut inner = lock(&self.inner);
        inner.closed = true;
        inner.queue.clear();
        let waiting = inner.sender.take();
        drop(inner);
        if let Some(sender) = waiting {
            sender.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Closed, outbox};
    use futures::FutureExt;
    use std::future::Future;

    #[test]
    fn items_come_out_in_order_and_a_full_queue_waits_for_room() {
        let (mut tx, mut rx) = outbox(2);
        assert_eq!(tx.send(1).now_or_never(), Some(Ok(())));
        assert_eq!(tx.send(2).now_or_never(), Some(Ok(())));
        // Full: the third waits, and is queued once an item is taken.
        let mut third = Box::pin(tx.send(3));
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(third.as_mut().poll(&mut cx).is_pending());
        assert_eq!(rx.take(), Some(1));
        assert!(third.as_mut().poll(&mut cx).is_ready());
        assert_eq!((rx.take(), rx.take(), rx.take()), (Some(2), Some(3), None));
    }

    #[test]
    fn a_full_queue_wakes_its_sender_when_an_item_is_taken() {
        let (mut tx, mut rx) = outbox(1);
        assert_eq!(tx.send(1).now_or_never(), Some(Ok(())));
        let (waker, woken) = futures_test_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        let mut second = Box::pin(tx.send(2));
        assert!(second.as_mut().poll(&mut cx).is_pending());
        assert!(!woken.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(rx.take(), Some(1));
        assert!(woken.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn sends_fail_once_the_receiver_is_gone() {
        let (mut tx, rx) = outbox(4);
        assert_eq!(tx.send(1).now_or_never(), Some(Ok(())));
        drop(rx);
        assert_eq!(tx.send(2).now_or_never(), Some(Err(Closed)));
    }

    /// A waker that records whether it was woken.
    fn futures_test_waker() -> (
        std::task::Waker,
        std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        struct Flag(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl futures::task::ArcWake for Flag {
            fn wake_by_ref(arc_self: &std::sync::Arc<Self>) {
                arc_self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let woken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waker = futures::task::waker(std::sync::Arc::new(Flag(woken.clone())));
        (waker, woken)
    }
}
