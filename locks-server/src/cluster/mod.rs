//! The cluster: a node's connections to the other nodes, and what their coming and going does.
//!
//! ```text
//!   listener ─accept─▶ handshake ─┐                        ┌─▶ Router::add_remote(ClusterLink)
//!   dialer (per peer address) ────┴─▶ Membership (pure) ───┤   pump: incoming ─▶ Router
//!     ▲ redials with backoff            one link per peer  │   Up: agents, subscribers
//!     └──── link down ◀── pump ends ◀── connection ends ───┴─▶ Down: Router::remove_remote,
//!                                                               LockServer LinkDown, agents,
//!                                                               subscribers
//! ```
//!
//! Everything here runs on the node's own thread (its actix system): the accept loop, one task
//! per handshake, one dialer per configured or connected peer address, and per link its driver
//! ([`crate::net::Driver`]), its pump (incoming envelopes to the [`Router`]) and its overflow
//! flusher ([`remote`]). State changes happen in synchronous sections on that thread, so a link
//! going down and a link coming up are never interleaved. Handles on other threads reach it with
//! `ArbiterHandle::spawn_fn`.
//!
//! Contracts:
//! - **One connection per pair of nodes.** The [`membership`] registry refuses a second
//!   handshake with a connected peer, and makes simultaneous dials converge on one connection
//!   (the one dialed by the smaller name when both are past their first name check). Only a
//!   peer that proved the cookie can hold a name, so a stranger cannot block a real node.
//! - **Node down.** When a peer's connection ends (closed by either side, heartbeat timeout,
//!   lease expired, malformed frame, I/O error), after every envelope it delivered has been
//!   handed on: the router forgets the peer and its lease (sends to it fail at once with
//!   [`RouteError::NotConnected`]), the local lock server hands every lock and watch of the
//!   agents living on that node to ghosts and releases them after the lock-delay (`LinkDown`
//!   to the node's core, `crate::node_core`; [`crate::lease`]), every local agent is told,
//!   with the cause ([`Router::broadcast_node_event`]), and subscribers get
//!   [`NodeEvent::Down`]. The peer sees its side of the same connection end and does the
//!   same.
//! - **Node up.** A registered connection is added to the router, then every local agent and
//!   subscriber is told ([`NodeEvent::Up`]).
//! - **Kept apart.** [`Node::disconnect`](crate::Node::disconnect) closes the connection and
//!   refuses every handshake with that peer, dialed or accepted, until
//!   [`Node::reconnect`](crate::Node::reconnect) (or [`Node::connect`](crate::Node::connect)).
//! - **Redial.** Every address given as a peer (in the configuration or to `connect`) has a
//!   dialer: while the node behind it is not connected and not kept apart, it dials, waiting
//!   `reconnect_min` after a failure, doubling up to `reconnect_max`.
//! - **Connect.** [`Node::connect`](crate::Node::connect) reports the outcome of the handshake
//!   that decides: its own, or, when its own gave way to another handshake with the same peer
//!   (the node's background dial, or the peer's dial), that one's, as soon as it is known:
//!   connected, or its real failure ([`ConnectError::Concurrent`]).
//! - **Refusals.** Every failed handshake, dialed or accepted, is counted by cause
//!   ([`HandshakeRefusals`], [`Node::handshake_refusals`](crate::Node::handshake_refusals)).
//!   They are not node events: anyone who can reach the port can cause them.
//! - **Unknown agents.** A message from a peer to an agent that does not run here (it ended, or
//!   belongs to an earlier incarnation of this node) is answered with a `RemoveAgent` to the
//!   peer's lock server, so that a dead agent's locks there cannot leak
//!   ([`Router::deliver_from`]).
//!
//! [`RouteError::NotConnected`]: crate::router::RouteError::NotConnected

mod backoff;
pub(crate) mod membership;
pub(crate) mod remote;
mod run;

use crate::config::ClusterConfig;
use crate::net::{NetConfig, Role};
use crate::router::Router;
use futures::channel::{mpsc, oneshot};
use locks_core::NodeId;
use membership::{LinkId, Membership};
use remote::ClusterLink;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use tokio::sync::Notify;
use tokio_util::task::TaskTracker;

/// A change in the set of connected nodes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NodeEvent {
    /// The node is connected (for the first time, or again).
    Up(NodeId),
    /// The node's connection ended; its agents' locks here have been released.
    Down(NodeId),
}

/// The node events of one subscription ([`Node::subscribe_nodes`](crate::Node::subscribe_nodes)):
/// first an [`NodeEvent::Up`] for every node connected when it was made, then every change, in
/// order. Nothing is dropped; the stream ends when the node stops (at once on a local-only node).
#[derive(Debug)]
pub struct NodeEvents {
    rx: mpsc::UnboundedReceiver<NodeEvent>,
}

