//! The pure member state machine, as a public API: a [`MemberCore`] takes the member's inputs
//! (its start, messages from other members, its election agent's messages, node events,
//! client calls, timers) and returns [`MemberEffect`]s for a shell to carry out, in order. It
//! sends nothing, sleeps never and reads no clock (the time is an input), so an election can be
//! stepped by hand, simulated on a seeded network or checked by a model checker, as this
//! crate's simulations do. The actor [`start`](crate::start) runs is one such shell.
//!
//! Also here: the member's [`State`] (what [`MemberCore`] exposes for tests and tools), the
//! messages between members ([`Peer`], [`PeerEnvelope`], [`PeerMessage`], [`PeerMsg`]) and the
//! [`LeaderProof`] a majority-mode leader's claim rests on.
//!
//! A core grants no capability over a running node: its effects name lock servers and members,
//! and only a shell that holds a node's port (`locks_server::embed::AgentPort`) can send them,
//! in the name of its own agent only.
//!
//! ```
//! use locks_core::{AgentId, ModeTable, NodeId};
//! use locks_leader::state_machine::{MemberCore, MemberEffect};
//! use locks_leader::{
//!     CallReturn, Callbacks, Caller, Ctx, Elected, Handled, Role, election_lock,
//! };
//! use std::time::Duration;
//!
//! struct Quiet;
//! impl Callbacks for Quiet {
//!     type Call = ();
//!     type Reply = ();
//!     type Cast = ();
//!     type Broadcast = ();
//!     type Info = ();
//!     fn elected(&mut self, _: Option<&locks_core::MemberId>, _: &mut Ctx<'_, Self>) -> Elected<()> {
//!         Elected::Broadcast(())
//!     }
//!     fn surrendered(&mut self, _: (), _: &mut Ctx<'_, Self>) -> Handled<()> {
//!         Handled::Ok
//!     }
//!     fn from_leader(&mut self, _: (), _: &mut Ctx<'_, Self>) -> Handled<()> {
//!         Handled::Ok
//!     }
//!     fn handle_leader_call(&mut self, _: (), _: Caller, _: &mut Ctx<'_, Self>) -> CallReturn<(), ()> {
//!         CallReturn::Reply(())
//!     }
//!     fn handle_call(&mut self, _: (), _: Caller, _: &mut Ctx<'_, Self>) -> CallReturn<(), ()> {
//!         CallReturn::Reply(())
//!     }
//! }
//!
//! let n1 = NodeId::new("n1").unwrap();
//! let lock = election_lock(&"group".into());
//! let agent = AgentId::new(n1.clone(), 1, 1);
//! let mut core = MemberCore::new(agent, Role::Candidate, lock, ModeTable::standard(), Quiet);
//! // Started on a node that sees itself up, a candidate's election agent asks for the lock.
//! let effects = core.start(&[n1], Duration::ZERO).unwrap();
//! assert!(effects.iter().any(|e| matches!(e, MemberEffect::Agent(_))));
//! ```

pub use crate::core::{
    LeaderProof, MemberCore, MemberEffect, Peer, PeerEnvelope, PeerMessage, PeerMsg, State,
};
