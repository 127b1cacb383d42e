//! A running connection: the owner's [`Link`] and the [`Driver`] that moves envelopes both
//! ways and runs the heartbeat.
//!
//! ```text
//!   owner ──LinkSender::send(&Envelope)──▶ [outgoing queue] ──▶ writer ──▶ socket
//!   owner ◀──Link::incoming (mpsc)──────── reader ◀── socket      (Ping → Pong, Pong → detector)
//!   owner ◀──Link::down (oneshot)───────── why the connection ended, exactly once
//! ```
//!
//! The driver's reader and writer run concurrently inside one future, so a peer that stops
//! reading blocks only the writer: the reader still sees the silence and the heartbeat
//! declares the peer down. The writer feeds every queued frame, then flushes once.
//!
//! The connection ends, and `down` reports why, when: the peer closes it; the peer is silent
//! past the heartbeat timeout; a frame is malformed (it is logged); an I/O error occurs; or the
//! owner calls [`LinkSender::close`] or drops every `LinkSender` (queued envelopes are written
//! first); or, on a link with a lease, when the lease runs out (see [`crate::lease`]): the
//! driver renews [`Link::lease`] with every answered ping and expires it when the connection
//! ends, and ends the connection as soon as anyone has seen the lease expired. Envelopes still queued when the connection fails are lost: the owner treats `down` as
//! "the peer may or may not have received what was sent".
//!
//! The frames a peer sent before the connection ended are delivered, however it ended:
//! - A connection this node closes lingers after `down` is reported: its direction is shut
//!   down, and what the peer still sends is read and dropped until the peer closes too (at
//!   most the heartbeat timeout). Closing a socket with unread input resets the connection,
//!   and the peer's next write fails.
//! - When a write fails (a reset, say), the reader still reads what the peer sent before, to
//!   the end (at most the heartbeat timeout): the kernel hands it over before the error, and
//!   the last frames a peer wrote (a leaving node's releases, say) are not lost.

use crate::lease::LeaseCell;
use crate::metrics::LinkMetrics;
use crate::net::NetConfig;
use crate::net::failure::{IoFailure, Malformed};
use crate::net::frame::{PeerFrame, Transport, decode_frame, encode_frame, encode_payload};
use crate::net::handshake::Role;
use crate::net::heartbeat::{Heartbeat, HeartbeatAction, HeartbeatConfig};
use crate::net::session::{SessionKey, Tagger};
use bytes::Bytes;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use locks_core::NodeId;
use locks_core::codec::CodecError;
use locks_core::proto::Envelope;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;

/// Heartbeat frames waiting for the writer. A ping is due at most once per interval and a pong
/// answers a ping, so a handful is plenty; when full (the peer floods pings while not reading)
/// further pongs are dropped, which costs nothing.
const CONTROL_CAPACITY: usize = 16;

/// The most frames the writer feeds before one flush.
const MAX_BATCH: usize = 256;

fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// Builds the owner's [`Link`] and the [`Driver`] of an established connection.
pub(crate) fn open(
    peer: NodeId,
    session: &SessionKey,
    role: Role,
    peer_addr: Option<SocketAddr>,
    transport: Transport,
    config: &NetConfig,
    started: std::time::Instant,
) -> (Link, Driver) {
    let (out_tx, out_rx) = mpsc::channel(config.outgoing_capacity.max(1));
    let (in_tx, in_rx) = mpsc::channel(config.incoming_capacity.max(1));
    let (down_tx, down_rx) = oneshot::channel();
    let close = CancellationToken::new();
    let max_frame = config.effective_max_frame();
    // Without a lease the cell stays valid until the connection ends.
    let lease = Arc::new(LeaseCell::new(match config.heartbeat.lease {
        Some(lease) => started + lease,
        None => now() + Duration::from_secs(100 * 365 * 24 * 3600),
    }));
    let link = Link {
        peer: peer.clone(),
        peer_addr,
        role,
        sender: LinkSender {
            peer: peer.clone(),
            tx: out_tx,
            close: close.clone(),
            max_frame,
        },
        incoming: in_rx,
        down: down_rx,
        lease: lease.clone(),
    };
    let driver = Driver {
        peer,
        node: config.node.clone(),
        peer_addr,
        transport,
        out_rx,
        in_tx,
        down_tx,
        close,
        heartbeat: config.heartbeat,
        max_frame,
        lease,
        started,
        warnings: config.warnings.clone(),
        sealer: session.sealer(role),
        opener: session.opener(role),
    };
    (link, driver)
}

