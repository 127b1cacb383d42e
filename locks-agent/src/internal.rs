//! The seam between the crates of this workspace: what `locks-leader` (and the workspace's own
//! tests, simulations and benches) need of `locks-agent` beyond its public surface — the pure
//! agent state machine [`AgentCore`] with its [`AgentEffect`]s (the leader runs its election agent
//! on it), the client's [`LockRequest`] records, and the [`ViewGraph`] deadlock detection
//! runs on.
//!
//! **Internal seam, not covered by semver**: anything here may change with any release, in step
//! with the crates of this workspace. Programs use the names at the crate's root.
//!
//! What it can reach of a node is what `locks_server::internal::AgentPort` offers, the port of
//! one agent of the node: [`execute`] sends a core's requests and messages through it, so a
//! core, whatever id it was made with, cannot deliver as a peer, drop a node's locks, take over
//! another transaction's mailbox, or send a lock server or another agent a message in the name
//! of an agent other than the port's (refused as `RouteError::NotThisAgent`; see
//! `locks_server::internal` for the seal and its compile-fail tests).

pub use crate::core::agent::{AgentCore, AgentEffect, Lease};
pub use crate::core::graph::{Cycle, ViewGraph, WaitLabel};
pub use crate::core::knowledge::Knowledge;
pub use crate::core::requests::LockRequest;
pub use crate::core::victim::{lock_given_up, victim_order};
pub use crate::core::{Answer, CallFailure, CallId};
/// The one executor of [`AgentCore`] effects, used by the agent actor and by the leader's
/// member actor, which embeds a core.
pub use crate::executor::{Executed, end, execute};
