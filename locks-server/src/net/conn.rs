//! The handshake over a `TcpStream`, and the authenticated [`Connection`] it yields.
//!
//! [`establish`] first makes the stream a TLS session when the node has TLS settings
//! ([`crate::net::tls`]; the TLS handshake and the cookie handshake share one deadline), then
//! runs the [`Handshake`] machine on it: it feeds it frames, decode
//! failures and deadline ticks, writes the frames it asks for, and returns a [`Connection`]
//! (authenticated, nothing spawned yet) or the [`Refusal`], after logging it and closing the
//! stream. Handshake frames are limited to [`HANDSHAKE_MAX_FRAME`] bytes; the connection's
//! frame limit is raised to [`NetConfig::max_frame`] once the peer is authenticated.
//! [`Connection::start`] spawns the [`Driver`] on the current tokio runtime and returns the
//! owner's [`Link`]; [`Connection::split`] gives the driver to spawn elsewhere (for example on
//! an actix context).

use crate::log_limit::Verdict;
use crate::net::NetConfig;
use crate::net::frame::{
    HANDSHAKE_MAX_FRAME, NONCE_LEN, Nonce, PeerFrame, Transport, decode_frame, encode_frame,
    length_codec,
};
use crate::net::handshake::{Handshake, HandshakeOutcome, NameVerdict, Refusal, Role, Step};
use crate::net::link::{self, Driver, Link};
use crate::net::session::{SessionKey, TAG_LEN};
use crate::net::stream::NodeStream;
use crate::net::tls;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use locks_core::NodeId;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_util::codec::Framed;

/// How long a side that refuses a handshake waits for its `Refuse` frame to be written and
/// for the peer to hang up, before it drops the socket.
const REFUSE_LINGER: Duration = Duration::from_secs(1);

fn now() -> std::time::Instant {
    Instant::now().into_std()
}

fn random_nonce() -> Result<Nonce, getrandom::Error> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce)?;
    Ok(nonce)
}

/// Runs the handshake on `stream` as `role`, inside a TLS session when `config` has TLS
/// settings.
///
/// `name_in_use` says whether a node name already has a connection to this node; a peer
/// with such a name is refused with [`Refusal::DuplicateName`]. Under TLS a peer whose
/// certificate does not carry the name it gives is refused first, with
/// [`TlsFailure::NameNotCertified`](crate::net::TlsFailure::NameNotCertified), unless node
/// names are not bound ([`TlsConfig::without_node_names`](crate::net::TlsConfig::without_node_names)). (Two handshakes with the same
/// name can still race; the owner checks again when it registers the connection.) Sets
/// `TCP_NODELAY`. On refusal the reason is logged, the peer is told why when the refusal was
/// decided here, and the stream is closed.
pub async fn establish(
    stream: TcpStream,
    role: Role,
    config: &NetConfig,
    name_in_use: impl Fn(&NodeId) -> bool,
) -> Result<Connection, Refusal> {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
    // Before this node sends anything: the start of the link's lease (see `crate::lease`).
    let started = now();
    let peer_addr = stream.peer_addr().ok();
    // One deadline for the TLS handshake and the cookie handshake.
    let deadline = now() + config.handshake_timeout;
    let stream = match &config.tls {
        None => NodeStream::Plain(stream),
        Some(settings) => match tls::upgrade(stream, role, settings, deadline).await {
            Ok(stream) => stream,
            Err(refusal) => {
                log_refusal(config, peer_addr, role, &refusal);
                return Err(refusal);
            }
        },
    };
    // Under TLS, the name the peer gives must be one its verified certificate carries.
    let peer_cert = stream.peer_certificate();
    let check_name = |name: &NodeId| {
        let certified = config
            .tls
            .as_ref()
            .is_none_or(|tls| tls.admits(peer_cert.as_ref(), name.as_str()));
        if !certified {
            NameVerdict::NotCertified
        } else if name_in_use(name) {
            NameVerdict::InUse
        } else {
            NameVerdict::Free
        }
    };
    let mut transport = Framed::new(stream, length_codec(HANDSHAKE_MAX_FRAME));
    let nonce = match random_nonce() {
        Ok(nonce) => nonce,
        Err(e) => {
            let refusal = Refusal::NoRandomness(e);
            log_refusal(config, peer_addr, role, &refusal);
            return Err(refusal);
        }
    };
    let (mut hs, mut step) = Handshake::new(
        role,
        config.node.clone(),
        config.cookie.clone(),
        nonce,
        deadline,
    );
    let outcome = loop {
        let Step { send, outcome } = step;
        if let Some(HandshakeOutcome::Refused(refusal)) = outcome {
            if !send.is_empty() {
                // A refusal decided here: tell the peer, then let it hang up first, bounded.
                let linger = Instant::now() + REFUSE_LINGER;
                if send_frames(&mut transport, &send, linger).await.is_ok() {
                    linger_close(&mut transport, linger).await;
                }
            }
            break HandshakeOutcome::Refused(refusal);
        }
        if let Err(e) = send_frames(&mut transport, &send, Instant::from_std(deadline)).await {
            if outcome.is_some() {
                // The acceptor's last proof did not go out: the machine is done, so the
                // failure is decided here.
                break HandshakeOutcome::Refused(match e {
                    SendFailure::Timeout => Refusal::Timeout,
                    SendFailure::Io(e) => Refusal::Io(e.into()),
                });
            }
            step = match e {
                SendFailure::Timeout => hs.on_tick(now()),
                SendFailure::Io(e) => hs.on_io_error(e),
            };
            continue;
        }
        if let Some(established) = outcome {
            break established;
        }
        step = tokio::select! {
            item = transport.next() => match item {
                None => hs.on_closed(),
                // LengthDelimitedCodec reports a length prefix above the limit as InvalidData.
                Some(Err(e)) if e.kind() == io::ErrorKind::InvalidData => {
                    hs.on_bad_framing(e)
                }
                Some(Err(e)) => hs.on_io_error(e),
                Some(Ok(bytes)) => match decode_frame(&bytes, HANDSHAKE_MAX_FRAME) {
                    Ok(frame) => hs.on_frame(frame, check_name),
                    Err(e) => hs.on_malformed(e),
                },
            },
            () = sleep_until(Instant::from_std(hs.deadline())) => hs.on_tick(now()),
        };
    };
    match outcome {
        HandshakeOutcome::Established { peer } => {
            let Some(session) = hs.session().cloned() else {
                unreachable!("an established handshake has its session key")
            };
            transport
                .codec_mut()
                .set_max_frame_length(config.effective_max_frame() + TAG_LEN);
            crate::limited!(
                config.warnings, "connection established", info,
                node = %config.node, %peer, peer_addr = ?peer_addr, ?role,
                "node connection established"
            );
            Ok(Connection {
                peer,
                session,
                role,
                peer_addr,
                transport,
                config: config.clone(),
                started,
            })
        }
        HandshakeOutcome::Refused(refusal) => {
            let refusal = tls::reclassify(refusal);
            log_refusal(config, peer_addr, role, &refusal);
            Err(refusal)
        }
    }
}

