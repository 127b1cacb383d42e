//! `locks-leader`: leader election for clustered services, on the agents of `locks-agent`
//! (after Erlang's `locks_leader`).
//!
//! Members of a group start with [`start`] on a node, as candidates or workers. Candidates
//! compete for the group's election lock `["locks_leader", group]` on every node they see up;
//! the agents' deadlock resolution lets exactly one of each connected group hold it everywhere,
//! and that one, after taking the sync lock `["locks_leader_sync", group]`, leads; the others
//! follow. A leader has a [`Term`] larger than every term it has heard of, a fencing token for
//! what it writes. When a netsplit heals, the candidates of both islands compete again, one
//! leader remains, and its `elected` callback sees the other island's members as new candidates.
//!
//! ```text
//!   Member handle ─calls─▶ member actor (MemberCore + Callbacks) ◀─MemberDelivery─ Router ◀─ other members
//!                             │ election agent (AgentCore) ──Lock/Watch──▶ lock servers (every node)
//!                             │ ◀──Notice/Watched── lock servers            ◀─Forward── other agents
//!                             └─ sync lock: a Transaction (abort_on_deadlock), never awaited by the actor
//! ```
//!
//! The protocol is the pure state machine [`core::MemberCore`] (events in, effects out, time
//! given), tested on an in-memory network of members and lock tables; the actor is a thin shell.
//!
//! # Contracts
//!
//! - In a connected group of nodes (every node connected to every other) that stays unchanged,
//!   exactly one candidate ends up leading, holding the election lock on every node, and every
//!   member follows it; its term is at least every term a member there has accepted.
//! - Each island of a netsplit elects its own leader; after a heal one leader remains, and its
//!   `elected` sees the other island's candidates among `new_candidates()`.
//! - A leader call is handled at most once. It fails with `LeaderDied` if the leader it was
//!   forwarded to stopped leading before answering (it may or may not have been handled), with
//!   `Timeout` at its deadline; one that reached a member that no longer leads is sent again.
//! - A leader's broadcast reaches a follower before the leader's reply to a call that follower
//!   forwarded (one channel per pair of members).
//!
//! # Limits
//!
//! - In a cluster whose connections are not transitive (a–b and b–c connected, a–c not), members
//!   that cannot reach the leader stay without one until the mesh is complete.
//! - A worker is known to candidates only through its `Hello`, so a leader's `workers()` lists
//!   the workers that found it.
//! - `elected` cannot hand leadership to another candidate (Erlang's `{surrender, ...}`, broken
//!   there): the lock decides who leads.

#![forbid(unsafe_code)]

mod actor;
pub mod callbacks;
pub mod core;
pub mod error;
mod handle;
mod lease;
pub mod options;
pub mod term;

pub use callbacks::{CallId, CallReturn, Callbacks, Caller, Elected, Handled, Payload};
pub use core::Ctx;
pub use error::{CallError, Error};
pub use handle::{
    DEFAULT_CALL_TIMEOUT, Member, MemberInfo, election_lock, start, start_with, sync_lock,
};
pub use locks_core::MemberId;
pub use options::{ElectionMode, GroupOptions};
pub use term::{Role, Term};
