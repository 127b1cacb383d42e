//! The seam between the crates of this workspace: what the workspace's own tests and
//! simulations need of `locks-leader` beyond its public surface — the pure member state
//! machine [`MemberCore`], its [`State`] and [`MemberEffect`]s, the messages between members
//! ([`Peer`], [`PeerEnvelope`], [`PeerMessage`], [`PeerMsg`]) and the [`LeaderProof`] a
//! majority-mode leader's claim rests on.
//!
//! **Internal seam, not covered by semver**: anything here may change with any release, in step
//! with the crates of this workspace. Programs use the names at the crate's root. It is pure:
//! a [`MemberCore`] returns effects and sends nothing, so it grants no capability over a
//! running node.

pub use crate::core::{
    LeaderProof, MemberCore, MemberEffect, Peer, PeerEnvelope, PeerMessage, PeerMsg, State,
};
