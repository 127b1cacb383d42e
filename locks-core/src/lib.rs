//! `locks-core`: the vocabulary every other crate of the `locks` workspace shares.
//!
//! It owns:
//! - [`Mode`] and [`ModeTable`]: the six lock modes of StickyLocking with the compatibility and
//!   group-mode matrices, and installable custom tables;
//! - [`LockId`]: hierarchical lock names (a non-empty path of [`Key`]s), and when a lock of the
//!   hierarchy is held ([`held_in_hierarchy`]);
//! - [`NodeId`], [`AgentId`] and [`MemberId`]: who is who, with the total order the deadlock
//!   algorithm needs;
//! - [`fence`]: a resource's check that refuses writes from holders whose grant is stale;
//! - [`LossCause`]: the one list of reasons a lock a client was told it holds is lost (the
//!   agent's reports, the metrics' `cause` series, the gRPC API's values follow it);
//! - [`lock_word`] and [`RwuLock`]: Chronicle Map's 64-bit read/update/write lock word and a
//!   safe lock built on it, for in-process (and shared-memory) locking without any actor;
//! - [`proto`]: the messages between agents, lock servers and nodes, and [`codec`], their
//!   encoding; [`waits`]: who waits for whom in one lock queue; [`escape`]: text from
//!   elsewhere (lock keys, a peer's reasons) made safe to show in a log or on a terminal.
//!   Plain data and pure functions: none of them grants any capability over a running node.
//!
//! ```text
//!  client ──▶ Transaction ──▶ agent ──ServerRequest──▶ lock server (one per node)
//!                               ▲  ◀──AgentMessage────┘
//!                               └──Forward/Surrendered── other agents (deadlock detection)
//! ```
//!
//! It contains no actors, no runtime and no sockets.
//!
//! # Public surface
//!
//! At the root: [`Mode`] and [`ModeTable`], [`LockId`] (with [`Key`] and the [`lock_id!`]
//! macro), [`NodeId`], [`AgentId`] and [`MemberId`], the copy of a lock's queue a watch
//! reports ([`LockView`], [`QueueEntry`], [`Conversion`]), why a lock is lost ([`LossCause`]),
//! [`RwuLock`] and its guards, and the errors of each ([`LockIdError`], [`NodeNameError`], [`ModeTableError`]); the modules
//! [`fence`] (a resource's check of fencing versions) and [`lock_word`] (the lock word
//! [`RwuLock`] is built on, its state and procedures, for locks in shared memory).
//!
//! The protocol's modules: [`proto`] (the wire messages), [`codec`] (their encoding),
//! [`waits`] (the wait-for edges of a lock queue) and [`escape`] (text made safe for logs), for
//! the crates that run the protocol (the lock server, the agent, the simulations) and for
//! tools that read it.

#![deny(unsafe_code)]

pub mod codec;
pub mod escape;
pub mod fence;
mod hold;
mod id;
mod ident;
pub mod lock_word;
mod loss;
mod mode;
pub mod proto;
#[allow(unsafe_code)] // the one module that needs it: `UnsafeCell` behind the guards
mod rwu;
mod sync;
pub mod waits;
mod wire_ids;

pub use hold::held_in_hierarchy;
pub use id::{Key, LockId, LockIdError};
pub use ident::{AgentId, MAX_NODE_NAME, MemberId, NodeId, NodeNameError};
pub use loss::LossCause;
pub use mode::{Mode, ModeTable, ModeTableError};
pub use proto::{Conversion, LockView, QueueEntry};
pub use rwu::{ReadGuard, RwuLock, UpdateGuard, WriteGuard};