impl NodeEvents {
    /// The next event; `None` once the node has stopped.
    pub async fn recv(&mut self) -> Option<NodeEvent> {
        futures::StreamExt::next(&mut self.rx).await
    }

    /// The next event if one is ready.
    pub fn try_recv(&mut self) -> Option<NodeEvent> {
        self.rx.try_recv().ok()
    }

    pub(crate) fn closed() -> NodeEvents {
        let (_, rx) = mpsc::unbounded();
        NodeEvents { rx }
    }
}

impl futures::Stream for NodeEvents {
    type Item = NodeEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<NodeEvent>> {
        Pin::new(&mut self.rx).poll_next(cx)
    }
}

/// How many handshakes of a node failed, by cause, since it started
/// ([`Node::handshake_refusals`](crate::Node::handshake_refusals)). Refused handshakes are
/// counted rather than sent as [`NodeEvent`]s: anyone who can reach the port can cause them, and
/// a counter stays the same size however many there are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandshakeRefusals {
    /// The peer's proof did not match the cookie (decided here).
    pub wrong_cookie: u64,
    /// The peer speaks another protocol version (decided here).
    pub wrong_version: u64,
    /// This node's registry refused the peer's name: its own name, a peer kept apart, already
    /// connected, another handshake with it preferred (or such a connection not kept).
    pub duplicate_name: u64,
    /// Malformed or out-of-order handshake frames (decided here).
    pub malformed: u64,
    /// The handshake or the TCP connection did not finish in time.
    pub timeout: u64,
    /// The connection closed or failed before the handshake finished, or could not be made.
    pub closed: u64,
    /// The peer refused this node.
    pub by_peer: u64,
    /// Unproven handshakes closed to make room for newer connections
    /// ([`crate::net::admission`]).
    pub evicted: u64,
    /// TLS: the peer does not speak TLS (a node without TLS settings, or not a node).
    pub tls_not_tls: u64,
    /// TLS: the peer's certificate is not signed by this node's CA.
    pub tls_untrusted: u64,
    /// TLS: the peer's certificate has expired (or is not valid yet).
    pub tls_expired: u64,
    /// TLS: the peer's certificate does not carry the node name it gave (decided here).
    pub tls_node_name: u64,
    /// TLS: any other TLS failure decided here (no certificate, wrong server name, ...).
    /// A peer that refused this node's certificate counts as `by_peer`.
    pub tls_other: u64,
}

impl HandshakeRefusals {
    /// All refused handshakes.
    pub fn total(&self) -> u64 {
        self.wrong_cookie
            + self.wrong_version
            + self.duplicate_name
            + self.malformed
            + self.timeout
            + self.closed
            + self.by_peer
            + self.evicted
            + self.tls_not_tls
            + self.tls_untrusted
            + self.tls_expired
            + self.tls_node_name
            + self.tls_other
    }

    /// Counts one failed handshake; returns its reason, the name of the field counted (one of
    /// [`crate::metrics::REFUSAL_REASONS`]).
    fn count(&mut self, error: &ConnectError) -> &'static str {
        use crate::net::{DialError as Net, Refusal, TlsFailure};
        let (counter, reason) = match error {
            ConnectError::Net(Net::Refused { refusal, .. }) | ConnectError::Handshake(refusal) => {
                match refusal {
                    Refusal::WrongCookie => (&mut self.wrong_cookie, "wrong_cookie"),
                    Refusal::WrongVersion { .. } => (&mut self.wrong_version, "wrong_version"),
                    Refusal::DuplicateName(_) => (&mut self.duplicate_name, "duplicate_name"),
                    Refusal::Malformed(_) => (&mut self.malformed, "malformed"),
                    Refusal::Timeout => (&mut self.timeout, "timeout"),
                    Refusal::Closed | Refusal::Io(_) | Refusal::NoRandomness(_) => {
                        (&mut self.closed, "closed")
                    }
                    Refusal::ByPeer(_) => (&mut self.by_peer, "by_peer"),
                    Refusal::Evicted => (&mut self.evicted, "evicted"),
                    Refusal::Tls(TlsFailure::NotTls) => (&mut self.tls_not_tls, "tls_not_tls"),
                    Refusal::Tls(TlsFailure::Untrusted) => {
                        (&mut self.tls_untrusted, "tls_untrusted")
                    }
                    Refusal::Tls(TlsFailure::Expired) => (&mut self.tls_expired, "tls_expired"),
                    Refusal::Tls(TlsFailure::NameNotCertified { .. }) => {
                        (&mut self.tls_node_name, "tls_node_name")
                    }
                    Refusal::Tls(TlsFailure::RejectedByPeer { .. }) => {
                        (&mut self.by_peer, "by_peer")
                    }
                    Refusal::Tls(_) => (&mut self.tls_other, "tls_other"),
                }
            }
            ConnectError::Net(Net::Timeout { .. }) => (&mut self.timeout, "timeout"),
            ConnectError::Net(Net::Io { .. }) => (&mut self.closed, "closed"),
            ConnectError::Refused { .. }
            | ConnectError::NotKept { .. }
            | ConnectError::Concurrent { .. } => (&mut self.duplicate_name, "duplicate_name"),
        };
        *counter += 1;
        reason
    }
}

