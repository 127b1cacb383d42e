//! Why the agent core refused a client's request, and why it did not surrender a lock.

use crate::options::Req;
use locks_core::{AgentId, LockId, Mode, NodeId};

/// A client call the agent core refused. Nothing was sent and nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The request names no nodes.
    #[error("a request on {lock} must name at least one node")]
    NoNodes {
        /// The lock.
        lock: LockId,
    },
    /// The lock server of `node` refused the request on `lock`: nothing was queued there. On
    /// the fast path the node's table answers the caller directly; otherwise the refusal
    /// reaches the agent, which answers the caller waiting on the transaction with it.
    #[error("node {node} refused the request on {lock}: {reason}")]
    Refused {
        /// The lock.
        lock: LockId,
        /// The node.
        node: NodeId,
        /// Why.
        reason: locks_core::proto::Rejection,
    },

    /// Nodes the request needs are already known to be down, so its requirement cannot be met
    /// (and the transaction does not wait for nodes).
    #[error(
        "cannot lock {lock} ({req}): nodes down or not connected: {}",
        comma_list(nodes)
    )]
    NodesDown {
        /// The lock.
        lock: LockId,
        /// The requirement.
        req: Req,
        /// The listed nodes that are down.
        nodes: Vec<NodeId>,
    },
    /// The mode is not in the transaction's mode table.
    #[error("mode {0} is not in the mode table")]
    ModeNotInTable(Mode),
    /// The lock is already requested with a requirement that neither implies nor is implied by
    /// the new one.
    #[error(
        "{lock} is already requested with requirement {existing}, which conflicts with {requested}"
    )]
    ConflictingRequirement {
        /// The lock.
        lock: LockId,
        /// The requirement of the existing request.
        existing: Req,
        /// The requirement asked for now.
        requested: Req,
    },
    /// There is no request on this lock.
    #[error("no request on {0}")]
    NoSuchRequest(LockId),
    /// A conversion asked for a mode that is not weaker than the one requested.
    #[error("cannot convert {lock} down from {held} to {requested}: not a weaker mode")]
    NotWeaker {
        /// The lock.
        lock: LockId,
        /// The mode of the request.
        held: Mode,
        /// The mode asked for.
        requested: Mode,
    },
    /// A lock could not be surrendered to another agent on a node (see
    /// [`crate::Transaction::surrender_nowait`]).
    #[error("cannot surrender {lock} on {node} to {to}: {why}")]
    CannotSurrender {
        /// The lock.
        lock: LockId,
        /// The agent it was to be surrendered to.
        to: AgentId,
        /// The node.
        node: NodeId,
        /// Why.
        why: SurrenderRefusal,
    },
    /// The transaction aborted on a deadlock; only `end` is accepted.
    #[error("the transaction aborted on a deadlock")]
    Aborted,
    /// The transaction has ended.
    #[error("the transaction has ended")]
    Ended,
}

/// Why a lock was not surrendered on a node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SurrenderRefusal {
    /// The transaction does not hold the lock there (it has no request on that node, waits for
    /// it, or the node is down).
    #[error("the transaction does not hold it there")]
    NotHeld,
    /// The agent named does not wait (or convert) on the lock there.
    #[error("that agent does not wait for it there")]
    NotWaiting,
    /// A surrender of this lock on this node is still waiting for the server's answer.
    #[error("a surrender of it there is already under way")]
    Pending,
    /// The node went down before its server answered.
    #[error("the node went down before it answered")]
    NodeDown,
}

/// `a, b, c`: the items' displays, comma-separated (the error messages' lists).
pub(crate) fn comma_list<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
