//! [`MemberCore`]: one group member as a pure state machine.
//!
//! The member actor is a thin shell: it feeds lock-server messages, node events, messages from
//! other members, client calls, the results of the sync lock and the time into a
//! [`MemberCore`], and carries out the [`MemberEffect`]s it returns. Nothing here sends, sleeps or
//! reads a clock: `now` is the time since the member started, given with every input.
//!
//! ```text
//!  lock servers ──Notice/Watched──▶ deliver()     ──ToServer──────────▶ lock servers (watches)
//!                                                  ──Agent────────────▶ the election agent's
//!  node monitor ──node_up/down───▶                 ──ToMember─────────▶ other members
//!  members ──────PeerEnvelope────▶ peer()          ──StartSync/EndSync─▶ the sync lock (shell)
//!  clients ──────leader_call/..──▶                 ──Reply────────────▶ callers
//!  the shell ────sync_result/tick/settle──▶        ──LeaderChanged────▶ the leader watch
//! ```
//!
//! **The four planes** of a `locks_leader` member and how each is done here:
//! - *Society* (who is in the group): every member watches the election lock
//!   (`ServerRequest::Watch`) on the first node (the smallest node it considers up, where every
//!   candidate queues first: module `first_node`) and on its own node, and on every node up once its
//!   agent held the lock on every node it asked (the first node's holder, the one candidate that asks
//!   the other nodes and may lead, whose poll needs their views); a worker watches every node
//!   up from the start (it is on no queue, so it finds a leader only by seeing it hold the
//!   lock, and a leader alone in its group that deferred the first node and the worker's node,
//!   module `tenure`, holds it on neither: a few workers' watches cost N each, not N² per
//!   election). The lock servers tell it
//!   which candidates' agents hold or wait for the lock there; a candidate's member id has the
//!   parts of its agent's id. A member says `Hello` only where it tells the other something
//!   (`MemberCore::learn`): a worker to every candidate it finds (which is how candidates
//!   learn of workers, which never appear in the queues), any member to a holder of the lock
//!   it finds, a follower to a member without a leader, naming its leader, and a member
//!   without a leader to a leader it is told of (a leader that deferred the first node, module
//!   `tenure`, is on no queue a newcomer watches). Watching every node, and a `Hello` per
//!   pair each way, would cost N² watches, their views and N² `Hello`s per election; the first node
//!   lists every candidate that sees the same nodes, and a leader holds the lock on its
//!   members' own nodes and announces itself to every member it finds. A first node that moves (a
//!   smaller node up, the first node down) is watched at once, so members of a node that joins late
//!   or of an island that heals are found the same way. A member is forgotten when it says
//!   `Goodbye`, when its node goes down, or (a candidate) when the view of its own node's lock
//!   no longer lists it, or, for a member that does not watch that node, when no view it has
//!   lists it any more.
//! - *Contest*: a candidate embeds an [`AgentCore`] that write-locks the election lock on every
//!   node it considers up, with `Req::AllAlive` and `await_nodes`, the smallest node (the first node)
//!   first and the others once it holds the first node (module `first_node`); a node that comes up extends
//!   the request (but not a leader's in majority mode, which defers the node until it steps
//!   down: module `tenure`). The agents' deadlock resolution decides, without back-off: in a
//!   connected group exactly one candidate ends up holding the lock everywhere.
//! - *Merge*: the candidate that has all its locks takes the sync lock (through the shell, a
//!   separate transaction with `abort_on_deadlock`; the member never waits for it) and only then
//!   becomes leader, so two take-overs never overlap.
//! - *Role*: `Candidate` (no leader known) → `Syncing` → `Leader`, or → `Following` on an
//!   accepted `AmLeader`. A leader whose agent stops having all locks (a surrender after a heal,
//!   a request extended to a new node) steps down at once and says `Uncertain`.
//! - *Majority mode* (module `majority`): `Syncing` also needs the lock on a majority of the
//!   group's nodes and a poll of the candidates there before the term is taken; a `Leader`
//!   answers as leader only once a majority of the nodes accepted its term (a member's
//!   `Accepted`; on a node where it knows no member, the lock server's `Raised`), and
//!   steps down when it loses the majority or its leases no longer prove it
//!   ([`MemberCore::check_leases`]).
//!
//! **Accepting a leader.** `AmLeader(term, grants)` is accepted when `term` is not below the
//! largest term the member has accepted (otherwise `Nack`, and the leader takes a larger term),
//! and when no view of the lock newer than the leader's grant on that node shows someone else
//! holding it (otherwise it is kept aside and accepted once no view contradicts it: views from
//! a node the leader already lost, but this member has not yet, are dropped when that node goes
//! down here too). A follower drops its leader when the leader says `Uncertain` or `Goodbye`, when
//! the leader's node goes down, or when a view at or after the leader's grant shows it no longer
//! holds the lock: then it says `Uncertain` to the candidates, and whoever leads announces itself.
//!
//! **Calls.** A leader call is handled by the leader, forwarded by a follower, and held back
//! while no leader is known; each has a deadline. A forwarded call whose leader is lost fails
//! with `LeaderDied`; one that reached a member that no longer leads comes back `NotLeader` and
//! is sent again.

