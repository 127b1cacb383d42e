//! `locks-server`: filled in by a later issue.

/// The node-to-node transport: framing, handshake, heartbeats and TCP connections.
pub mod net;