/// The owner's side of a running connection.
#[derive(Debug)]
pub struct Link {
    /// The peer's node name.
    pub peer: NodeId,
    /// The peer's socket address.
    pub peer_addr: Option<SocketAddr>,
    /// Whether this node connected or accepted.
    pub role: Role,
    /// Sends envelopes to the peer. Clone it freely; the connection closes when every clone is
    /// dropped (after writing what is queued).
    pub sender: LinkSender,
    /// The envelopes the peer sent, in order. Ends (`None`) when the connection is down. If the
    /// owner stops taking them, the connection stops reading once
    /// [`NetConfig::incoming_capacity`] are waiting; do not stop for longer than the peer's
    /// heartbeat timeout, or the peer will declare this node down.
    pub incoming: mpsc::Receiver<Envelope>,
    /// Resolves once with the reason the connection went down (an error only if the driver
    /// was dropped without running to its end).
    pub down: oneshot::Receiver<DownReason>,
    /// The link's lease: valid while the peer keeps answering pings (see [`crate::lease`]);
    /// expired for good once the connection is down.
    pub lease: Arc<LeaseCell>,
}

/// Sends envelopes to one peer. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LinkSender {
    peer: NodeId,
    tx: mpsc::Sender<Bytes>,
    close: CancellationToken,
    max_frame: usize,
}

/// Why an envelope was not queued.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The envelope does not fit in a frame ([`NetConfig::max_frame`]) or cannot be encoded.
    #[error("cannot send the envelope: {0}")]
    Encode(#[from] CodecError),
    /// The outgoing queue is full ([`NetConfig::outgoing_capacity`]); only from
    /// [`LinkSender::try_send`].
    #[error("the outgoing queue to the peer is full")]
    Full,
    /// The connection is closed or closing.
    #[error("the connection to the peer is closed")]
    Closed,
}

impl LinkSender {
    /// The peer this sender sends to.
    pub fn peer(&self) -> &NodeId {
        &self.peer
    }

    /// Queues an envelope without waiting. It is encoded here, so a too-large envelope is
    /// refused to the caller rather than breaking the connection.
    pub fn try_send(&self, envelope: &Envelope) -> Result<(), SendError> {
        if self.close.is_cancelled() {
            return Err(SendError::Closed);
        }
        let bytes = encode_payload(envelope, self.max_frame)?;
        self.tx.try_send(bytes).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SendError::Full,
            mpsc::error::TrySendError::Closed(_) => SendError::Closed,
        })
    }

    /// Encodes an envelope for this connection, for [`LinkSender::try_send_encoded`] or
    /// [`LinkSender::send_encoded`]: refused if it does not fit in a frame.
    pub fn encode(&self, envelope: &Envelope) -> Result<Bytes, SendError> {
        Ok(encode_payload(envelope, self.max_frame)?)
    }

    /// Queues an envelope encoded by [`LinkSender::encode`] without waiting.
    pub fn try_send_encoded(&self, frame: Bytes) -> Result<(), SendError> {
        if self.close.is_cancelled() {
            return Err(SendError::Closed);
        }
        self.tx.try_send(frame).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SendError::Full,
            mpsc::error::TrySendError::Closed(_) => SendError::Closed,
        })
    }

    /// Queues an envelope encoded by [`LinkSender::encode`], waiting while the outgoing queue
    /// is full.
    pub async fn send_encoded(&self, frame: Bytes) -> Result<(), SendError> {
        if self.close.is_cancelled() {
            return Err(SendError::Closed);
        }
        self.tx.send(frame).await.map_err(|_| SendError::Closed)
    }

    /// Queues an envelope, waiting while the outgoing queue is full.
    pub async fn send(&self, envelope: &Envelope) -> Result<(), SendError> {
        if self.close.is_cancelled() {
            return Err(SendError::Closed);
        }
        let bytes = encode_payload(envelope, self.max_frame)?;
        self.tx.send(bytes).await.map_err(|_| SendError::Closed)
    }

    /// Closes the connection: what is already queued is written, then the connection is shut
    /// down and `down` reports [`DownReason::ClosedLocally`].
    pub fn close(&self) {
        self.close.cancel();
    }

    /// Whether the connection is closed or closing.
    pub fn is_closed(&self) -> bool {
        self.close.is_cancelled() || self.tx.is_closed()
    }
}