/// One connection to a peer, as [`Node::links`](crate::Node::links) reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// The peer.
    pub peer: NodeId,
    /// Whether this node dialed ([`Role::Initiator`]) or accepted the connection.
    pub role: Role,
    /// The peer's socket address.
    pub peer_addr: Option<SocketAddr>,
}

/// What a registered link keeps.
#[derive(Debug)]
struct LinkEntry {
    info: LinkInfo,
    remote: Arc<ClusterLink>,
}

/// The mutable state, behind one mutex.
#[derive(Debug)]
struct State {
    membership: Membership,
    links: BTreeMap<LinkId, LinkEntry>,
    subscribers: Vec<mpsc::UnboundedSender<NodeEvent>>,
    /// Callers of `disconnect` waiting for a link's down to be handled.
    down_waiters: HashMap<LinkId, Vec<oneshot::Sender<()>>>,
    /// The node name behind each dialed address, once a handshake has told it.
    addr_names: HashMap<SocketAddr, NodeId>,
    /// The addresses with a dialer.
    dialers: BTreeSet<SocketAddr>,
    /// The last failure of a handshake with each peer (other than giving way to another
    /// handshake with it), numbered by `failures_seen`: what a `connect` that gave way reports.
    /// An entry leaves when the peer comes up.
    last_failure: HashMap<NodeId, (u64, ConnectError)>,
    /// How many such failures were recorded.
    failures_seen: u64,
}

impl State {
    fn emit(&mut self, event: NodeEvent) {
        self.subscribers
            .retain(|s| s.unbounded_send(event.clone()).is_ok());
    }
}

/// A node's cluster layer. Created by [`Node::start`](crate::Node::start) for a node with a
/// cookie; every method that changes something must run on the node's thread.
#[derive(Debug)]
pub struct Cluster {
    node: NodeId,
    net: NetConfig,
    config: ClusterConfig,
    router: Arc<Router>,
    local_addr: Option<SocketAddr>,
    state: Mutex<State>,
    /// Woken on every change of membership (dialers wait on it).
    changed: Notify,
    /// The failed handshakes, by cause.
    refusals: tokio::sync::watch::Sender<HandshakeRefusals>,
    /// The connections' drivers, so that a node that leaves can wait for their closes.
    drivers: TaskTracker,
}