mod calls;
mod confirm;
mod election;
mod first_node;
mod majority;
mod member;
mod member_messages;
mod society;
mod tenure;

pub use majority::LeaderProof;
pub(crate) use member::note_agent_effect;
pub use member_messages::{Peer, PeerEnvelope, PeerMessage, PeerMsg};

use crate::callbacks::{CallId, Callbacks, Ctx, GroupView};
use crate::error::CallError;
use crate::options::ElectionMode;
use crate::term::{Role, Term};
use locks_agent::state_machine::{AgentCore, AgentEffect};
use locks_core::proto::{LockView, ServerRequest};
use locks_core::{AgentId, LockId, MemberId, NodeId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How long a candidate may take to get the sync lock before it gives up and tries again.
pub(crate) const SYNC_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a candidate that failed to sync waits before it checks its locks and tries again.
pub(crate) const RECHECK: Duration = Duration::from_millis(20);

/// Something the shell must do for the core, in the order given.
pub enum MemberEffect<C: Callbacks> {
    /// Send `request` to the lock server of `node` (the member's watches, and their release).
    /// If the node cannot be reached, tell the core ([`MemberCore::server_unreachable`]).
    ToServer {
        /// The node.
        node: NodeId,
        /// The request.
        request: ServerRequest,
    },
    /// An effect of the election agent (a candidate's [`AgentCore`]): carried out by the
    /// agent's executor (`locks_agent::state_machine::execute`) on that core, as the agent actor
    /// does, which also tells the core of a lock server it cannot reach.
    Agent(AgentEffect),
    /// Send `msg` to another member. If it does not run any more, tell the core
    /// ([`MemberCore::member_unreachable`]).
    ToMember {
        /// The recipient.
        to: MemberId,
        /// The message.
        msg: Peer<C>,
    },
    /// Answer the client call `call`.
    Reply {
        /// The call.
        call: CallId,
        /// The answer.
        result: Result<C::Reply, CallError>,
    },
    /// Take the sync lock on `nodes` (a transaction with `abort_on_deadlock`, write lock with
    /// `Req::AllAlive`) and report with [`MemberCore::sync_result`].
    StartSync {
        /// The attempt's number.
        attempt: u64,
        /// The nodes.
        nodes: Vec<NodeId>,
    },
    /// Release (or stop taking) the sync lock of attempt `attempt`.
    EndSync {
        /// The attempt's number.
        attempt: u64,
    },
    /// The leader this member believes in changed (in majority mode a leader publishes its
    /// own term once it is established, and `None` when it steps down or takes a new term).
    LeaderChanged(Option<Term>),
    /// The member stopped (its callbacks asked for it): stop the actor. Every other effect that
    /// goes with it has been given already.
    Stopped {
        /// Why.
        reason: String,
    },
}

impl<C: Callbacks> fmt::Debug for MemberEffect<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemberEffect::ToServer { node, request } => write!(f, "ToServer({node}, {request:?})"),
            MemberEffect::Agent(effect) => write!(f, "Agent({effect:?})"),
            MemberEffect::ToMember { to, msg } => write!(f, "ToMember({to}, {:?})", msg),
            MemberEffect::Reply { call, result } => write!(f, "Reply({call:?}, {result:?})"),
            MemberEffect::StartSync { attempt, nodes } => {
                write!(f, "StartSync({attempt}, {nodes:?})")
            }
            MemberEffect::EndSync { attempt } => write!(f, "EndSync({attempt})"),
            MemberEffect::LeaderChanged(t) => write!(f, "LeaderChanged({t:?})"),
            MemberEffect::Stopped { reason } => write!(f, "Stopped({reason})"),
        }
    }
}

