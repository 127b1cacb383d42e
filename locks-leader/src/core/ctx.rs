//! [`Ctx`]: what a callback sees of its group and how it acts on it.
//!
//! A callback reads the election (leader, term, members) from the context and may ask for
//! effects: answer a caller, broadcast, cast to the leader. The effects are carried out after
//! the callback returns, in the order asked, before the effects its return value asks for.

use super::Inner;
use crate::callbacks::{Callbacks, Caller};
use crate::error::CallError;
use crate::term::{Role, Term};
use locks_core::{MemberId, NodeId};

/// What a callback asked for through its [`Ctx`].
pub(crate) enum Action<C: Callbacks> {
    Reply(Caller, C::Reply),
    Broadcast(Option<Vec<MemberId>>, C::Broadcast),
    LeaderCast(C::Cast),
}

/// The election as a callback sees it (Erlang's election handle `E`), and the way to act on it.
pub struct Ctx<'a, C: Callbacks> {
    s: &'a Inner<C>,
    pub(crate) actions: Vec<Action<C>>,
}

impl<'a, C: Callbacks> Ctx<'a, C> {
    pub(crate) fn new(s: &'a Inner<C>) -> Ctx<'a, C> {
        Ctx {
            s,
            actions: Vec::new(),
        }
    }

    /// This member.
    pub fn me(&self) -> &MemberId {
        &self.s.me
    }

    /// This member's role.
    pub fn role(&self) -> Role {
        self.s.role
    }

    /// The leader this member believes in (itself, when it leads).
    pub fn leader(&self) -> Option<&MemberId> {
        self.s.term().map(|t| &t.leader)
    }

    /// The term of the leader this member believes in.
    pub fn term(&self) -> Option<&Term> {
        self.s.term()
    }

    /// Whether this member leads. In majority mode: only once members on a majority of the
    /// group's nodes accepted its term (in `elected` right after a new term is taken, not
    /// yet; broadcasts are allowed all the same).
    pub fn is_leader(&self) -> bool {
        self.s.established()
    }

    /// The candidates this member knows of, itself included if it is one, in id order.
    pub fn candidates(&self) -> Vec<MemberId> {
        self.s.with_role(Role::Candidate)
    }

    /// The workers this member knows of (a worker knows only itself; the leader knows all
    /// that found it), in id order.
    pub fn workers(&self) -> Vec<MemberId> {
        self.s.with_role(Role::Worker)
    }

    /// For a leader: the candidates it has not synced yet (in `elected`: the ones that are new to
    /// this leadership, such as the members of a healed island). Empty for others.
    pub fn new_candidates(&self) -> Vec<MemberId> {
        self.s.unsynced(Role::Candidate)
    }

    /// For a leader: itself and the members it has synced. For a follower: its leader and
    /// itself. Otherwise itself.
    pub fn alive(&self) -> Vec<MemberId> {
        self.s.alive_members()
    }

    /// The nodes this member considers up, its own included.
    pub fn nodes(&self) -> Vec<NodeId> {
        self.s.alive.iter().cloned().collect()
    }

    /// Answers a call (one that returned [`crate::CallReturn::NoReply`], now or earlier).
    pub fn reply(&mut self, to: &Caller, reply: C::Reply) {
        self.actions.push(Action::Reply(to.clone(), reply));
    }

    /// Sends `from_leader(msg)` to every synced member. Only a leader may.
    pub fn broadcast(&mut self, msg: C::Broadcast) -> Result<(), CallError> {
        if !self.s.is_leader() {
            return Err(CallError::NotLeader);
        }
        self.actions.push(Action::Broadcast(None, msg));
        Ok(())
    }

    /// Sends `from_leader(msg)` to the given members. Only a leader may.
    pub fn broadcast_to(
        &mut self,
        members: &[MemberId],
        msg: C::Broadcast,
    ) -> Result<(), CallError> {
        if !self.s.is_leader() {
            return Err(CallError::NotLeader);
        }
        self.actions
            .push(Action::Broadcast(Some(members.to_vec()), msg));
        Ok(())
    }

    /// Casts `msg` to the leader (handled at once if this member leads; held back until a
    /// leader is known otherwise).
    pub fn leader_cast(&mut self, msg: C::Cast) {
        self.actions.push(Action::LeaderCast(msg));
    }
}
