//! [`ClusterLink`]: one peer's connection as the router sees it.
//!
//! **Back-pressure.** The router's senders (the lock server, agents) cannot wait, and lock
//! traffic must never be dropped while the connection is up: a lost `Lock`, notice or surrender
//! would leave an agent waiting forever or a lock held by nobody. So [`ClusterLink::send`] never
//! drops and never blocks:
//! - it queues the envelope on the connection ([`LinkSender::try_send`], [`OUTGOING_CAPACITY`]
//!   frames deep);
//! - when that queue is full, the envelope (and every later one, so that order is kept) waits in
//!   an overflow queue, which a task of the link moves to the connection as it drains
//!   ([`LinkSender::send`] waits for room);
//! - a peer that does not read for its heartbeat timeout is declared down, which ends the wait;
//!   a peer that reads but falls [`MAX_OVERFLOW`] envelopes behind has its connection closed (a
//!   node down, logged as an error), so memory stays bounded.
//!
//! In both cases the loss is a node down seen by both nodes, which releases what the lost
//! messages were about; nothing is lost while the node counts as up.
//!
//! **An envelope that cannot be encoded** (larger than the frame limit: a lock view with a
//! huge queue) is refused to its sender with [`RouteError::Unsendable`] and the connection
//! stays up: closing it would release every lock between the two nodes, and the next such
//! envelope would close it again. Envelopes are encoded in [`ClusterLink::send`], before they
//! are queued anywhere, so the refusal always reaches the sender (the lock server then tells
//! the agent its request cannot be served, see [`crate::server`]). It is logged as a warning at
//! most once per [`WARN_INTERVAL`](crate::log_limit::WARN_INTERVAL), since a peer's requests
//! can cause it.

use crate::log_limit::{LogLimiter, Verdict};
use crate::net::{LinkSender, SendError};
use crate::router::{RemoteLink, RouteError};
use bytes::Bytes;
use locks_core::NodeId;
use locks_core::codec::CodecError;
use locks_core::proto::{Envelope, Message};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Notify;

/// How many encoded envelopes wait for the socket before the overflow queue is used.
pub const OUTGOING_CAPACITY: usize = 4096;

/// The most envelopes the overflow queue holds before the connection is given up.
pub const MAX_OVERFLOW: usize = 1 << 16;

#[derive(Debug, Default)]
struct Overflow {
    /// Encoded envelopes, in order.
    queue: VecDeque<Bytes>,
    /// The flusher holds an envelope it took from `queue` and has not queued yet.
    flushing: bool,
    closed: bool,
}

/// One peer's connection as a [`RemoteLink`] (see the module documentation).
#[derive(Debug)]
pub struct ClusterLink {
    peer: NodeId,
    sender: LinkSender,
    overflow: Mutex<Overflow>,
    wake: Notify,
    warnings: LogLimiter,
}

impl ClusterLink {
    /// Wraps the sender of `peer`'s connection. Run [`ClusterLink::flush`] next to it.
    pub fn new(peer: NodeId, sender: LinkSender) -> Arc<ClusterLink> {
        Arc::new(ClusterLink {
            peer,
            sender,
            overflow: Mutex::new(Overflow::default()),
            wake: Notify::new(),
            warnings: LogLimiter::default(),
        })
    }

    /// The peer.
    pub fn peer(&self) -> &NodeId {
        &self.peer
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Overflow> {
        self.overflow.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the connection after what is queued on it (the overflow queue is dropped). Its
    /// end is reported as the link's down.
    pub fn close(&self) {
        self.lock().closed = true;
        self.sender.close();
        self.wake.notify_one();
    }

    /// Gives the connection up because of `why` (logged as an error).
    fn fail(&self, why: &str) {
        tracing::error!(peer = %self.peer, why, "closing the connection to a peer");
        self.close();
    }

    /// Moves overflowed envelopes to the connection as it drains; ends when the link closes.
    pub async fn flush(self: Arc<Self>) {
        loop {
            let next = {
                let mut o = self.lock();
                if o.closed {
                    o.queue.clear();
                    return;
                }
                let next = o.queue.pop_front();
                o.flushing = next.is_some();
                next
            };
            let Some(envelope) = next else {
                // `notify_one` keeps a permit, so a wake between the unlock and here is not
                // lost.
                self.wake.notified().await;
                continue;
            };
            match self.sender.send_encoded(envelope).await {
                Ok(()) => {}
                Err(SendError::Closed) => {
                    self.lock().closed = true;
                    return;
                }
                // Neither happens to an encoded envelope sent with waiting; if one did, the
                // envelope is lost, so the connection must go (a node down on both sides).
                Err(SendError::Encode(_) | SendError::Full) => {
                    self.fail("the connection refused an encoded envelope")
                }
            }
        }
    }
}

impl RemoteLink for ClusterLink {
    fn send(&self, envelope: Envelope) -> Result<(), RouteError> {
        if self.lock().closed {
            return Err(RouteError::NotConnected(self.peer.clone()));
        }
        let frame = match self.sender.encode(&envelope) {
            Ok(frame) => frame,
            Err(SendError::Closed | SendError::Full) => {
                return Err(RouteError::NotConnected(self.peer.clone()));
            }
            Err(SendError::Encode(e)) => return Err(self.unsendable(&envelope, &e)),
        };
        let mut o = self.lock();
        if o.closed {
            return Err(RouteError::NotConnected(self.peer.clone()));
        }
        if !o.queue.is_empty() || o.flushing {
            if o.queue.len() >= MAX_OVERFLOW {
                drop(o);
                self.fail("the peer is more than MAX_OVERFLOW envelopes behind");
                return Err(RouteError::NotConnected(self.peer.clone()));
            }
            o.queue.push_back(frame);
            return Ok(());
        }
        match self.sender.try_send_encoded(frame.clone()) {
            Ok(()) => Ok(()),
            Err(SendError::Full) => {
                o.queue.push_back(frame);
                drop(o);
                self.wake.notify_one();
                Ok(())
            }
            Err(SendError::Closed) => {
                o.closed = true;
                Err(RouteError::NotConnected(self.peer.clone()))
            }
            // Not produced for an encoded envelope.
            Err(SendError::Encode(e)) => {
                drop(o);
                Err(self.unsendable(&envelope, &e))
            }
        }
    }
}

impl ClusterLink {
    /// Refuses an envelope that cannot be encoded to its sender; the connection stays up.
    fn unsendable(&self, envelope: &Envelope, error: &CodecError) -> RouteError {
        let kind = match &envelope.message {
            Message::Server(_) => "server request",
            Message::Agent { .. } => "agent message",
            Message::Notices { .. } => "agent notices",
            Message::Member { .. } => "member message",
            Message::Introspect(_) | Message::TableReport(_) => "introspection",
        };
        match self.warnings.event("unsendable envelope") {
            Verdict::Warn { suppressed } => tracing::warn!(
                peer = %self.peer, %error, kind, suppressed_since_last_warning = suppressed,
                "an envelope to a peer cannot be sent; refused to its sender, the connection stays up"
            ),
            Verdict::Quiet => tracing::debug!(
                peer = %self.peer, %error, kind,
                "an envelope to a peer cannot be sent; refused to its sender"
            ),
        }
        RouteError::Unsendable {
            node: self.peer.clone(),
            reason: error.to_string(),
        }
    }
}
