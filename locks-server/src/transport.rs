//! The node-to-node transport, as a public API for tools and tests that speak it: framing,
//! the handshake, heartbeats and TCP connections ([`net`]), and the cluster's link
//! ([`ClusterLink`]). A connection made with these is a peer like any other: the node it dials
//! authenticates it (the cluster cookie, mutual TLS when configured) and checks everything it
//! says against its sender before anything acts on it.

/// Framing, handshake, heartbeats and TCP connections between nodes.
pub mod net {
    pub use crate::net::*;
}

pub use crate::cluster::remote::ClusterLink;