/// Where a member stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// No leader known (a worker stays here until it finds one).
    Candidate,
    /// Has all its election locks and is taking the sync lock (attempt `attempt`).
    Syncing {
        /// The attempt.
        attempt: u64,
        /// When the attempt is given up.
        deadline: Duration,
    },
    /// Leads.
    Leader {
        /// The leadership.
        term: Term,
        /// The fencing version of the election lock on each node where it holds it.
        grants: Vec<(NodeId, u64)>,
    },
    /// Follows `term.leader`.
    Following {
        /// The leadership.
        term: Term,
        /// The leader's fencing versions, as it announced them.
        grants: Vec<(NodeId, u64)>,
    },
}

/// What a member knows about another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Known {
    pub(crate) role: Role,
    /// For a leader: whether the member was sent `AmLeader` in the current term.
    pub(crate) synced: bool,
    /// For a candidate: whether a view of the lock has listed it.
    pub(crate) seen: bool,
    /// For a candidate: whether the view of its own node's lock has listed it.
    pub(crate) seen_home: bool,
}

/// A leader call or cast held back until a leader is known.
pub(crate) enum Pending<C: Callbacks> {
    Call {
        call: CallId,
        req: C::Call,
        deadline: Duration,
    },
    Cast(C::Cast),
    /// A leader call forwarded by `from`, held by a leader whose term is not established yet.
    Remote {
        from: MemberId,
        call: CallId,
        req: C::Call,
    },
}

/// The poll of a candidate about to lead in majority mode: the candidates homed on the nodes
/// where it holds the election lock, asked for the largest term they accepted.
#[derive(Clone, Debug, Default)]
pub(crate) struct Poll {
    pub(crate) attempt: u64,
    pub(crate) asked: BTreeSet<MemberId>,
    pub(crate) answered: BTreeSet<MemberId>,
}

/// A leader call forwarded to a leader, waiting for its answer.
pub(crate) struct Forwarded<C: Callbacks> {
    leader: MemberId,
    req: C::Call,
    deadline: Duration,
}

/// An announcement kept aside because a view contradicted it (see `election::on_am_leader`).
pub(crate) struct Stashed<C: Callbacks> {
    pub(crate) from: MemberId,
    pub(crate) term: Term,
    pub(crate) grants: Vec<(NodeId, u64)>,
    pub(crate) msg: C::Broadcast,
}

/// Work for the callbacks that a callback asked for (a leader cast to itself).
pub(crate) enum LocalWork<C: Callbacks> {
    LeaderCast(C::Cast),
}

/// Everything of a member but its callbacks (so that callbacks can read it while they run).
pub(crate) struct Inner<C: Callbacks> {
    pub(crate) me: MemberId,
    pub(crate) agent_id: AgentId,
    pub(crate) role: Role,
    pub(crate) lock: LockId,
    pub(crate) agent: Option<AgentCore>,
    pub(crate) state: State,
    pub(crate) alive: BTreeSet<NodeId>,
    pub(crate) views: BTreeMap<NodeId, Arc<LockView>>,
    /// The nodes whose lock server was asked to watch the lock (and has not gone down since).
    pub(crate) watching: BTreeSet<NodeId>,
    /// Whether the member watches the lock on every node up, not only on the first node and its own
    /// node: a worker always, a candidate from the first time its agent held the lock on every
    /// node it asked.
    pub(crate) watch_all: bool,
    pub(crate) members: BTreeMap<MemberId, Known>,
    /// The largest term accepted (or taken as leader).
    pub(crate) accepted: Option<Term>,
    /// The largest term seen in any message.
    pub(crate) seen: Option<Term>,
    pub(crate) pending: VecDeque<Pending<C>>,
    pub(crate) forwarded: BTreeMap<CallId, Forwarded<C>>,
    pub(crate) local: VecDeque<LocalWork<C>>,
    pub(crate) stash: Option<Stashed<C>>,
    pub(crate) sync_gen: u64,
    pub(crate) recheck_at: Option<Duration>,
    /// Majority or islands.
    pub(crate) mode: ElectionMode,
    /// The group's nodes (majority mode): the configured ones and the home node of every
    /// candidate ever learnt of, this one's included. Never shrinks.
    pub(crate) group: BTreeSet<NodeId>,
    /// The poll of the current sync attempt (majority mode).
    pub(crate) poll: Option<Poll>,
    /// The sync attempt whose sync lock is held while the poll is still out.
    pub(crate) sync_held: Option<u64>,
    /// The nodes whose lease was found expired when the member last stepped down for it,
    /// until their node-down (or node-up) event: no majority is counted on them meanwhile,
    /// so the member does not take over again on a lease it knows has lapsed.
    pub(crate) unleased: BTreeSet<NodeId>,
    /// The nodes that accepted this leader's current term: the home nodes of the members that
    /// accepted it, and the nodes whose lock server raised its versions to it (module
    /// `majority`).
    pub(crate) acks: BTreeSet<NodeId>,
    /// The nodes whose lock server this leader asked to raise its versions to its current term.
    pub(crate) raising: BTreeSet<NodeId>,
    /// The nodes that came up while this member led in majority mode, kept from its agent
    /// until it steps down (module `tenure`).
    pub(crate) deferred: BTreeSet<NodeId>,
    /// The replies waiting for a majority to apply their broadcast (majority mode).
    pub(crate) confirm: confirm::Confirmations<C>,
    /// The leader last published with `MemberEffect::LeaderChanged`.
    pub(crate) published: Option<Term>,
    pub(crate) stopped: bool,
    pub(crate) out: Vec<MemberEffect<C>>,
}

