//! The node-to-node transport: TCP connections between the nodes of a cluster.
//!
//! This module owns everything between a `TcpStream` and the [`Envelope`]s a node routes: the
//! optional TLS session under everything else ([`tls`], over the stream of [`stream`]), the
//! framing ([`frame`]), the handshake that authenticates a peer ([`handshake`]), the detection
//! of a dead peer ([`heartbeat`]), and what runs them on tokio: the handshake over a socket
//! ([`conn`]), the connection driver ([`link`]), the listener and connect helper ([`listen`]),
//! and the bound on unproven handshakes ([`admission`]).
//! It knows nothing about lock servers or agents: the node's router owns a [`Link`] per peer,
//! sends envelopes into it and takes envelopes out of it.
//!
//! ```text
//!   initiator                                   acceptor
//!      │ ── Hello{version, name_i, nonce_i} ──▶    │  version?
//!      │ ◀── Hello{version, name_a, nonce_a} ──    │
//!      │ ── Proof{HMAC(cookie, i→a, nonces)} ─▶    │  proof checked (constant time); name free?
//!      │ ◀── Proof{HMAC(cookie, a→i, nonces)} ─    │  established
//!  established                                     │
//!      │ ◀─────── Payload(Envelope) / Ping / Pong ───────▶ │
//! ```
//!
//! Invariants:
//! - Nothing but a `Hello`, `Proof` or `Refuse` frame is accepted before the handshake
//!   succeeded, and handshake frames are limited to [`HANDSHAKE_MAX_FRAME`] bytes; after it,
//!   frames are limited to [`NetConfig::max_frame`].
//! - The cookie never crosses the wire; each side proves knowledge of it with an HMAC over
//!   both names and both nonces, bound to the direction of the proof.
//! - Any refusal, malformed frame, I/O error or heartbeat timeout closes that one connection
//!   and is logged with `tracing`; nothing else is affected. What a stranger can cause (a
//!   refused handshake, a failed `accept`) warns at most once per reason per interval, the
//!   rest at DEBUG ([`NetConfig::warnings`]), so the log cannot be flooded from outside. A connection reports why it went
//!   down exactly once ([`DownReason`]).
//! - The protocol cores ([`Handshake`], [`Heartbeat`]) are pure state machines: time and
//!   randomness are inputs. Only [`conn`], [`link`] and [`listen`] do I/O.
//!
//! Security note: the handshake authenticates peers against a shared cookie, as Erlang's
//! distribution does, and every frame after it carries a tag made with a key derived from the
//! cookie and the handshake ([`session`]), so a relay of someone else's handshake gains nothing
//! and a frame cannot be forged, replayed or reordered on the wire; on its own it does not
//! encrypt (anyone on the path reads every lock id and name). With [`NetConfig::tls`] set, every connection is first a mutually
//! verified TLS session ([`tls`]) and the cookie handshake runs inside it; without it, run
//! clusters on a trusted network only.
//!
//! [`Envelope`]: locks_core::proto::Envelope
//! [`frame`]: crate::net::frame
//! [`handshake`]: crate::net::handshake
//! [`heartbeat`]: crate::net::heartbeat
//! [`conn`]: crate::net::conn
//! [`link`]: crate::net::link
//! [`listen`]: crate::net::listen
//! [`admission`]: crate::net::admission
//! [`tls`]: crate::net::tls
//! [`session`]: crate::net::session
//! [`stream`]: crate::net::stream
//! [`NetConfig::tls`]: crate::net::NetConfig::tls
//! [`Link`]: crate::net::Link
//! [`HANDSHAKE_MAX_FRAME`]: crate::net::frame::HANDSHAKE_MAX_FRAME
//! [`NetConfig::max_frame`]: crate::net::NetConfig::max_frame
//! [`DownReason`]: crate::net::DownReason
//! [`Handshake`]: crate::net::Handshake
//! [`Heartbeat`]: crate::net::Heartbeat

