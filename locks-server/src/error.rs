//! The error type of `locks-server`.

use crate::cluster::ConnectError;
use crate::config::ConfigError;
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
    /// The configuration is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// The node is local-only (it has no cookie), so it cannot connect to peers.
    #[error("this node is not part of a cluster (configure a cookie)")]
    NotClustered,
    /// A connection to a peer failed.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A message could not be routed.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// The data directory could not be read or written (see [`crate::data_dir`]).
    #[error(transparent)]
    DataDir(#[from] crate::data_dir::DataDirError),
}
