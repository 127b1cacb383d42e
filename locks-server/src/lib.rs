//! `locks-server`: the node-local half of the lock manager.
//!
//! It owns the lock table (pure, synchronous: [`table`]), the [`LockServer`] actor that wraps
//! it, the [`Router`] that carries messages between agents and lock servers, local or remote,
//! the [`Node`] a program starts, and the node-to-node transport ([`net`]: framing, handshake,
//! heartbeats and TCP connections).
//!
//! ```text
//!   Transaction ─▶ agent actor ─┐ ServerRequest              ┌─▶ LockServer ─▶ LockTable
//!                               └────────────▶ Router ───────┤        │ notices
//!   agent actor ◀── Deliver(AgentMessage) ◀──  Router ◀──────┴────────┘
//!                                               └──▶ RemoteLink (other nodes)
//! ```

pub mod error;
pub mod net;
pub mod node;
pub mod router;
pub mod server;
pub mod table;

pub use error::Error;
pub use node::{Node, NodeConfig};
pub use router::{Deliver, RemoteLink, RouteError, Router, ToServer};
pub use server::{LockServer, Snapshot};
pub use table::{LockTable, TableSnapshot};
