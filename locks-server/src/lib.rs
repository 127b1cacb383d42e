//! `locks-server`: the node-local half of the lock manager.
//!
//! It owns the lock table (pure, synchronous: [`table`]), the [`LockServer`] actor that wraps
//! it, the [`Router`] that carries messages between agents and lock servers, local or remote,
//! the [`Node`] a program starts and its configuration ([`config`]), the node-to-node transport
//! ([`net`]: framing, handshake, heartbeats and TCP connections) and the cluster layer on top
//! of it ([`cluster`]: which connections a node keeps, and what a node going down or up does),
//! the leases and lock-delay that keep a cut-off holder from believing in a lock somebody else
//! was given ([`lease`]), and the rate limit of the warnings strangers can cause ([`log_limit`]).
//!
//! ```text
//!   Transaction ─▶ agent actor ─┐ ServerRequest              ┌─▶ LockServer ─▶ LockTable
//!                               └────────────▶ Router ───────┤        │ notices
//!   agent actor ◀── Deliver(AgentMessage) ◀──  Router ◀──────┴────────┘
//!          ▲ NodeUp/NodeDown                  │    ▲ deliver_from
//!          └────────────── cluster ───────────┴────┴── ClusterLink ═══ TCP ═══ other nodes
//! ```

pub mod cluster;
pub mod config;
pub mod error;
pub mod lease;
pub mod local;
pub mod log_limit;
pub mod net;
pub mod node;
pub mod router;
pub mod server;
pub mod table;

pub use config::{ClusterConfig, ConfigError, NodeConfig};
pub use error::Error;
pub use lease::{LeaseConfig, Leases};
pub use local::{FastLock, LocalTable};
pub use node::Node;
pub use router::{Deliver, DownCause, MemberDelivery, RemoteLink, RouteError, Router, ToServer};
pub use server::{LockServer, Snapshot, Watchers};
pub use table::{LockTable, TableEffect, TableInput, TableSnapshot, Undelivered};
