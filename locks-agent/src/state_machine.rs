//! The pure agent state machine, as a public API: an [`AgentCore`] takes a transaction's
//! inputs (its requests, the notices of lock servers, other agents' views and probes, node
//! events, client calls) and returns [`AgentEffect`]s for a shell to carry out, in order. It
//! sends nothing, sleeps never and reads no clock, so a transaction can be stepped by hand,
//! simulated on a seeded network or checked by a model checker, as this crate's simulations
//! do; `locks-leader` runs its election agent on one.
//!
//! Also here: the client's request records ([`LockRequest`]), the agent's versioned copies of
//! lock queues ([`Knowledge`]), the wait-for graph deadlock detection runs on ([`ViewGraph`],
//! its [`Cycle`]s and [`WaitLabel`]s), the victim order ([`victim_order`], [`lock_given_up`]),
//! and the one executor of a core's effects on a live node ([`execute`], [`end`]).
//!
//! What an executor can reach of a node is the port of one agent
//! (`locks_server::embed::AgentPort`): [`execute`] sends a core's requests and messages
//! through it, so a core, whatever id it was made with, cannot deliver as a peer, drop a
//! node's locks, take over another transaction's mailbox, or send a lock server or another
//! agent a message in the name of an agent other than the port's (refused as
//! `RouteError::NotThisAgent`; `locks_server::embed` has the compile-fail tests).
//!
//! ```
//! use locks_agent::Options;
//! use locks_agent::state_machine::{AgentCore, AgentEffect};
//! use locks_core::proto::ServerRequest;
//! use locks_core::{AgentId, Mode, ModeTable, NodeId, lock_id};
//! use locks_agent::Req;
//!
//! let n1 = NodeId::new("n1").unwrap();
//! let me = AgentId::new(n1.clone(), 1, 1);
//! let mut core = AgentCore::new(me, ModeTable::standard(), Options::default());
//! let effects = core.request(lock_id!["a"], Mode::X, &[n1.clone()], Req::All).unwrap();
//! // The request goes to n1's lock server; nothing is held until its notice comes back.
//! assert!(effects.iter().any(|e| matches!(
//!     e,
//!     AgentEffect::ToServer { node, request: ServerRequest::Lock { .. } } if *node == n1
//! )));
//! ```

pub use crate::core::agent::{AgentCore, AgentEffect, Lease};
pub use crate::core::graph::{Cycle, ViewGraph, WaitLabel};
pub use crate::core::knowledge::Knowledge;
pub use crate::core::requests::LockRequest;
pub use crate::core::victim::{lock_given_up, victim_order};
pub use crate::core::{Answer, CallFailure, CallId};
/// The one executor of [`AgentCore`] effects, used by the agent actor and by the leader's
/// member actor, which embeds a core.
pub use crate::executor::{Executed, end, execute};
