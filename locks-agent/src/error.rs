//! The error type of `locks-agent`.

use crate::core::{CallFailure, RequestError};
use locks_core::{LockId, NodeId};
use std::sync::Arc;

/// Why a transaction call failed. Errors are `Clone` so that one outcome can answer every
/// caller that was waiting.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The transaction was started with `abort_on_deadlock`, was chosen to break a deadlock,
    /// and had already been told it held `lock`: it aborted and released all its locks.
    #[error("aborted to resolve a deadlock on {lock} at node {node}")]
    Deadlock {
        /// The lock it would have had to surrender.
        lock: LockId,
        /// The node of that lock.
        node: NodeId,
    },
    /// Some requests can no longer be met because nodes they need are down (or refused them).
    #[error("cannot serve the requests on {locks:?}: nodes {nodes:?} are down or refused them")]
    CannotServe {
        /// The locks whose requests cannot be met.
        locks: Vec<LockId>,
        /// The nodes that cannot grant them.
        nodes: Vec<NodeId>,
    },
    /// The request was refused by the agent (see the inner error).
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The request this call waited for was withdrawn with `unlock`.
    #[error("the request on {lock} was withdrawn")]
    Cancelled {
        /// The lock.
        lock: LockId,
    },
    /// The transaction has ended (by `end`, by dropping its handle, or with its node).
    #[error("the transaction has ended")]
    Ended,
    /// The node refused or failed the call (for example: it has stopped). Shared, so that
    /// the error stays `Clone`.
    #[error("node error: {0}")]
    Node(Arc<locks_server::Error>),
}

impl From<locks_server::Error> for Error {
    fn from(e: locks_server::Error) -> Self {
        Error::Node(Arc::new(e))
    }
}

impl From<CallFailure> for Error {
    fn from(f: CallFailure) -> Self {
        match f {
            CallFailure::CannotServe { locks, nodes } => Error::CannotServe { locks, nodes },
            CallFailure::Cancelled { lock } => Error::Cancelled { lock },
            CallFailure::Deadlock { lock, node } => Error::Deadlock { lock, node },
            CallFailure::Ended => Error::Ended,
        }
    }
}
