//! `locks-core`: the vocabulary every other crate of the `locks` workspace shares.
//!
//! It owns:
//! - [`Mode`] and [`ModeTable`]: the six lock modes of StickyLocking with the compatibility and
//!   group-mode matrices, and installable custom tables;
//! - [`LockId`]: hierarchical lock names (a non-empty path of [`Key`]s);
//! - [`NodeId`], [`AgentId`] and [`MemberId`]: who is who, with the total order the deadlock
//!   algorithm needs;
//! - [`proto`]: the messages between agents and lock servers, and [`codec`] for the wire;
//! - [`escape`]: text from elsewhere (lock keys, a peer's reasons) made safe to show in a log
//!   or on a terminal;
//! - [`fence`]: a resource's check that refuses writes from holders whose grant is stale;
//! - [`waits`]: who waits for whom in one lock queue (the edges of the wait-for graph);
//! - [`LockWord`] and [`RwuLock`]: Chronicle Map's 64-bit read/update/write lock word and a
//!   safe lock built on it, for in-process (and shared-memory) locking without any actor.
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
//! At the root: [`Mode`], [`ModeTable`], [`LockId`], [`Key`], [`NodeId`], [`AgentId`],
//! [`MemberId`], [`LockWord`], [`LockWordRef`], [`WordState`], [`RwuLock`] and its guards, and
//! the errors of each ([`LockIdError`], [`NodeNameError`], [`ModeTableError`],
//! [`LockWordError`]); the modules [`proto`], [`codec`], [`fence`] and [`waits`] for the wire
//! messages, their encoding, fencing and the wait-for edges, and [`lock_word`] for the lock
//! word's procedures. This crate has no internal seam: what the other crates of the workspace
//! use of it is its public surface.

#![deny(unsafe_code)]

pub mod codec;
pub mod escape;
pub mod fence;
pub mod id;
pub mod ident;
pub mod lock_word;
pub mod mode;
pub mod proto;
#[allow(unsafe_code)] // the one module that needs it: `UnsafeCell` behind the guards
pub mod rwu;
mod sync;
pub mod waits;

pub use id::{Key, LockId, LockIdError};
pub use ident::{AgentId, MemberId, NodeId, NodeNameError};
pub use lock_word::{LockWord, LockWordError, LockWordRef, WordState};
pub use mode::{Mode, ModeTable, ModeTableError};
pub use rwu::{ReadGuard, RwuLock, UpdateGuard, WriteGuard};
