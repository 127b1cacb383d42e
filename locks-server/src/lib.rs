//! `locks-server`: the node-local half of the lock manager.
//!
//! It owns the lock table (pure, synchronous: [`state_machine::LockTable`]), the lock server
//! actor that wraps it, the router that carries messages between agents and lock servers, local or remote, the
//! [`Node`] a program starts and its configuration ([`NodeConfig`]), the node-to-node
//! transport (framing, handshake, heartbeats and TCP connections) and the cluster layer on top
//! of it (which connections a node keeps, and what a node going down or up does), the leases
//! and lock-delay that keep a cut-off holder from believing in a lock somebody else was given
//! ([`lease`]), the rate limit of the warnings strangers can cause, and cluster introspection
//! (every connected node's table and the cluster's wait-for graph, [`introspect`]).
//!
//! ```text
//!   Transaction (fast path) ───────────────────────────────────┐ LocalTable ─▶ LockTable::step
//!   Transaction ─▶ agent actor ─┐ ServerRequest              ┌─▶ LockServer ─┘     │ notices
//!                               └────────────▶ Router ───────┤                     │
//!   agent actor ◀── Deliver(AgentMessage) ◀──  Router ◀──────┴─────────────────────┘
//!          ▲ NodeUp/NodeDown                  │    ▲ deliver_from
//!          └────────────── cluster ───────────┴────┴── ClusterLink ═══ TCP ═══ other nodes
//! ```
//!
//! The node's lock table is in shards by root key, each behind its own mutex (`LocalTable`),
//! shared by the lock server actor (requests that come as messages, node down, timers) and the
//! transactions of this node, which take and release uncontended locks on their own thread
//! (transactions on disjoint hierarchies on different threads share no mutex); both apply
//! inputs with
//! [`LockTable::step`](state_machine::LockTable::step) ([`TableInput`](state_machine::TableInput) in,
//! [`TableEffect`](state_machine::TableEffect) out), the fast path with its quiet form
//! ([`LockTable::step_quiet`](state_machine::LockTable::step_quiet)), which builds nothing for the
//! requester.
//!
//! What the node decides around its table (the start-delay, a node down and its lock-delay,
//! which requests of disconnected nodes' agents are ignored, what a peer may say) is one pure
//! state machine, `NodeCore` (`node_core/`), which the lock server actor runs.
//!
//! # Public surface
//!
//! At the root: [`Node`] and its setup ([`NodeConfig`], [`ClusterConfig`], [`PeerQuotas`],
//! [`LeaseConfig`], [`Leases`], [`HeartbeatConfig`], [`Cookie`], [`TlsConfig`], [`DataDir`]);
//! what a node
//! reports ([`NodeEvent`], [`NodeEvents`], [`LinkInfo`], [`HandshakeRefusals`],
//! [`TableSnapshot`], [`LockSnapshot`], [`EntrySnapshot`]) and what the cluster reports
//! ([`ClusterQuery`], [`ClusterView`], [`WaitForGraph`], [`WaitEdge`], with their bounds in the
//! [`introspect`] module); the errors and what they carry ([`Error`], [`ConfigError`],
//! [`ConnectError`], [`DialError`], [`Refusal`], [`RefusalCode`], [`NameRefusal`],
//! [`LinkRejection`], [`RouteError`], [`LeaseError`], [`PeerFault`], ...); the [`lease`]
//! module, whose docs are the argument for the leases and lock-delay; the [`tls`] module; and
//! the [`metrics`] module, what a node records through the `metrics` facade (install a
//! recorder before starting nodes).
//!
//! The layers, each a module of its own: [`state_machine`], the pure state machines (the lock
//! table, the node core, the shards) that anyone can build and step; [`embed`], what runs
//! them on a live node for shells of one's own (the agent and member actors of `locks-agent`
//! and `locks-leader`: a node's port, the port of one agent, the table in shards), which lets
//! no caller act as a peer or reach the node's router (its compile-fail tests); and
//! [`transport`], the node-to-node connections. Everything else is private to the crate.

// Every type a public item mentions is nameable from the root or from `state_machine`, `embed` or `transport`.
#![warn(unnameable_types)]

mod agent_ids;
mod cluster;
mod config;
pub mod data_dir;
pub mod embed;
mod error;
pub mod introspect;
pub mod lease;
mod local;
mod log_limit;
pub mod metrics;
mod net;
mod node;
mod node_core;
mod route;
mod router;
mod server;
pub mod state_machine;
mod table;
pub mod transport;

pub use cluster::membership::{LinkRejection, NameRefusal};
pub use cluster::{ConnectError, HandshakeRefusals, LinkInfo, NodeEvent, NodeEvents};
pub use config::{ClusterConfig, ConfigError, NodeConfig};
pub use data_dir::{DataDir, DataDirError};
pub use error::Error;
pub use introspect::{ClusterQuery, ClusterView, WaitEdge, WaitForGraph};
pub use lease::{LeaseConfig, LeaseError, Leases};
pub use net::tls;
pub use net::{Cookie, DialError, HeartbeatConfig, IoFailure, Malformed, Refusal, RefusalCode};
pub use net::{TlsConfig, TlsConfigError, TlsFailure};
pub use node::Node;
pub use node_core::peer_check::{MAX_CLOCK_AHEAD, PeerFault};
pub use node_core::quota::PeerQuotas;
pub use router::RouteError;
pub use table::{EntrySnapshot, LockSnapshot, TableSnapshot};
