//! The inputs of a member and the election: start, lock-server messages, node events, messages
//! between members (dispatched to `society`), the sync step and leaving; one election step
//! (the states, terms, becoming leader and stepping down) is `election.rs`
//! (see the module documentation of [`super`]).

use super::society::Learnt;
use super::{Inner, MemberCore, MemberEffect, PeerMsg, State};
use crate::callbacks::Callbacks;
use crate::core::member_messages::Peer;
use crate::error::CallError;
use crate::options::GroupOptions;
use crate::term::Role;
use locks_agent::state_machine::{AgentCore, AgentEffect};
use locks_agent::{Options, Req};
use locks_core::proto::{AgentMessage, ServerRequest};
use locks_core::{AgentId, LockId, MemberId, Mode, ModeTable, NodeId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;
use tracing::{debug, trace};

impl<C: Callbacks> MemberCore<C> {
    /// A member of the group whose election lock is `lock`, with the default options (majority
    /// mode). A candidate competes with the agent `agent_id` (its member id has the same
    /// parts); a worker uses the id only to watch.
    pub fn new(
        agent_id: AgentId,
        role: Role,
        lock: LockId,
        modes: ModeTable,
        callbacks: C,
    ) -> MemberCore<C> {
        Self::with_options(
            agent_id,
            role,
            lock,
            modes,
            callbacks,
            &GroupOptions::default(),
        )
    }

    /// A member, as [`MemberCore::new`], with `options` (majority or islands mode, the
    /// configured nodes).
    pub fn with_options(
        agent_id: AgentId,
        role: Role,
        lock: LockId,
        modes: ModeTable,
        callbacks: C,
        options: &GroupOptions,
    ) -> MemberCore<C> {
        let agent = (role == Role::Candidate).then(|| {
            let options = Options {
                abort_on_deadlock: false,
                await_nodes: true,
            };
            AgentCore::new(agent_id.clone(), modes, options)
        });
        let me = MemberId::of_agent(&agent_id);
        let mut group = options.configured_nodes().clone();
        group.insert(me.node().clone());
        MemberCore {
            cb: callbacks,
            s: Inner {
                me,
                agent_id,
                role,
                lock,
                agent,
                state: State::Candidate,
                alive: BTreeSet::new(),
                views: BTreeMap::new(),
                watching: BTreeSet::new(),
                // A worker is on no queue: it finds a leader only by seeing it hold the lock,
                // wherever that is (see `refresh_watches`).
                watch_all: role == Role::Worker,
                members: BTreeMap::new(),
                accepted: None,
                seen: None,
                pending: VecDeque::new(),
                forwarded: BTreeMap::new(),
                local: VecDeque::new(),
                stash: None,
                sync_gen: 0,
                recheck_at: None,
                mode: options.mode(),
                group,
                poll: None,
                sync_held: None,
                unleased: BTreeSet::new(),
                acks: BTreeSet::new(),
                raising: BTreeSet::new(),
                deferred: BTreeSet::new(),
                confirm: Default::default(),
                published: None,
                stopped: false,
                out: Vec::new(),
            },
        }
    }

    /// Starts the member on a node that sees `nodes` up: runs `init`, then a candidate asks
    /// for the election lock on the first node (module `first_node`) and the member watches the lock on
    /// the first node and on its own node.
    /// An `init` error is returned, and the member is stopped.
    pub fn start(
        &mut self,
        nodes: &[NodeId],
        now: Duration,
    ) -> Result<Vec<MemberEffect<C>>, String> {
        let _ = now;
        if let Err(e) = self.invoke(|cb, ctx| cb.init(ctx)) {
            self.s.stopped = true;
            self.s.out.clear();
            return Err(e);
        }
        self.s.alive = nodes.iter().cloned().collect();
        self.s.alive.insert(self.s.me.node().clone());
        let first_node: Vec<NodeId> = self.first_node().into_iter().collect();
        // The request first: the first node's lock server lists a candidate before it answers any
        // of the member's watches, so members learn of it from the first node first.
        if let Some(agent) = &mut self.s.agent {
            match agent.request(self.s.lock.clone(), Mode::WRITE, &first_node, Req::AllAlive) {
                Ok(effects) => self.agent_effects(effects),
                Err(e) => return Err(format!("cannot request the election lock: {e}")),
            }
        }
        self.refresh_watches();
        Ok(self.take())
    }

    /// A message for the member's agent id: a lock server's notice or view, or another agent's
    /// message. Call [`MemberCore::settle`] after a burst of inputs.
    pub fn deliver(&mut self, msg: AgentMessage, now: Duration) -> Vec<MemberEffect<C>> {
        if self.s.stopped {
            return Vec::new();
        }
        match msg {
            AgentMessage::Watched { node, lock, view } => {
                if lock == self.s.lock {
                    self.on_view(node, view, now);
                }
            }
            // The member asked for it in its agent's name (module `majority`).
            AgentMessage::Raised { node, lock, floor } => {
                if lock == self.s.lock {
                    self.on_raised(&node, floor);
                }
            }
            other => {
                if let Some(agent) = &mut self.s.agent {
                    let effects = agent.receive(other);
                    self.agent_effects(effects);
                }
            }
        }
        self.take()
    }

    /// Runs the agent's analysis and checks where the member stands. Call once after each burst
    /// of inputs.
    pub fn settle(&mut self, now: Duration) -> Vec<MemberEffect<C>> {
        if self.s.stopped {
            return Vec::new();
        }
        if let Some(agent) = &mut self.s.agent {
            let effects = agent.settle();
            self.agent_effects(effects);
        }
        self.reassess(now);
        self.take()
    }

    /// The lock server of `node` is reachable (again, or for the first time): watch the lock
    /// there and (a candidate) extend the request to it, now or once it holds the first node (module
    /// `first_node`; its agent is told of the node at once either way). A leader whose request grows steps
    /// down until it holds the lock there too; in majority mode a leader defers the node
    /// instead (module `tenure`).
    pub fn node_up(&mut self, node: &NodeId, now: Duration) -> Vec<MemberEffect<C>> {
        if self.s.stopped {
            return Vec::new();
        }
        self.s.unleased.remove(node);
        if self.s.alive.insert(node.clone()) {
            self.s.watching.remove(node);
            self.learn_listed_on(node);
        }
        self.refresh_watches();
        if self.s.agent.is_some() && self.defers_nodes() {
            self.s.deferred.insert(node.clone());
        } else if self.asks_at_once(node) {
            self.extend_request(node);
        } else {
            self.agent_sees_up(node);
        }
        self.retry_stash(now);
        self.take()
    }

    /// The node went down (or was cut off): its members are gone, and the agent excuses it.
    pub fn node_down(&mut self, node: &NodeId, now: Duration) -> Vec<MemberEffect<C>> {
        if self.s.stopped {
            return Vec::new();
        }
        self.s.alive.remove(node);
        self.s.unleased.remove(node);
        self.s.views.remove(node);
        self.s.watching.remove(node);
        // The first node may have moved.
        self.refresh_watches();
        // A deferred node's agent still knows it as it was before it came up.
        let deferred = self.s.deferred.remove(node);
        if let Some(agent) = &mut self.s.agent
            && !deferred
        {
            let effects = agent.node_down(node);
            self.agent_effects(effects);
        }
        let lost: Vec<MemberId> = self
            .s
            .members
            .keys()
            .filter(|m| m.node() == node)
            .cloned()
            .collect();
        for m in lost {
            self.gone(&m, now);
        }
        if matches!(&self.s.state, State::Following { term, .. } if term.leader.node() == node)
            || (matches!(self.s.state, State::Following { .. }) && !self.s.sees_majority())
        {
            self.leader_lost();
        }
        // A leader left without a majority steps down now, not at the next settle.
        if self.s.is_leader() && !self.holds_majority() {
            self.step_down();
        }
        self.check_departures(now);
        self.retry_stash(now);
        self.refuse_without_majority();
        self.take()
    }

    /// A watch could not be sent to the lock server of `node` (the node is not connected): the
    /// agent treats the node as unreachable until it comes up. (The agent's own requests are
    /// the executor's: it tells the agent itself.)
    pub fn server_unreachable(&mut self, node: &NodeId, now: Duration) -> Vec<MemberEffect<C>> {
        let _ = now;
        if let Some(agent) = &mut self.s.agent
            && !self.s.stopped
            && !self.s.deferred.contains(node)
        {
            let effects = agent.unreachable(node);
            self.agent_effects(effects);
        }
        self.take()
    }

    /// A message to `member` could not be delivered because it does not run (any more).
    pub fn member_unreachable(&mut self, member: &MemberId, now: Duration) -> Vec<MemberEffect<C>> {
        if !self.s.stopped {
            self.gone(member, now);
        }
        self.take()
    }

    /// A message from another member.
    pub fn peer(
        &mut self,
        from: &MemberId,
        envelope: Peer<C>,
        now: Duration,
    ) -> Vec<MemberEffect<C>> {
        if self.s.stopped || from == &self.s.me {
            return Vec::new();
        }
        trace!(member = %self.s.me, %from, kind = envelope.msg.kind(), "peer message");
        self.s.see(envelope.known.as_ref());
        if self.s.majority_mode() {
            self.s.group.extend(envelope.group.iter().cloned());
        }
        if matches!(envelope.msg, PeerMsg::Goodbye) {
            self.gone(from, now);
            return self.take();
        }
        // A member that accepted a larger term than this leader's: take a larger one first, so
        // that announcements from now on (to it too) carry it. Not on another leader's claims:
        // two claimants are settled by the lock, and out-bidding each other would not end.
        let claim = matches!(
            envelope.msg,
            PeerMsg::AmLeader { .. } | PeerMsg::FromLeader { .. }
        );
        self.on_term_seen(envelope.known.as_ref(), claim);
        let how = match envelope.msg {
            PeerMsg::Hello { .. } => Learnt::Hello,
            _ => Learnt::Message,
        };
        let new = self.learn(from, envelope.role, how);
        match envelope.msg {
            PeerMsg::Hello { leader } => {
                // A leader announces itself to a sender that does not follow it, even one it
                // announced itself to before (it may have dropped this leader since). A sender
                // just learnt was announced to by `learn`.
                if let State::Leader { term, .. } = &self.s.state
                    && !new
                    && leader.as_ref() != Some(term)
                    && let Some(k) = self.s.members.get_mut(from)
                {
                    k.synced = false;
                    self.announce_to(from);
                }
                // A member watches few nodes (module `society`): a leader on no lock queue it
                // watches (one that deferred the first node), or one it forgot while cut off, is found
                // through those that follow it. A follower names its leader to a sender that has
                // none (a new sender was greeted by `learn`); only senders without a leader are
                // answered, so two followers of different leaders do not answer each other.
                if leader.is_none() && !new && matches!(self.s.state, State::Following { .. }) {
                    let leader = self.s.term().cloned();
                    self.s.send(from, PeerMsg::Hello { leader });
                }
                if let Some(t) = leader {
                    if !self.s.members.contains_key(&t.leader) {
                        self.learn(&t.leader, Role::Candidate, Learnt::Named);
                    } else if matches!(self.s.state, State::Candidate) && t.leader != self.s.me {
                        // The leader announces itself to a member that does not follow it.
                        self.s.send(&t.leader, PeerMsg::Hello { leader: None });
                    }
                }
            }
            PeerMsg::AmLeader { term, grants, msg } => {
                self.on_am_leader(from, term, grants, msg, now)
            }
            PeerMsg::FromLeader { term, msg, ack } => self.on_from_leader(from, term, msg, ack),
            PeerMsg::Applied { term, seq } => self.on_applied(from, &term, seq),
            PeerMsg::Uncertain => self.on_uncertain(from, now),
            PeerMsg::Nack => {}
            PeerMsg::LeaderCall { call, req } => self.on_leader_call(from, call, req),
            PeerMsg::LeaderReply { call, result } => self.on_leader_reply(from, call, result, now),
            PeerMsg::LeaderCast { msg } => {
                if self.s.is_leader() {
                    let h = self.invoke(|cb, ctx| cb.handle_leader_cast(msg, ctx));
                    self.handled(h);
                } else {
                    debug!(member = %self.s.me, %from, "leader cast to a non-leader dropped");
                }
            }
            PeerMsg::Poll { attempt } => self.on_poll(from, attempt),
            PeerMsg::Polled { attempt } => self.on_polled(from, attempt),
            PeerMsg::Accepted { term } => self.on_accepted(from, &term),
            PeerMsg::Goodbye => {}
        }
        self.take()
    }

    /// The result of sync attempt `attempt`: `true` when the sync lock is held (the shell keeps it
    /// until [`MemberEffect::EndSync`]).
    pub fn sync_result(&mut self, attempt: u64, ok: bool, now: Duration) -> Vec<MemberEffect<C>> {
        let current = matches!(self.s.state, State::Syncing { attempt: g, .. } if g == attempt);
        if !current || self.s.stopped {
            if ok {
                self.s.out.push(MemberEffect::EndSync { attempt });
            }
            return self.take();
        }
        self.on_sync_result(attempt, ok, now);
        self.take()
    }

    /// Time passed: calls past their deadline fail, a sync that takes too long is given up.
    pub fn tick(&mut self, now: Duration) -> Vec<MemberEffect<C>> {
        if self.s.stopped {
            return Vec::new();
        }
        self.expire_calls(now);
        self.check_sync_deadline(now);
        if !matches!(self.s.state, State::Syncing { .. }) {
            self.s.sync_held = None;
            self.s.poll = None;
        }
        if self.s.recheck_at.is_some_and(|t| t <= now) {
            self.s.recheck_at = None;
        }
        self.reassess(now);
        self.take()
    }

    /// Stops the member: `Goodbye` to every member it knows, its agent's locks and its watches
    /// released, waiting callers answered. Idempotent.
    pub fn stop(&mut self, reason: &str) -> Vec<MemberEffect<C>> {
        self.stop_with(reason.to_owned());
        self.take()
    }

    pub(super) fn stop_with(&mut self, reason: String) {
        if self.s.stopped {
            return;
        }
        debug!(member = %self.s.me, %reason, "member stopping");
        let members: Vec<MemberId> = self.s.members.keys().cloned().collect();
        for m in &members {
            self.s.send(m, PeerMsg::Goodbye);
        }
        self.fail_all_calls(CallError::Stopped(reason.clone()));
        self.fail_held(CallError::Stopped(reason.clone()));
        // The agent's end releases its locks, and the member's watches on the same nodes;
        // the watches elsewhere are released here.
        let mut watched = std::mem::take(&mut self.s.watching);
        if let Some(agent) = &mut self.s.agent {
            let effects = agent.end();
            for effect in &effects {
                if let AgentEffect::ToServer { node, .. } = effect {
                    watched.remove(node);
                }
            }
            self.agent_effects(effects);
        }
        for node in watched {
            let request = ServerRequest::RemoveAgent {
                agent: self.s.agent_id.clone(),
            };
            self.s.out.push(MemberEffect::ToServer { node, request });
        }
        self.stand_down();
        self.s.stopped = true;
        self.s.out.push(MemberEffect::Stopped { reason });
    }

    /// Watches the lock where the member is to and does not yet: on the first node and on its own
    /// node, and on every node up once its agent held the lock on every node it asked, or if
    /// it is a worker (see the module documentation of [`super`], "The four planes").
    pub(super) fn refresh_watches(&mut self) {
        if self.s.stopped {
            return;
        }
        let wanted: Vec<NodeId> = if self.s.watch_all {
            self.s.alive.iter().cloned().collect()
        } else {
            let mut w: Vec<NodeId> = self.first_node().into_iter().collect();
            let home = self.s.me.node();
            if self.s.alive.contains(home) && w.first() != Some(home) {
                w.push(home.clone());
            }
            w
        };
        for node in wanted {
            if self.s.watching.insert(node.clone()) {
                trace!(member = %self.s.me, %node, "watching the election lock");
                let request = ServerRequest::Watch {
                    watcher: self.s.agent_id.clone(),
                    lock: self.s.lock.clone(),
                };
                self.s.out.push(MemberEffect::ToServer { node, request });
            }
        }
    }

    /// The agent's requests and messages are the executor's to carry out, in order with the
    /// member's effects; the rest is noted here.
    pub(super) fn agent_effects(&mut self, effects: Vec<AgentEffect>) {
        for effect in effects {
            match effect {
                AgentEffect::ToServer { .. } | AgentEffect::ToAgent { .. } => {
                    self.s.out.push(MemberEffect::Agent(effect))
                }
                other => note_agent_effect(&self.s.me, other),
            }
        }
    }
}

/// What the member makes of its election agent's effects other than its requests and
/// messages (given by the core, or by the executor after a server found unreachable): only
/// logs. Leadership follows the agent's status, read
/// at each settle, not these reports.
pub(crate) fn note_agent_effect(me: &MemberId, effect: AgentEffect) {
    match effect {
        AgentEffect::StatusChanged(status) => {
            trace!(member = %me, ?status, "election agent status");
        }
        // The election agent does not abort on deadlocks.
        AgentEffect::Abort { lock, node } => {
            debug!(member = %me, %lock, %node, "election agent aborted");
        }
        AgentEffect::Rejected { node, lock, reason } => {
            debug!(member = %me, %lock, %node, %reason, "election request refused");
        }
        // The member watches the election lock itself, not through its agent, never
        // surrenders it to a named agent, and records no waiting callers in its agent.
        AgentEffect::Watched { .. }
        | AgentEffect::SurrenderAnswered { .. }
        | AgentEffect::Reply { .. }
        | AgentEffect::Granted(_)
        | AgentEffect::Lost(_)
        | AgentEffect::ToServer { .. }
        | AgentEffect::ToAgent { .. } => {}
    }
}
