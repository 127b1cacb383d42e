//! The seam between the crates of this workspace: what the workspace's own tests and
//! simulations need of `locks-leader` beyond its public surface — the pure member state
//! machine [`MemberCore`], its [`State`] and [`Effect`]s, the messages between members
//! ([`Peer`], [`PeerEnvelope`], [`PeerMessage`], [`PeerMsg`]) and the [`LeaseProof`] a
//! majority-mode leader's claim rests on.
//!
//! It carries no stability promise: anything here may change with any release, in step with
//! the crates of this workspace. Programs use the names at the crate's root.

pub use crate::core::{
    Effect, LeaseProof, MemberCore, Peer, PeerEnvelope, PeerMessage, PeerMsg, State,
};
