//! The seam between the crates of this workspace: what `locks-agent` and `locks-leader` (and
//! the workspace's own tests, benches and tools) need of `locks-server` beyond its public
//! surface — the [`Router`] and the actor messages it carries, a [`Node`](crate::Node)'s
//! router, thread and agent ids ([`NodeInternals`]), the node-to-node transport ([`net`]) and
//! the cluster's link ([`cluster`]).
//!
//! It carries no stability promise: anything here may change with any release, in step with
//! the crates of this workspace. Programs use the names at the crate's root.

pub use crate::lease::{Expired, LeaseCell};
pub use crate::local::{
    After, Delivery, FastLock, LocalTable, MAX_SHARDS, SHARDS, ShardAccess, Sharding, Touched,
};
pub use crate::log_limit::{LogLimiter, Verdict, WARN_INTERVAL};
pub use crate::node::NodeInternals;
pub use crate::router::{
    Deliver, DownCause, MemberDelivery, Presence, RemoteLink, Router, ToServer,
};
pub use crate::server::{LockServer, Snapshot, Watchers};
pub use crate::table::{
    DEFAULT_MAX_DEPTH, Effects, LockTable, TableEffect, TableInput, Undelivered,
};

/// Test-only settings of a [`LockTable`].
pub trait TableInternals {
    /// Sets how many entries a lock needs before it keeps an index (tests use 0 to run every
    /// lock on the indexed path). Behaviour and output do not depend on it.
    fn with_index_threshold(self, threshold: usize) -> Self;
}

impl TableInternals for LockTable {
    fn with_index_threshold(self, threshold: usize) -> Self {
        LockTable::with_index_threshold(self, threshold)
    }
}

/// The node-to-node transport: framing, handshake, heartbeats and TCP connections.
pub mod net {
    pub use crate::net::*;
}

/// The cluster layer's pieces the tests drive directly.
pub mod cluster {
    pub use crate::cluster::remote::ClusterLink;
}