/// Logs a refused handshake: anyone who can reach the port can cause one, so at most one
/// warning per kind of refusal per interval, the rest at DEBUG.
fn log_refusal(config: &NetConfig, peer_addr: Option<SocketAddr>, role: Role, refusal: &Refusal) {
    let node = &config.node;
    match config.warnings.event(refusal_kind(refusal)) {
        Verdict::Warn { suppressed } => tracing::warn!(
            %node, peer_addr = ?peer_addr, ?role, reason = %refusal,
            suppressed_since_last_warning = suppressed,
            "node handshake refused; connection closed"
        ),
        Verdict::Quiet => tracing::debug!(
            %node, peer_addr = ?peer_addr, ?role, reason = %refusal,
            "node handshake refused; connection closed"
        ),
    }
}

fn refusal_kind(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::WrongCookie => "handshake: wrong cookie",
        Refusal::WrongVersion { .. } => "handshake: wrong version",
        Refusal::DuplicateName(_) => "handshake: duplicate name",
        Refusal::Malformed(_) => "handshake: malformed",
        Refusal::Timeout => "handshake: timeout",
        Refusal::Closed => "handshake: closed",
        Refusal::Io(_) => "handshake: i/o error",
        Refusal::NoRandomness(_) => "handshake: no randomness",
        Refusal::ByPeer(_) => "handshake: refused by the peer",
        Refusal::Evicted => "handshake: evicted",
        Refusal::Tls(failure) => failure.kind(),
    }
}

enum SendFailure {
    Timeout,
    Io(io::Error),
}

/// Writes `frames` and flushes once, by `deadline`.
async fn send_frames(
    transport: &mut Transport,
    frames: &[PeerFrame],
    deadline: Instant,
) -> Result<(), SendFailure> {
    if frames.is_empty() {
        return Ok(());
    }
    let write = async {
        let transport: &mut Transport = transport;
        for frame in frames {
            let bytes = encode_frame(frame, HANDSHAKE_MAX_FRAME)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            transport.feed(bytes).await?;
        }
        SinkExt::<Bytes>::flush(transport).await
    };
    match timeout_at(deadline, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(SendFailure::Io(e)),
        Err(_) => Err(SendFailure::Timeout),
    }
}

/// Shuts down our direction, then reads and discards until the peer hangs up or `deadline`
/// passes, so that the peer reads our last frame before the socket closes (closing with
/// unread input would reset the connection and could destroy that frame).
async fn linger_close(transport: &mut Transport, deadline: Instant) {
    let drain = async {
        if SinkExt::<Bytes>::close(transport).await.is_err() {
            return;
        }
        while let Some(Ok(_)) = transport.next().await {}
    };
    let _ = timeout_at(deadline, drain).await;
}

/// An authenticated connection to a peer node, not yet driven.
///
/// Start it with [`Connection::start`] (or [`Connection::split`] and spawn the [`Driver`]);
/// until then nothing is read or written, and the peer's heartbeat will eventually declare
/// this node down.
#[derive(Debug)]
pub struct Connection {
    peer: NodeId,
    /// Tags every frame after the handshake (`crate::net::session`).
    session: SessionKey,
    role: Role,
    peer_addr: Option<SocketAddr>,
    transport: Transport,
    config: NetConfig,
    /// When this node began the handshake, before it sent anything.
    started: std::time::Instant,
}

impl Connection {
    /// The peer's node name, as proved in the handshake.
    pub fn peer(&self) -> &NodeId {
        &self.peer
    }

    /// Whether this node connected (initiator) or accepted.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The peer's socket address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer_addr
    }

    /// The owner's [`Link`] and the [`Driver`] future that runs the connection. The driver
    /// needs no `Send` executor but is `Send`; spawn it wherever the owner lives.
    pub fn split(self) -> (Link, Driver) {
        link::open(
            self.peer,
            &self.session,
            self.role,
            self.peer_addr,
            self.transport,
            &self.config,
            self.started,
        )
    }

    /// Spawns the driver on the current tokio runtime (`tokio::spawn`) and returns the link.
    ///
    /// # Panics
    /// Outside a tokio runtime, like `tokio::spawn`.
    pub fn start(self) -> Link {
        let (link, driver) = self.split();
        tokio::spawn(driver.run());
        link
    }
}
