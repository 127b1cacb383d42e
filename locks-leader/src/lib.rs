//! `locks-leader`: leader election for clustered services, on the agents of `locks-agent`
//! (Erlang's `locks_leader`, `reference/erlang-locks.md` section 6).
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

#![forbid(unsafe_code)]

mod actor;
pub mod callbacks;
pub mod core;
pub mod error;
mod handle;
pub mod term;

pub use callbacks::{CallId, CallReturn, Callbacks, Caller, Elected, Handled, Payload};
pub use core::Ctx;
pub use error::{CallError, Error};
pub use handle::{DEFAULT_CALL_TIMEOUT, Member, MemberInfo, election_lock, start, sync_lock};
pub use locks_core::MemberId;
pub use term::{Role, Term};
