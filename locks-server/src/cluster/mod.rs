//! The cluster: a node's connections to the other nodes, and what their coming and going does.
//!
//! ```text
//!   listener ─accept─▶ handshake ─┐                        ┌─▶ Router::add_remote(ClusterLink)
//!   dialer (per peer address) ────┴─▶ Membership (pure) ───┤   pump: incoming ─▶ Router
//!     ▲ redials with backoff            one link per peer  │   Up: agents, subscribers
//!     └──── link down ◀── pump ends ◀── connection ends ───┴─▶ Down: Router::remove_remote,
//!                                                               LockServer NodeDown, agents,
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
//!   handshake with a connected peer, and makes simultaneous dials keep the connection dialed by
//!   the smaller name.
//! - **Node down.** When a peer's connection ends (closed by either side, heartbeat timeout,
//!   lease expired, malformed frame, I/O error), after every envelope it delivered has been
//!   handed on: the router forgets the peer and its lease (sends to it fail at once with
//!   [`RouteError::NodeDown`]), the local lock server hands every lock and watch of the agents
//!   living on that node to ghosts and releases them after the lock-delay
//!   ([`crate::server::NodeDown`], [`crate::lease`]), every local agent is told, with the cause
//!   ([`Router::broadcast_node_event`]), and subscribers get [`NodeEvent::Down`]. The peer sees
//!   its side of the same connection end and does the same.
//! - **Node up.** A registered connection is added to the router, then every local agent and
//!   subscriber is told ([`NodeEvent::Up`]).
//! - **Kept apart.** [`Node::disconnect`](crate::Node::disconnect) closes the connection and
//!   refuses every handshake with that peer, dialed or accepted, until
//!   [`Node::reconnect`](crate::Node::reconnect) (or [`Node::connect`](crate::Node::connect)).
//! - **Redial.** Every address given as a peer (in the configuration or to `connect`) has a
//!   dialer: while the node behind it is not connected and not kept apart, it dials, waiting
//!   `reconnect_min` after a failure, doubling up to `reconnect_max`.
//! - **Unknown agents.** A message from a peer to an agent that does not run here (it ended, or
//!   belongs to an earlier incarnation of this node) is answered with a `RemoveAgent` to the
//!   peer's lock server, so that a dead agent's locks there cannot leak
//!   ([`Router::deliver_from`]).
//!
//! [`RouteError::NodeDown`]: crate::router::RouteError::NodeDown

pub mod backoff;
pub mod membership;
pub mod remote;
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
}

/// Why a connection to a peer was not made (or not kept).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The TCP connection or the handshake failed.
    #[error(transparent)]
    Net(#[from] crate::net::ConnectError),
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
    /// The handshake succeeded but the connection was not kept.
    #[error("the connection to {peer} was not kept: {reason}")]
    NotKept {
        /// The peer.
        peer: NodeId,
        /// Why.
        reason: membership::Rejection,
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
        Cluster {
            state: Mutex::new(State {
                membership: Membership::new(node.clone()),
                links: BTreeMap::new(),
                subscribers: Vec::new(),
                down_waiters: HashMap::new(),
                addr_names: HashMap::new(),
                dialers: BTreeSet::new(),
            }),
            node,
            net,
            config,
            router,
            local_addr,
            changed: Notify::new(),
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

    /// Whether `peer` is kept apart.
    pub fn is_apart(&self, peer: &NodeId) -> bool {
        self.state().membership.is_apart(peer)
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
