#![warn(unnameable_types)]
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

mod cluster;
mod config;
mod error;
#[doc(hidden)]
pub mod internal;
pub mod lease;
mod log_limit;
mod net;
mod node;
mod router;
mod server;
mod table;

pub use cluster::membership::{LinkRejection, NameRefusal};
pub use cluster::{ConnectError, HandshakeRefusals, LinkInfo, NodeEvent, NodeEvents};
pub use config::{ClusterConfig, ConfigError, NodeConfig};
pub use error::Error;
pub use lease::{LeaseConfig, LeaseError, Leases};
pub use net::{Cookie, DialError, HeartbeatConfig, Refusal, RefusalCode};
pub use node::Node;
pub use router::RouteError;
pub use table::{
    DEFAULT_MAX_DEPTH, Effects, EntrySnapshot, LockSnapshot, LockTable, TableSnapshot,
};