pub mod admission;
pub mod conn;
mod cookie;
pub mod failure;
pub mod frame;
pub mod handshake;
pub mod heartbeat;
pub mod link;
pub mod listen;
mod role;
pub mod session;
pub mod stream;
pub mod tls;

pub use conn::{Connection, establish};
pub use cookie::Cookie;
pub use failure::{IoFailure, Malformed, TlsFailure};
pub use frame::{FrameError, PeerFrame, RefusalCode};
pub use handshake::{Handshake, HandshakeOutcome, NameVerdict, Refusal};
pub use heartbeat::{Heartbeat, HeartbeatAction, HeartbeatConfig};
pub use link::{DownReason, Driver, Link, LinkSender, SendError};
pub use listen::{DialError, Listener, NameInUse, connect};
pub use role::Role;
pub use stream::NodeStream;
pub use tls::{TlsConfig, TlsConfigError};

use crate::log_limit::LogLimiter;
use locks_core::NodeId;
use locks_core::codec::{DEFAULT_MAX_FRAME, HARD_MAX_FRAME};
use std::time::Duration;

/// How this node's connections behave. Build with [`NetConfig::new`] and adjust the fields.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// This node's name, sent in the handshake.
    pub node: NodeId,
    /// The cluster cookie.
    pub cookie: Cookie,
    /// How long a handshake may take before it is refused with [`Refusal::Timeout`].
    /// Default 5 s.
    pub handshake_timeout: Duration,
    /// When to ping a silent peer and when to declare it down. Default: ping after 500 ms of
    /// silence, down after 2 s.
    pub heartbeat: HeartbeatConfig,
    /// How long [`connect`] waits for the TCP connection. Default 5 s.
    pub connect_timeout: Duration,
    /// The largest frame accepted or sent after the handshake, in bytes (capped at
    /// [`HARD_MAX_FRAME`]). Default [`DEFAULT_MAX_FRAME`].
    pub max_frame: usize,
    /// How many encoded envelopes may wait to be written to one peer before
    /// [`LinkSender::try_send`] reports [`SendError::Full`]. Default 1024.
    pub outgoing_capacity: usize,
    /// How many received envelopes may wait for the owner of a [`Link`] before the connection
    /// stops reading (TCP then pushes back on the peer). Default 1024.
    pub incoming_capacity: usize,
    /// How many accepted connections may be in their handshake at once before their peer
    /// proved the cookie; when one more arrives, the oldest of them is closed to make room
    /// (see [`admission`]). Default 64.
    pub max_pending_handshakes: usize,
    /// Limits the warnings that refused connections and failed `accept`s write, to one per
    /// reason per [`WARN_INTERVAL`](crate::log_limit::WARN_INTERVAL) (the rest at DEBUG).
    /// Shared by the clones of this configuration.
    pub warnings: LogLimiter,
    /// Mutual TLS under the handshake ([`tls`]): `None` (the default) speaks clear text.
    /// Every node of a cluster must agree: a TLS node refuses a plain one and the reverse.
    pub tls: Option<TlsConfig>,
}

impl NetConfig {
    /// The defaults above for node `node` in the cluster of `cookie`.
    pub fn new(node: NodeId, cookie: impl Into<Cookie>) -> NetConfig {
        NetConfig {
            node,
            cookie: cookie.into(),
            handshake_timeout: Duration::from_secs(5),
            heartbeat: HeartbeatConfig::default(),
            connect_timeout: Duration::from_secs(5),
            max_frame: DEFAULT_MAX_FRAME,
            outgoing_capacity: 1024,
            incoming_capacity: 1024,
            max_pending_handshakes: 64,
            warnings: LogLimiter::default(),
            tls: None,
        }
    }

    /// [`NetConfig::max_frame`], capped at [`HARD_MAX_FRAME`] and at least
    /// [`HANDSHAKE_MAX_FRAME`](crate::net::frame::HANDSHAKE_MAX_FRAME).
    pub fn effective_max_frame(&self) -> usize {
        self.max_frame
            .clamp(frame::HANDSHAKE_MAX_FRAME, HARD_MAX_FRAME)
    }
}