/// Why a connection to a peer was not made (or not kept).
#[derive(Clone, Debug, thiserror::Error)]
pub enum ConnectError {
    /// The TCP connection or the handshake failed.
    #[error(transparent)]
    Net(#[from] crate::net::DialError),
    /// An accepted handshake failed.
    #[error("handshake failed: {0}")]
    Handshake(crate::net::Refusal),
    /// This node refused the peer during the handshake.
    #[error("this node refused {peer}: {reason}")]
    Refused {
        /// The peer.
        peer: NodeId,
        /// Why.
        reason: membership::NameRefusal,
    },
    /// This node's own dial was given up for another handshake with the same peer, under way
    /// at the same time (its background dial, or the peer's dial), and that one failed.
    #[error("another handshake with {peer}, under way at the same time, failed: {error}")]
    Concurrent {
        /// The peer.
        peer: NodeId,
        /// Why the other handshake failed.
        error: Box<ConnectError>,
    },
    /// The handshake succeeded but the connection was not kept.
    #[error("the connection to {peer} was not kept: {reason}")]
    NotKept {
        /// The peer.
        peer: NodeId,
        /// Why.
        reason: membership::LinkRejection,
    },
}

impl Cluster {
    fn new(
        node: NodeId,
        config: ClusterConfig,
        router: Arc<Router>,
        local_addr: Option<SocketAddr>,
    ) -> Cluster {
        let cookie = config.cookie.clone().unwrap_or_else(|| "".into());
        let mut net = NetConfig::new(node.clone(), cookie);
        net.heartbeat = config.heartbeat;
        // Checked when the node started; a refused setting never gets here.
        net.heartbeat.lease = config.leases().ok().map(|l| l.lease);
        net.connect_timeout = config.connect_timeout;
        net.handshake_timeout = config.handshake_timeout;
        net.max_frame = config.max_frame;
        net.outgoing_capacity = remote::OUTGOING_CAPACITY;
        net.tls = config.tls.clone();
        Cluster {
            state: Mutex::new(State {
                membership: Membership::new(node.clone()),
                links: BTreeMap::new(),
                subscribers: Vec::new(),
                down_waiters: HashMap::new(),
                addr_names: HashMap::new(),
                dialers: BTreeSet::new(),
                last_failure: HashMap::new(),
                failures_seen: 0,
            }),
            node,
            net,
            config,
            router,
            local_addr,
            changed: Notify::new(),
            refusals: tokio::sync::watch::Sender::new(HandshakeRefusals::default()),
            drivers: TaskTracker::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// A subscription to node events (see [`NodeEvents`]).
    pub fn subscribe(&self) -> NodeEvents {
        let (tx, rx) = mpsc::unbounded();
        let mut state = self.state();
        for (peer, _) in state.membership.links() {
            let _ = tx.unbounded_send(NodeEvent::Up(peer.clone()));
        }
        state.subscribers.push(tx);
        NodeEvents { rx }
    }

    /// The registered links, by peer name.
    pub fn links(&self) -> Vec<LinkInfo> {
        let state = self.state();
        let mut links: Vec<LinkInfo> = state.links.values().map(|e| e.info.clone()).collect();
        links.sort_by(|a, b| a.peer.cmp(&b.peer));
        links
    }

    /// The failed handshakes so far, by cause; the receiver sees every later change.
    pub fn refusals(&self) -> tokio::sync::watch::Receiver<HandshakeRefusals> {
        self.refusals.subscribe()
    }

    /// Node thread: keeps `peer` apart, closes its connection and waits until its down has
    /// been handled. Returns whether it was connected.
    pub async fn disconnect(self: Arc<Self>, peer: NodeId) -> bool {
        let waiter = {
            let mut state = self.state();
            let Some(link) = state.membership.disconnect(&peer) else {
                tracing::info!(node = %self.node, %peer, "peer kept apart (it was not connected)");
                return false;
            };
            let (tx, rx) = oneshot::channel();
            state.down_waiters.entry(link).or_default().push(tx);
            if let Some(entry) = state.links.get(&link) {
                entry.remote.close();
            }
            rx
        };
        tracing::info!(node = %self.node, %peer, "disconnecting a peer and keeping it apart");
        // Bounded: the connection writes what is queued within its heartbeat timeout, then
        // ends; the sender is dropped with the node at the latest.
        let _ = waiter.await;
        true
    }

    /// Node thread: the node is shutting down cleanly. Every lease ends (no local agent may say
    /// it holds a lock on a peer from here on), every peer is told that this node's agents hold
    /// nothing (a `RemoveAgent` for each), and every connection is closed once what is queued
    /// is written, the peers kept apart. A peer reads the releases before the connection's
    /// end, so it releases those locks at once, with no lock-delay: their holders are gone,
    /// not cut off. Then it waits for the connections' lingering closes (`net::link`: a socket
    /// closed before the peer's last frames are read resets the connection, and a peer whose
    /// write then fails must still read the releases). Bounded: each connection ends within
    /// twice its heartbeat timeout (writing what is queued, then lingering).
    pub async fn leave(self: Arc<Self>) {
        self.router.expire_leases();
        let agents = self.router.agent_ids();
        let peers = self.router.remote_nodes();
        tracing::info!(node = %self.node, agents = agents.len(), peers = peers.len(), "leaving the cluster: releasing this node's agents' locks on its peers");
        for peer in &peers {
            for agent in &agents {
                let request = locks_core::proto::ServerRequest::RemoveAgent {
                    agent: agent.clone(),
                };
                if let Err(err) = self.router.send_server(peer, request) {
                    tracing::debug!(node = %self.node, %peer, %err, "release not sent");
                }
            }
        }
        let closing = peers.into_iter().map(|peer| self.clone().disconnect(peer));
        futures::future::join_all(closing).await;
        self.drivers.close();
        let linger = self.config.heartbeat.timeout.saturating_mul(2);
        if tokio::time::timeout(linger, self.drivers.wait())
            .await
            .is_err()
        {
            tracing::debug!(node = %self.node, "a connection did not close in time; leaving anyway");
        }
    }

    /// The node is stopping: subscriptions end.
    pub(crate) fn stopped(&self) {
        self.state().subscribers.clear();
    }

    /// Node thread: lets `peer` connect again; dialers of its addresses dial at once.
    pub fn reconnect(&self, peer: &NodeId) {
        if self.state().membership.reconnect(peer) {
            tracing::info!(node = %self.node, %peer, "peer no longer kept apart");
        }
        self.changed.notify_waiters();
    }
}
