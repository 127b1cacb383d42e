//! The error type of `locks-server`.

use crate::router::RouteError;
use locks_core::NodeNameError;

/// Everything that can go wrong when running a node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configured node name is not valid.
    #[error("invalid node name: {0}")]
    InvalidName(#[from] NodeNameError),
    /// The node's thread could not be started.
    #[error("cannot start the node thread: {0}")]
    Start(std::io::Error),
    /// The node has been shut down (or its actors have stopped).
    #[error("the node has stopped")]
    Stopped,
    /// A message could not be routed.
    #[error(transparent)]
    Route(#[from] RouteError),
}
