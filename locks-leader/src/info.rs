//! [`MemberInfo`]: what a member reports of itself. The member's actor builds it and its
//! handle hands it out, so it lives below both.

use crate::options::ElectionMode;
use crate::term::{Role, Term};
use locks_core::{MemberId, NodeId};

/// What a member knows, as [`Member::info`](crate::Member::info) reports it (Erlang's `info/1`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    /// The member.
    pub me: MemberId,
    /// Its role.
    pub role: Role,
    /// The leader it believes in, with its term.
    pub leader: Option<Term>,
    /// The candidates it knows of, itself included if it is one.
    pub candidates: Vec<MemberId>,
    /// The workers it knows of, itself included if it is one.
    pub workers: Vec<MemberId>,
    /// See [`crate::Ctx::alive`].
    pub alive: Vec<MemberId>,
    /// The nodes it considers up.
    pub nodes: Vec<NodeId>,
    /// Majority or islands.
    pub mode: ElectionMode,
    /// The group's nodes a majority is counted over (majority mode).
    pub group_nodes: Vec<NodeId>,
}