impl<C: Callbacks> GroupView for Inner<C> {
    fn me(&self) -> &MemberId {
        &self.me
    }
    fn role(&self) -> Role {
        self.role
    }
    fn term(&self) -> Option<&Term> {
        Inner::term(self)
    }
    fn is_leader(&self) -> bool {
        Inner::is_leader(self)
    }
    fn established(&self) -> bool {
        Inner::established(self)
    }
    fn with_role(&self, role: Role) -> Vec<MemberId> {
        Inner::with_role(self, role)
    }
    fn unsynced(&self, role: Role) -> Vec<MemberId> {
        Inner::unsynced(self, role)
    }
    fn alive_members(&self) -> Vec<MemberId> {
        Inner::alive_members(self)
    }
    fn nodes(&self) -> Vec<NodeId> {
        self.alive.iter().cloned().collect()
    }
}

impl<C: Callbacks> Inner<C> {
    pub(crate) fn term(&self) -> Option<&Term> {
        match &self.state {
            State::Leader { term, .. } | State::Following { term, .. } => Some(term),
            State::Candidate | State::Syncing { .. } => None,
        }
    }

    /// Whether the member is in the `Leader` state (it may announce itself; in majority mode
    /// it handles leader calls only once [`Inner::established`]).
    pub(crate) fn is_leader(&self) -> bool {
        matches!(self.state, State::Leader { .. })
    }

    pub(crate) fn with_role(&self, role: Role) -> Vec<MemberId> {
        let mut out: Vec<MemberId> = self
            .members
            .iter()
            .filter(|(_, k)| k.role == role)
            .map(|(m, _)| m.clone())
            .collect();
        if self.role == role {
            out.push(self.me.clone());
            out.sort();
        }
        out
    }

    pub(crate) fn unsynced(&self, role: Role) -> Vec<MemberId> {
        if !self.is_leader() {
            return Vec::new();
        }
        self.members
            .iter()
            .filter(|(_, k)| k.role == role && !k.synced)
            .map(|(m, _)| m.clone())
            .collect()
    }

    pub(crate) fn alive_members(&self) -> Vec<MemberId> {
        let mut out = vec![self.me.clone()];
        match &self.state {
            State::Leader { .. } => out.extend(
                self.members
                    .iter()
                    .filter(|(_, k)| k.synced)
                    .map(|(m, _)| m.clone()),
            ),
            State::Following { term, .. } => out.push(term.leader.clone()),
            State::Candidate | State::Syncing { .. } => {}
        }
        out.sort();
        out
    }

    /// Sends `msg` to `to` in an envelope.
    pub(crate) fn send(&mut self, to: &MemberId, msg: PeerMessage<C>) {
        let group = if self.majority_mode() {
            self.group.iter().cloned().collect()
        } else {
            Vec::new()
        };
        let envelope = PeerEnvelope {
            role: self.role,
            known: self.accepted.clone(),
            group,
            msg,
        };
        self.out.push(MemberEffect::ToMember {
            to: to.clone(),
            msg: envelope,
        });
    }
}

/// One member of a group: see the module documentation.
pub struct MemberCore<C: Callbacks> {
    cb: C,
    s: Inner<C>,
}

impl<C: Callbacks> fmt::Debug for MemberCore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemberCore")
            .field("me", &self.s.me)
            .field("role", &self.s.role)
            .field("state", &self.s.state)
            .finish_non_exhaustive()
    }
}

impl<C: Callbacks> MemberCore<C> {
    /// The callbacks (the member's application state).
    pub fn callbacks(&self) -> &C {
        &self.cb
    }

    /// This member.
    pub fn me(&self) -> &MemberId {
        &self.s.me
    }

