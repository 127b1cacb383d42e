//! The messages the [`Router`](crate::router::Router) carries to local actors and the errors
//! of routing: what agents, group members and the lock server receive, and what a connection
//! to another node must offer. A leaf of the crate's imports: the router and the modules it
//! holds (introspection) both name these, and this names neither.

use actix::prelude::*;
use locks_core::proto::{AgentMessage, Envelope, ServerRequest};
use locks_core::{AgentId, MemberId, NodeId};

/// An actix message to an agent actor: a message from a server or agent, or news of a node.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub enum Deliver {
    /// A message from a lock server or another agent.
    Message(AgentMessage),
    /// The lock server of this node can no longer be reached, and why.
    NodeDown(NodeId, DownCause),
    /// The lock server of this node is reachable again (or for the first time).
    NodeUp(NodeId),
}

/// Why a node's lock server can no longer be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DownCause {
    /// The connection ended (closed, broken, or the peer fell silent).
    Disconnected,
    /// The link's lease ran out: no ping was answered within the lease (see
    /// [`crate::lease`]). The peer may still be running, and will give this node's agents'
    /// locks away once its lock-delay has passed.
    LeaseExpired,
}

impl std::fmt::Display for DownCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DownCause::Disconnected => "node-down",
            DownCause::LeaseExpired => "lease-expired",
        })
    }
}

/// An actix message to a member of a leader-election group: an encoded message from another
/// member (see `locks_core::proto::Message::Member`).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct MemberDelivery {
    /// The sender.
    pub from: MemberId,
    /// The encoded message.
    pub payload: Vec<u8>,
}

/// The link to a peer node ended: the lock server's core decides what becomes of the locks
/// and watches of the agents that live on it (`crate::node_core`). Crate-private: only the
/// cluster layer, which saw the link end, may say so (through
/// [`Router::server_link_down`](crate::router::Router::server_link_down)).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct LinkDown(pub NodeId);

/// An actix message that hands a [`ServerRequest`] to the local lock server.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ToServer(pub ServerRequest);

/// Why a message could not be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The destination node is not connected (down, never seen, or kept apart).
    #[error("node {0} is not connected")]
    NotConnected(NodeId),
    /// No agent with this id lives on this node (it ended or never existed).
    #[error("agent {0} is not running on this node")]
    UnknownAgent(AgentId),
    /// The local lock server has stopped (the node is shutting down).
    #[error("the lock server of this node has stopped")]
    ServerStopped,
    /// No group member with this id lives on this node (it stopped or never existed).
    #[error("member {0} is not running on this node")]
    UnknownMember(MemberId),
    /// The message cannot be sent to that node (it does not fit in a frame, or cannot be
    /// encoded). Only this message is refused: the connection stays up.
    #[error("a message to node {node} cannot be sent: {reason}")]
    Unsendable {
        /// The destination node.
        node: NodeId,
        /// Why.
        reason: String,
    },
    /// A peer sent a message that it may not send (it spoke for an agent, member or lock
    /// server of another node, or carried a version no node can have issued): refused and
    /// dropped (see `node_core/peer_check.rs`).
    #[error("a message from node {from} refused: {fault}")]
    Refused {
        /// The peer that sent it.
        from: NodeId,
        /// What was wrong with it.
        fault: crate::node_core::peer_check::PeerFault,
    },
    /// A request or message was handed to the port of one agent ([`crate::router::AgentPort`]) in
    /// the name of another: refused and not sent (an agent's port speaks for that agent only).
    #[error("a message naming agent {named} refused: this port sends for agent {port} only")]
    NotThisAgent {
        /// The agent the port speaks for.
        port: AgentId,
        /// The agent the request named.
        named: AgentId,
    },
    /// A message handed to the port of one agent ([`crate::router::AgentPort`]) to send to another
    /// agent names no agent as its sender (only a lock server sends it, or it is a probe that
    /// is not a cycle): refused and not sent.
    #[error(
        "a message to agent {to} refused: it names no sending agent, and this port sends for agent {port} only"
    )]
    NoAgentSender {
        /// The agent the port speaks for.
        port: AgentId,
        /// The agent the message was for.
        to: AgentId,
    },
}

/// A connection to another node, as the router sees it: somewhere to put envelopes.
pub trait RemoteLink: Send + Sync {
    /// Queues an envelope for the peer. Fails if the connection is gone.
    fn send(&self, envelope: Envelope) -> Result<(), RouteError>;
}
