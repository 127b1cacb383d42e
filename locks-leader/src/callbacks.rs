//! The callbacks of a group member, and what they may return.
//!
//! A type implementing [`Callbacks`] *is* the member's state (Erlang's `ModState`): every
//! callback takes `&mut self`, so the `{ok, NewState}` of the Erlang returns is simply the
//! mutation. The Erlang callbacks' returns are Rust enums:
//!
//! | Erlang return | here |
//! | --- | --- |
//! | `elected`: `{ok, Msg, S}` | [`Elected::Broadcast`]: `am_leader(Msg)` to members not yet synced, `from_leader(Msg)` to the synced |
//! | `elected`: `{ok, AmMsg, FromMsg, S}` | [`Elected::Split`] |
//! | `elected`: `{reply, Msg, S}` (a new member) | [`Elected::Reply`]: `am_leader(Msg)` to that member only |
//! | `{ok,S}` / `{noreply,S}` | [`Handled::Ok`] |
//! | `{ok, Msg, S}` (leader only) | [`Handled::Broadcast`] (`from_leader(Msg)` to the synced members) |
//! | `{stop, R, S}` | [`Handled::Stop`], [`Elected::Stop`], [`CallReturn::Stop`] |
//! | `{reply, R, S}` | [`CallReturn::Reply`] |
//! | `{reply, R, Msg, S}` | [`CallReturn::ReplyBroadcast`]: broadcast first, then reply (in majority mode, once a majority applied it) |
//! | `{noreply, S}` | [`CallReturn::NoReply`] (answer later with [`Ctx::reply`]) |
//!
//! Left out on purpose: `elected` returning `{surrender, Other, S}` (it cannot work in the
//! original; here the lock decides who leads), and `{ok, S}` from `elected`
//! (a new member cannot follow without an `am_leader`).
//!
//! Callbacks run on the member's actor, on the node's thread: they must not block. They talk to
//! the group through the [`Ctx`] they are given (reply later, broadcast, cast to the leader).

use crate::error::CallError;
use crate::term::{Role, Term};
use locks_core::{MemberId, NodeId};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::fmt;

/// What the messages of a group must be: they travel between nodes (encoded with bincode
/// through serde) and are copied to several members. Derive `Serialize` and `Deserialize` with
/// the re-exported [`serde`](crate::serde) (`#[serde(crate = "locks_leader::serde")]`) if the
/// program does not depend on serde itself.
/// (`Unpin` because the member's actor keeps them.)
pub trait Payload:
    Serialize + DeserializeOwned + fmt::Debug + Clone + Send + Unpin + 'static
{
}

impl<T: Serialize + DeserializeOwned + fmt::Debug + Clone + Send + Unpin + 'static> Payload for T {}

/// The number of a call, unique on the member that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CallId(pub u64);

/// Who made a call: answer it with the [`CallReturn`] or later with [`Ctx::reply`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller(pub(crate) CallerKind);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum CallerKind {
    /// A client of this member.
    Local(CallId),
    /// A leader call forwarded by the member `member` (its call number `call`).
    Remote { member: MemberId, call: CallId },
}

impl Caller {
    /// The member the call came from: `None` for a client of this member.
    pub fn member(&self) -> Option<&MemberId> {
        match &self.0 {
            CallerKind::Local(_) => None,
            CallerKind::Remote { member, .. } => Some(member),
        }
    }
}

/// What `elected` asks for (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Elected<B> {
    /// `am_leader(msg)` to every member not synced yet, `from_leader(msg)` to the synced ones.
    Broadcast(B),
    /// `am_leader(to_new)` to the members not synced yet, `from_leader(to_synced)` to the others.
    Split {
        /// For the members not synced yet.
        to_new: B,
        /// For the members already synced.
        to_synced: B,
    },
    /// `am_leader(msg)` only to the new member `elected` was called for; after a fresh
    /// election (no particular member) it is [`Elected::Broadcast`].
    Reply(B),
    /// Stop the member.
    Stop(String),
}

/// What most callbacks return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handled<B> {
    /// Nothing more to do.
    Ok,
    /// `from_leader(msg)` to every synced member; only a leader may (otherwise it is logged and
    /// dropped, Erlang's `not_leader` error).
    Broadcast(B),
    /// Stop the member.
    Stop(String),
}

