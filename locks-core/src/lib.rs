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
//! - [`lock_word`] and [`RwuLock`]: Chronicle Map's 64-bit read/update/write lock word and a
//!   safe lock built on it, for in-process (and shared-memory) locking without any actor;
//! - behind the [`internal`] seam: the messages between agents and lock servers
//!   ([`internal::proto`]) and their encoding ([`internal::codec`]), who waits for whom in one
//!   lock queue ([`internal::waits`]), and text from elsewhere (lock keys, a peer's reasons)
//!   made safe to show in a log or on a terminal ([`internal::escape`]).
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
//! reports ([`LockView`], [`QueueEntry`], [`Conversion`]), [`RwuLock`] and its guards, and the
//! errors of each ([`LockIdError`], [`NodeNameError`], [`ModeTableError`]); the modules
//! [`fence`] (a resource's check of fencing versions) and [`lock_word`] (the lock word
//! [`RwuLock`] is built on, its state and procedures, for locks in shared memory).
//!
//! **Internal seam**: [`internal`] holds what the other crates of this workspace share with
//! this one and a program does not use: the wire messages ([`internal::proto`]), their
//! encoding ([`internal::codec`]), the wait-for edges of a lock queue ([`internal::waits`]) and
//! the escaping of text for logs ([`internal::escape`]). It carries no stability promise.

#![deny(unsafe_code)]

// The wire, its encoding, the wait-for edges and escaping live at the root for the crates of
// this workspace; the documented path is `internal`.
#[doc(hidden)]
pub mod codec;
#[doc(hidden)]
pub mod escape;
pub mod fence;
mod hold;
mod id;
mod ident;
pub mod lock_word;
mod mode;
#[doc(hidden)]
pub mod proto;
#[allow(unsafe_code)] // the one module that needs it: `UnsafeCell` behind the guards
mod rwu;
mod sync;
#[doc(hidden)]
pub mod waits;

/// **Internal seam, not covered by semver**: what the other crates of this workspace share
/// with this one and a program does not use.
///
/// The wire messages between agents, lock servers and nodes ([`proto`]), their encoding
/// ([`codec`]), the wait-for edges of one lock queue ([`waits`]) and the escaping of text from
/// elsewhere for logs and terminals ([`escape`]). Anything here may change with any release,
/// in step with the crates of this workspace; nothing here grants any capability over a
/// running node (these are plain data and pure functions).
pub mod internal {
    #[doc(inline)]
    pub use crate::codec;
    #[doc(inline)]
    pub use crate::escape;
    #[doc(inline)]
    pub use crate::proto;
    #[doc(inline)]
    pub use crate::waits;
}

pub use hold::held_in_hierarchy;
pub use id::{Key, LockId, LockIdError};
pub use ident::{AgentId, MAX_NODE_NAME, MemberId, NodeId, NodeNameError};
pub use mode::{Mode, ModeTable, ModeTableError};
pub use proto::{Conversion, LockView, QueueEntry};
pub use rwu::{ReadGuard, RwuLock, UpdateGuard, WriteGuard};
