//! `locks-agent`: transactions and distributed deadlock resolution for the `locks` workspace.
//!
//! A transaction is served by one agent. The agent sends lock requests to the lock servers of
//! the nodes it names, learns from their notices how the queues stand, and, with the other
//! agents, finds and breaks deadlocks (Wiger/Arts, `reference/erlang-locks.md` section 5):
//!
//! ```text
//!   client ──lock/unlock/convert/await──▶ agent ──ServerRequest──▶ lock server (per node)
//!                                           ▲ ◀──Notice/Rejected───┘
//!                                           └──Forward/Surrendered──▶ other agents
//! ```
//!
//! This crate part holds the pure half: [`core::AgentCore`] is the agent as a synchronous state
//! machine (requests and multi-node claims, versioned knowledge of lock copies, the petgraph
//! wait-for graph with cycle detection and the victim's choice, forwarding), and [`options`]
//! the transaction's options and the multi-node requirements. The agent actor wraps the core.

#![forbid(unsafe_code)]

pub mod core;
pub mod options;

pub use crate::core::{
    AgentCore, Deadlock, Effect, GrantedLock, LockResult, RequestError, TransactionStatus,
};
pub use crate::options::{Options, Req};
