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
    /// A blocking call was made on the node's own thread, which must do the work it would wait
    /// for (it would never return): use the async method there.
    #[error(
        "{call} would block the node's own thread, which must answer it; use the async method there"
    )]
    OnNodeThread {
        /// The call.
        call: &'static str,
    },
    /// [`Node::wait_for_nodes`](crate::Node::wait_for_nodes) gave up: these nodes were not
    /// connected in time.
    #[error("nodes not connected in time: {}", show_nodes(missing))]
    NodesNotUp {
        /// The nodes still missing.
        missing: Vec<locks_core::NodeId>,
    },
    /// The data directory could not be read or written (see [`crate::data_dir`]).
    #[error(transparent)]
    DataDir(#[from] crate::data_dir::DataDirError),
}

/// `a, b, c`.
fn show_nodes(nodes: &[locks_core::NodeId]) -> String {
    nodes
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