    /// The id of the agent that competes for the lock (a candidate) and watches it (both roles).
    pub fn agent_id(&self) -> &AgentId {
        &self.s.agent_id
    }

    /// The member's role.
    pub fn role(&self) -> Role {
        self.s.role
    }

    /// Where the member stands.
    pub fn state(&self) -> &State {
        &self.s.state
    }

    /// The term of the leader this member believes in (its own when it leads).
    pub fn leader(&self) -> Option<&Term> {
        self.s.term()
    }

    /// Whether this member leads: it is in the `Leader` state and, in majority mode, a majority
    /// of the group's nodes accepted its term (module `majority`). (Whether its leases still hold is
    /// for the shell to check: [`MemberCore::check_leases`], [`MemberCore::leader_proof`].)
    pub fn is_leader(&self) -> bool {
        self.s.established()
    }

    /// Majority or islands.
    pub fn mode(&self) -> ElectionMode {
        self.s.mode
    }

    /// The group's nodes a majority is counted over (majority mode; see [`ElectionMode`]).
    pub fn group_nodes(&self) -> Vec<NodeId> {
        self.s.group.iter().cloned().collect()
    }

    /// The candidates known, itself included if it is one.
    pub fn candidates(&self) -> Vec<MemberId> {
        self.s.with_role(Role::Candidate)
    }

    /// The workers known, itself included if it is one.
    pub fn workers(&self) -> Vec<MemberId> {
        self.s.with_role(Role::Worker)
    }

    /// See [`Ctx::alive`].
    pub fn alive(&self) -> Vec<MemberId> {
        self.s.alive_members()
    }

    /// The nodes the member considers up.
    pub fn nodes(&self) -> Vec<NodeId> {
        self.s.alive.iter().cloned().collect()
    }

    /// The largest term this member has accepted or taken.
    pub fn accepted(&self) -> Option<&Term> {
        self.s.accepted.as_ref()
    }

    /// Starts from `term`, which a member of this group on this node accepted before (kept in
    /// the node's data directory): it counts as accepted, so every message carries it and
    /// every term this member takes is above it. Call before [`MemberCore::start`].
    pub fn recall(&mut self, term: Term) {
        self.s.recall(term);
    }

    /// How many leader-call replies wait for a majority to apply their broadcast (majority
    /// mode; see [`CallReturn::ReplyBroadcast`](crate::CallReturn::ReplyBroadcast)).
    pub fn held_replies(&self) -> usize {
        self.s.confirm.held()
    }

    /// Whether the member has stopped.
    pub fn is_stopped(&self) -> bool {
        self.s.stopped
    }

    /// The election agent (a candidate), for the shell to carry out [`MemberEffect::Agent`] on.
    pub(crate) fn agent_mut(&mut self) -> Option<&mut AgentCore> {
        self.s.agent.as_mut()
    }

    /// The election agent's status (a candidate), for tests and diagnostics.
    pub fn agent_status(&self) -> Option<locks_agent::TransactionStatus> {
        self.s.agent.as_ref().map(|a| a.status())
    }

    /// The earliest time at which [`MemberCore::tick`] has something to do.
    pub fn next_deadline(&self) -> Option<Duration> {
        let calls = self
            .s
            .pending
            .iter()
            .filter_map(|p| match p {
                Pending::Call { deadline, .. } => Some(*deadline),
                Pending::Cast(_) | Pending::Remote { .. } => None,
            })
            .chain(self.s.forwarded.values().map(|f| f.deadline));
        let sync = match self.s.state {
            State::Syncing { deadline, .. } => Some(deadline),
            _ => None,
        };
        calls
            .chain(sync)
            .chain(self.s.recheck_at)
            .chain(self.s.confirm.next_deadline())
            .min()
    }

    fn take(&mut self) -> Vec<MemberEffect<C>> {
        if !self.s.stopped {
            self.publish();
        }
        self.drain_local();
        std::mem::take(&mut self.s.out)
    }

    /// Runs a callback with a context, then carries out what it asked for through the context.
    fn invoke<R>(&mut self, f: impl FnOnce(&mut C, &mut Ctx<'_, C>) -> R) -> R {
        let mut ctx = Ctx::new(&self.s);
        let r = f(&mut self.cb, &mut ctx);
        let actions = std::mem::take(&mut ctx.actions);
        self.apply_actions(actions);
        r
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_first_node;
#[cfg(test)]
mod tests_majority;
#[cfg(test)]
mod tests_memberless;
#[cfg(test)]
mod tests_society;