/// Why a connection went down.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DownReason {
    /// The peer closed the connection.
    #[error("the peer closed the connection")]
    ClosedByPeer,
    /// This node closed it ([`LinkSender::close`], or every sender dropped).
    #[error("closed by this node")]
    ClosedLocally,
    /// Nothing arrived from the peer for `silent_for`, at least the heartbeat timeout.
    #[error("nothing heard from the peer for {silent_for:?} (heartbeat timeout)")]
    HeartbeatTimeout {
        /// How long the peer was silent.
        silent_for: Duration,
    },
    /// No ping sent in the last lease was answered (see [`crate::lease`]).
    #[error("no ping answered for {proved_ago:?} (lease expired)")]
    LeaseExpired {
        /// How long ago the latest answered ping was sent.
        proved_ago: Duration,
    },
    /// A frame could not be decoded, or was not allowed after the handshake.
    #[error("malformed frame from the peer: {0}")]
    Malformed(Malformed),
    /// Reading or writing failed.
    #[error("i/o error: {0}")]
    Io(IoFailure),
}

/// The future that runs one connection; see [`Driver::run`].
#[derive(Debug)]
pub struct Driver {
    peer: NodeId,
    node: NodeId,
    peer_addr: Option<SocketAddr>,
    transport: Transport,
    out_rx: mpsc::Receiver<Bytes>,
    in_tx: mpsc::Sender<Envelope>,
    down_tx: oneshot::Sender<DownReason>,
    close: CancellationToken,
    heartbeat: HeartbeatConfig,
    max_frame: usize,
    lease: Arc<LeaseCell>,
    started: std::time::Instant,
    /// A peer that reconnects in a loop must not flood the log with its ends.
    warnings: crate::log_limit::LogLimiter,
    /// Tags the frames this side sends, and checks the peer's (`crate::net::session`).
    sealer: Tagger,
    opener: Tagger,
}

impl Driver {
    /// Runs the connection until it goes down; returns the reason, which is also logged and
    /// sent to [`Link::down`]. Dropping the future closes the connection.
    pub async fn run(self) -> DownReason {
        let Driver {
            peer,
            node,
            peer_addr,
            transport,
            out_rx,
            in_tx,
            down_tx,
            close,
            heartbeat,
            max_frame,
            lease,
            started,
            warnings,
            sealer,
            opener,
        } = self;
        let (sink, stream) = transport.split();
        let (ctrl_tx, ctrl_rx) = mpsc::channel(CONTROL_CAPACITY);
        let detector = Heartbeat::with_proof(heartbeat, now(), started).aligned_to(shared_grid());
        let m = LinkMetrics::register(&node, &peer);
        let mut stream = stream;
        // The halves borrow the stream; the block ends them before a lingering close reads it.
        let reason = {
            let mut reader = std::pin::pin!(read_loop(
                (&mut stream, opener),
                in_tx,
                ctrl_tx,
                detector,
                &lease,
                max_frame,
                &m
            ));
            let writer = write_loop(
                (sink, sealer),
                out_rx,
                ctrl_rx,
                close,
                max_frame,
                heartbeat.timeout,
                &m,
            );
            let ended = tokio::select! {
                reason = &mut reader => Ended::Reader(reason),
                reason = writer => Ended::Writer(reason),
            };
            match ended {
                Ended::Reader(reason) => reason,
                Ended::Writer(reason @ DownReason::Io(_)) => {
                    // A write failed (the peer reset the connection, say), but what the peer sent
                    // before is still in the socket, and the kernel hands it over before the
                    // error: read it to its end, bounded, so that the peer's last frames (a
                    // leaving node's releases) are delivered before the link is reported down.
                    // (The lease may be renewed by a pong read here: it counts from the ping's
                    // send time, before the peer's end, so that stays within what it promises.)
                    let _ = timeout(heartbeat.timeout, &mut reader).await;
                    reason
                }
                Ended::Writer(reason) => reason,
            }
        };
        // Before anyone hears of the end: nothing may go on believing in this link. (An agent
        // that finds it so before the node down reaches it reports the loss with this cause.)
        match &reason {
            DownReason::LeaseExpired { .. } => lease.expire(),
            _ => lease.end(),
        }
        match &reason {
            DownReason::ClosedLocally => {
                tracing::debug!(%node, %peer, peer_addr = ?peer_addr, "node connection closed")
            }
            DownReason::ClosedByPeer => {
                crate::limited!(warnings, "connection closed by peer", info, %node, %peer, peer_addr = ?peer_addr, reason = %reason, "node connection down")
            }
            _ => {
                crate::limited!(warnings, "connection down", warn, %node, %peer, peer_addr = ?peer_addr, reason = %reason, "node connection down")
            }
        }
        let _ = down_tx.send(reason.clone());
        if reason == DownReason::ClosedLocally {
            linger_closed(&mut stream, heartbeat.timeout).await;
        }
        reason
    }
}