/// What `handle_leader_call` and `handle_call` return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallReturn<R, B> {
    /// Answer the caller.
    Reply(R),
    /// Broadcast `from_leader(B)` to the synced members, then answer: a follower that forwarded
    /// the call applies the broadcast before its caller sees the reply. Only a leader may
    /// broadcast (otherwise only the reply is sent).
    ///
    /// In majority mode the answer also waits until members on a majority of the group's
    /// nodes (the leader's own node counts) have run `from_leader` for it, so a write its
    /// caller was told about survives the leader's crash. If the leader steps down first the
    /// caller gets [`CallError::LeaderDied`] (the broadcast may or may not survive); a call
    /// still fails at its timeout. In islands mode the answer goes at once.
    ReplyBroadcast(R, B),
    /// Answer later with [`Ctx::reply`].
    NoReply,
    /// Stop the member, answering the caller first if `reply` is given.
    Stop {
        /// Why.
        reason: String,
        /// The answer, if any.
        reply: Option<R>,
    },
}

/// The callbacks of a group member (Erlang's `locks_leader` behaviour). The
/// implementing value is the member's state.
///
/// `Call`/`Reply` serve both leader calls and local calls, `Cast` both leader casts and local
/// casts, `Broadcast` every `am_leader` and `from_leader` message; `Info` is for local messages
/// only and is never encoded.
pub trait Callbacks: Send + Sized + Unpin + 'static {
    /// A request of a leader call or a local call.
    type Call: Payload;
    /// The answer to a call.
    type Reply: Payload;
    /// A leader cast or a local cast.
    type Cast: Payload;
    /// What the leader sends to its members (`am_leader`, `from_leader`).
    type Broadcast: Payload;
    /// A local message for [`Callbacks::handle_info`].
    type Info: fmt::Debug + Send + Unpin + 'static;

    /// Called once when the member starts, before it takes part in the group; an error stops it
    /// (and `start` returns the error).
    fn init(&mut self, ctx: &mut Ctx<'_, Self>) -> Result<(), String> {
        let _ = ctx;
        Ok(())
    }

    /// This member became leader (`new` is `None`, and every other member is new), or, while
    /// leading, a member it has not synced appeared (`new` names it). `ctx.term()` is the term
    /// of the leadership, `ctx.new_candidates()` the candidates not synced yet: after a netsplit
    /// heals, the members of the other island.
    fn elected(
        &mut self,
        new: Option<&MemberId>,
        ctx: &mut Ctx<'_, Self>,
    ) -> Elected<Self::Broadcast>;

    /// This member accepted `ctx.leader()` as its leader, which sent `msg` with its
    /// announcement.
    fn surrendered(
        &mut self,
        msg: Self::Broadcast,
        ctx: &mut Ctx<'_, Self>,
    ) -> Handled<Self::Broadcast>;

    /// This member stopped leading: it lost the election lock on some node, or (majority
    /// mode) it can no longer prove that it holds it on a majority of the group's nodes (a
    /// node went down or a lease expired). Called before the member answers anything else;
    /// from now on `ctx.is_leader()` is false and leader calls are no longer handled here.
    /// Whatever this leader was doing under its term must stop: a new leader, with a larger
    /// term, may be elected on the other side. Not called when the member stops.
    fn stepped_down(&mut self, ctx: &mut Ctx<'_, Self>) -> Handled<Self::Broadcast> {
        let _ = ctx;
        Handled::Ok
    }

    /// A broadcast from the leader this member follows.
    // The name is Erlang's; it is not a conversion.
    #[allow(clippy::wrong_self_convention)]
    fn from_leader(
        &mut self,
        msg: Self::Broadcast,
        ctx: &mut Ctx<'_, Self>,
    ) -> Handled<Self::Broadcast>;

    /// A leader call, on the leader only.
    fn handle_leader_call(
        &mut self,
        req: Self::Call,
        from: Caller,
        ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<Self::Reply, Self::Broadcast>;

    /// A leader cast, on the leader only.
    fn handle_leader_cast(
        &mut self,
        msg: Self::Cast,
        ctx: &mut Ctx<'_, Self>,
    ) -> Handled<Self::Broadcast> {
        let _ = (msg, ctx);
        Handled::Ok
    }

    /// A candidate this member knew of is gone (it stopped, or its node went down or was cut
    /// off). Called once per candidate and departure, in every state.
    fn handle_down(
        &mut self,
        member: &MemberId,
        ctx: &mut Ctx<'_, Self>,
    ) -> Handled<Self::Broadcast> {
        let _ = (member, ctx);
        Handled::Ok
    }

    /// A call from a client of this member, in every state.
    fn handle_call(
        &mut self,
        req: Self::Call,
        from: Caller,
        ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<Self::Reply, Self::Broadcast>;

    /// A cast from a client of this member, in every state.
    fn handle_cast(
        &mut self,
        msg: Self::Cast,
        ctx: &mut Ctx<'_, Self>,
    ) -> Handled<Self::Broadcast> {
        let _ = (msg, ctx);
        Handled::Ok
    }

    /// A local message, in every state.
    fn handle_info(
        &mut self,
        msg: Self::Info,
        ctx: &mut Ctx<'_, Self>,
    ) -> Handled<Self::Broadcast> {
        let _ = (msg, ctx);
        Handled::Ok
    }
}

/// What a callback's [`Ctx`] reads of its member. The member's core implements it, so that
/// the callbacks and their context do not depend on the core that runs them.
pub(crate) trait GroupView {
    /// This member.
    fn me(&self) -> &MemberId;
    /// This member's role.
    fn role(&self) -> Role;
    /// The term of the leader this member believes in.
    fn term(&self) -> Option<&Term>;
    /// Whether the member is in the leader state.
    fn is_leader(&self) -> bool;
    /// Whether the member leads and answers as leader (majority mode: its term accepted by a
    /// majority).
    fn established(&self) -> bool;
    /// The members of `role` it knows of, in id order.
    fn with_role(&self, role: Role) -> Vec<MemberId>;
    /// For a leader: the members of `role` not synced yet.
    fn unsynced(&self, role: Role) -> Vec<MemberId>;
    /// See [`Ctx::alive`].
    fn alive_members(&self) -> Vec<MemberId>;
    /// The nodes the member considers up, its own included.
    fn nodes(&self) -> Vec<NodeId>;
}

/// What a callback asked for through its [`Ctx`].
pub(crate) enum Action<C: Callbacks> {
    Reply(Caller, C::Reply),
    Broadcast(Option<Vec<MemberId>>, C::Broadcast),
    LeaderCast(C::Cast),
}

/// The election as a callback sees it (Erlang's election handle `E`), and the way to act on it.
///
/// A callback reads the election (leader, term, members) from the context and may ask for
/// effects: answer a caller, broadcast, cast to the leader. The effects are carried out after
/// the callback returns, in the order asked, before the effects its return value asks for.
pub struct Ctx<'a, C: Callbacks> {
    s: &'a dyn GroupView,
    pub(crate) actions: Vec<Action<C>>,
}

impl<'a, C: Callbacks> Ctx<'a, C> {
    pub(crate) fn new(s: &'a dyn GroupView) -> Ctx<'a, C> {
        Ctx {
            s,
            actions: Vec::new(),
        }
    }

    /// This member.
    pub fn me(&self) -> &MemberId {
        self.s.me()
    }

    /// This member's role.
    pub fn role(&self) -> Role {
        self.s.role()
    }

    /// The leader this member believes in (itself, when it leads).
    pub fn leader(&self) -> Option<&MemberId> {
        self.s.term().map(|t| &t.leader)
    }

    /// The term of the leader this member believes in.
    pub fn term(&self) -> Option<&Term> {
        self.s.term()
    }

    /// Whether this member leads. In majority mode: only once a majority of the group's nodes
    /// accepted its term (a member there, or the lock server of a node where it knows no
    /// member; in `elected` right after a new term is taken, not yet; broadcasts are allowed
    /// all the same).
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
        self.s.nodes()
    }

    /// Answers a call (one that returned [`CallReturn::NoReply`], now or earlier).
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