/// Which half of the connection ended first.
enum Ended {
    Reader(DownReason),
    Writer(DownReason),
}

/// A lingering close: our side is shut down (the peer reads everything we wrote, then the end
/// of the stream); now read and drop what the peer still sends until it closes its side too,
/// for at most `linger`, before the socket is closed. Closing a socket with unread input
/// resets the connection: the peer's next write fails, and a peer whose link then gave up
/// reading lost the last frames we sent, such as a leaving node's releases of its agents'
/// locks, which it replaced with a node down and its lock-delay.
async fn linger_closed(stream: &mut SplitStream<Transport>, linger: Duration) {
    let drain = async { while let Some(Ok(_)) = stream.next().await {} };
    let _ = timeout(linger, drain).await;
}

/// `stream`'s frames are checked by `opener` (`crate::net::session`).
async fn read_loop(
    (stream, mut opener): (&mut SplitStream<Transport>, Tagger),
    in_tx: mpsc::Sender<Envelope>,
    ctrl_tx: mpsc::Sender<PeerFrame>,
    mut detector: Heartbeat,
    lease: &LeaseCell,
    max_frame: usize,
    m: &LinkMetrics,
) -> DownReason {
    loop {
        let tick = sleep_until(Instant::from_std(detector.next_tick()));
        tokio::select! {
            // Frames first: after the owner made us wait, what the peer sent meanwhile proves
            // it alive before the detector looks at the clock.
            biased;
            item = stream.next() => {
                let bytes = match item {
                    None => return DownReason::ClosedByPeer,
                    Some(Err(e)) if e.kind() == io::ErrorKind::InvalidData => {
                        return DownReason::Malformed(Malformed::Framing(e.into()));
                    }
                    Some(Err(e)) => return DownReason::Io(e.into()),
                    Some(Ok(bytes)) => bytes,
                };
                let at = now();
                detector.on_frame(at);
                m.received_bytes.increment(bytes.len() as u64);
                let Some(frame) = opener.open(&bytes) else {
                    return DownReason::Malformed(Malformed::BadTag);
                };
                match decode_frame(frame, max_frame) {
                    Err(e) => return DownReason::Malformed(e.into()),
                    Ok(PeerFrame::Payload(envelope)) => {
                        m.received_messages.increment(1);
                        // An owner that dropped `incoming` does not want envelopes; keep the
                        // connection (and its heartbeat) up for sending.
                        let _ = in_tx.send(envelope).await;
                    }
                    Ok(PeerFrame::Ping { seq }) => {
                        let _ = ctrl_tx.try_send(PeerFrame::Pong { seq });
                    }
                    Ok(PeerFrame::Pong { seq }) => {
                        if let Some(rtt) = detector.on_pong(seq, at) {
                            tracing::trace!(?rtt, "heartbeat round trip");
                            m.rtt.record(rtt);
                        }
                        if let Some(until) = detector.lease_deadline()
                            && lease.renew(until).is_err()
                        {
                            // Someone saw it expire first: that decision stands.
                            return lease_expired(&detector, at);
                        }
                    }
                    Ok(frame) => {
                        return DownReason::Malformed(Malformed::AfterHandshake {
                            got: frame.kind(),
                        });
                    }
                }
            }
            () = tick => match detector.on_tick(now()) {
                _ if lease.is_expired() => return lease_expired(&detector, now()),
                HeartbeatAction::Idle => {}
                HeartbeatAction::Ping { seq } => {
                    let _ = ctrl_tx.try_send(PeerFrame::Ping { seq });
                }
                HeartbeatAction::Down { silent_for } => {
                    return DownReason::HeartbeatTimeout { silent_for };
                }
                HeartbeatAction::LeaseExpired { proved_ago } => {
                    return DownReason::LeaseExpired { proved_ago };
                }
            },
        }
    }
}

fn lease_expired(detector: &Heartbeat, now: std::time::Instant) -> DownReason {
    DownReason::LeaseExpired {
        proved_ago: now.saturating_duration_since(detector.proved()),
    }
}

/// Every frame fed to `sink` is tagged by `sealer` (`crate::net::session`).
async fn write_loop(
    (mut sink, mut sealer): (SplitSink<Transport, Bytes>, Tagger),
    mut out_rx: mpsc::Receiver<Bytes>,
    mut ctrl_rx: mpsc::Receiver<PeerFrame>,
    close: CancellationToken,
    max_frame: usize,
    linger: Duration,
    m: &LinkMetrics,
) -> DownReason {
    // Envelopes (not heartbeats) count as messages; every frame counts its bytes.
    let count = |bytes: &Bytes, envelope: bool| {
        m.sent_messages.increment(u64::from(envelope));
        m.sent_bytes.increment(bytes.len() as u64);
    };
    loop {
        let first = tokio::select! {
            biased;
            () = close.cancelled() => return close_gracefully(sink, sealer, out_rx, linger).await,
            Some(frame) = ctrl_rx.recv() => match encode_frame(&frame, max_frame) {
                Ok(bytes) => { count(&bytes, false); bytes }
                Err(e) => {
                    tracing::error!(error = %e, "cannot encode a heartbeat frame");
                    continue;
                }
            },
            bytes = out_rx.recv() => match bytes {
                Some(bytes) => { count(&bytes, true); bytes }
                None => return close_gracefully(sink, sealer, out_rx, linger).await,
            },
        };
        if let Err(e) = sink.feed(sealer.seal(first)).await {
            return DownReason::Io(e.into());
        }
        // Batch: feed everything already queued, then flush once.
        for _ in 1..MAX_BATCH {
            let next = match ctrl_rx.try_recv() {
                Ok(frame) => match encode_frame(&frame, max_frame) {
                    Ok(bytes) => bytes,
                    Err(_) => continue,
                },
                Err(_) => match out_rx.try_recv() {
                    Ok(bytes) => {
                        m.sent_messages.increment(1);
                        bytes
                    }
                    Err(_) => break,
                },
            };
            m.sent_bytes.increment(next.len() as u64);
            if let Err(e) = sink.feed(sealer.seal(next)).await {
                return DownReason::Io(e.into());
            }
        }
        if let Err(e) = sink.flush().await {
            return DownReason::Io(e.into());
        }
    }
}

/// Writes what is queued, then shuts down our direction; bounded by `linger`.
async fn close_gracefully(
    mut sink: SplitSink<Transport, Bytes>,
    mut sealer: Tagger,
    mut out_rx: mpsc::Receiver<Bytes>,
    linger: Duration,
) -> DownReason {
    out_rx.close();
    let drain = async {
        while let Some(bytes) = out_rx.recv().await {
            sink.feed(sealer.seal(bytes)).await?;
        }
        sink.close().await
    };
    match timeout(linger, drain).await {
        Ok(Ok(())) | Err(_) => DownReason::ClosedLocally,
        Ok(Err(e)) => DownReason::Io(e.into()),
    }
}

/// The grid every link's pings are aligned to ([`Heartbeat::aligned_to`]): the instant at
/// which the wall clock last read a whole minute when this process first asked, so every
/// process of a machine (and every machine whose clock is synchronized) finds the same grid
/// for any interval that divides a minute. Only the phase of the pings depends on it: a wall
/// clock that is wrong or stepped makes them less aligned, never late.
fn shared_grid() -> std::time::Instant {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    *ORIGIN.get_or_init(|| {
        let now = std::time::Instant::now();
        let into_minute = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(Duration::ZERO, |d| {
                Duration::from_nanos((d.as_nanos() % 60_000_000_000) as u64)
            });
        now.checked_sub(into_minute).unwrap_or(now)
    })
}
