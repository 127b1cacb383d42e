//! Who is in the group: discovery from the lock's views and from messages, departures, and
//! the leader's announcements sent and retried (see the module documentation of [`super`],
//! "The four planes"; whether an announcement is followed is the election step's decision,
//! `election.rs` `on_am_leader`, as described in "Accepting a leader").

use super::{Known, MemberCore, PeerMsg, State};
use crate::callbacks::{Callbacks, Elected};
use crate::error::CallError;
use crate::term::{Role, Term};
use locks_core::proto::LockView;
use locks_core::{AgentId, MemberId, NodeId};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, trace};

/// How a member was learnt of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Learnt {
    /// A view of the lock lists its agent, as holding the lock there or not.
    View {
        /// Whether it holds the lock there.
        holds: bool,
    },
    /// A `Hello` names it as the leader its sender follows.
    Named,
    /// It sent this member a message other than `Hello`.
    Message,
    /// It said `Hello`.
    Hello,
}

impl<C: Callbacks> MemberCore<C> {
    /// Learns of a member (from a view that lists it, or a message it sent); says `Hello` to
    /// a new one, and a leader announces itself to it.
    ///
    /// `Hello` is said only where it tells the other something it cannot learn otherwise, so
    /// an election does not cost a `Hello` per pair of members each way:
    /// - a member learnt from its own `Hello` knows this one already: it is greeted back only
    ///   by a follower, whose `Hello` names its leader (a leader announces itself instead);
    /// - a candidate learnt from a view, waiting there, finds this member on the same queue
    ///   (every candidate queues on the first node, which every member watches), unless this member
    ///   is a worker, which is on no queue; the holder of the lock there is greeted (it may
    ///   lead without knowing that this member follows nobody).
    pub(super) fn learn(&mut self, m: &MemberId, role: Role, from: Learnt) -> bool {
        let from_message = matches!(from, Learnt::Message | Learnt::Hello);
        // A view may still list the agent of a node that went down (the view was on its way);
        // a `Hello` to it would be lost, so such a member is learnt when its node comes up and
        // a view lists it again. A message, though, comes over a live connection, and if that
        // node goes down the node-down event follows it: learn its sender even before this
        // member has heard that the node is up (a worker is found no other way).
        if m == &self.s.me || (!from_message && !self.s.alive.contains(m.node())) {
            return false;
        }
        self.s.note_member(m);
        if let Some(k) = self.s.members.get_mut(m) {
            k.role = role;
            return false;
        }
        trace!(member = %self.s.me, new = %m, %role, "member discovered");
        self.s.members.insert(
            m.clone(),
            Known {
                role,
                synced: false,
                seen: false,
                seen_home: false,
            },
        );
        let leader = self.s.term().cloned();
        let greet = match from {
            Learnt::Hello => leader.is_some() && !self.s.is_leader(),
            Learnt::View { holds } => holds || self.s.role == Role::Worker,
            Learnt::Message | Learnt::Named => true,
        };
        if greet {
            self.s.send(m, PeerMsg::Hello { leader });
        }
        if self.s.is_leader() {
            self.announce_to(m);
        }
        true
    }

    /// A member is gone: forgotten, `handle_down` for a candidate, and a lost leader dropped.
    pub(super) fn gone(&mut self, m: &MemberId, now: Duration) {
        let _ = now;
        let Some(k) = self.s.members.remove(m) else {
            return;
        };
        debug!(member = %self.s.me, gone = %m, "member gone");
        if matches!(&self.s.state, State::Following { term, .. } if &term.leader == m) {
            self.leader_lost();
        }
        self.fail_forwarded(Some(m), CallError::LeaderDied);
        if k.role == Role::Candidate {
            let h = self.invoke(|cb, ctx| cb.handle_down(m, ctx));
            self.handled(h);
        }
        self.try_finish_sync();
    }

    /// `elected` for the new member `m`.
    pub(super) fn announce_to(&mut self, m: &MemberId) {
        let e = self.invoke(|cb, ctx| cb.elected(Some(m), ctx));
        self.elected_return(Some(m.clone()), e);
    }

    pub(super) fn elected_return(&mut self, new: Option<MemberId>, e: Elected<C::Broadcast>) {
        if !self.s.is_leader() {
            return;
        }
        match e {
            Elected::Broadcast(b) => self.announce_all(b.clone(), b),
            Elected::Split { to_new, to_synced } => self.announce_all(to_new, to_synced),
            Elected::Reply(b) => match new {
                Some(m) => self.am_leader_to(&m, b),
                None => self.announce_all(b.clone(), b),
            },
            Elected::Stop(reason) => self.stop_with(reason),
        }
    }

    pub(super) fn announce_all(&mut self, to_new: C::Broadcast, to_synced: C::Broadcast) {
        let State::Leader { term, .. } = &self.s.state else {
            return;
        };
        let term = term.clone();
        let (synced, new): (Vec<MemberId>, Vec<MemberId>) = {
            let (s, n): (Vec<_>, Vec<_>) = self.s.members.iter().partition(|(_, k)| k.synced);
            (
                s.into_iter().map(|(m, _)| m.clone()).collect(),
                n.into_iter().map(|(m, _)| m.clone()).collect(),
            )
        };
        for m in &synced {
            let msg = PeerMsg::FromLeader {
                term: term.clone(),
                msg: to_synced.clone(),
                ack: None,
            };
            self.s.send(m, msg);
        }
        for m in &new {
            self.am_leader_to(m, to_new.clone());
        }
    }

    pub(super) fn am_leader_to(&mut self, m: &MemberId, b: C::Broadcast) {
        let State::Leader { term, grants } = &self.s.state else {
            return;
        };
        let msg = PeerMsg::AmLeader {
            term: term.clone(),
            grants: grants.clone(),
            msg: b,
        };
        if let Some(k) = self.s.members.get_mut(m) {
            k.synced = true;
        }
        self.s.send(m, msg);
    }

    pub(super) fn on_from_leader(
        &mut self,
        from: &MemberId,
        term: Term,
        msg: C::Broadcast,
        ack: Option<u64>,
    ) {
        match &self.s.state {
            State::Following { term: t, .. } if t == &term => {
                let h = self.invoke(|cb, ctx| cb.from_leader(msg, ctx));
                self.handled(h);
                if let Some(seq) = ack {
                    self.s.send(from, PeerMsg::Applied { term, seq });
                }
            }
            State::Leader { .. } | State::Syncing { .. } => {}
            _ => {
                if self.s.accepted.as_ref().is_some_and(|a| &term < a) {
                    self.s.send(from, PeerMsg::Nack);
                } else {
                    // A leader that counts this member as synced while it is not: ask again.
                    self.s.send(from, PeerMsg::Uncertain);
                }
            }
        }
    }

    pub(super) fn on_uncertain(&mut self, from: &MemberId, now: Duration) {
        let _ = now;
        // An announcement kept aside from a member that now says it has no leader is void.
        if self.s.stash.as_ref().is_some_and(|st| &st.from == from) {
            self.s.stash = None;
        }
        match &self.s.state {
            State::Following { term, .. } if &term.leader == from => self.leader_lost(),
            State::Leader { .. } => {
                if let Some(k) = self.s.members.get_mut(from) {
                    k.synced = false;
                }
                self.announce_to(from);
            }
            _ => {}
        }
    }

    /// Whether a view of the lock newer than the leader's grant on its node shows that `leader`
    /// no longer holds it there.
    pub(super) fn contradicted(&self, leader: &MemberId, grants: &[(NodeId, u64)]) -> bool {
        let agent = leader.agent();
        grants.iter().any(|(node, granted)| {
            self.s
                .views
                .get(node)
                .is_some_and(|v| v.version >= *granted && !v.holds(&agent))
        })
    }

    /// Accepts the announcement kept aside if the views no longer contradict it and a majority
    /// is in sight.
    pub(super) fn retry_stash(&mut self, now: Duration) {
        let Some(st) = self.s.stash.take() else {
            return;
        };
        if !self.s.members.contains_key(&st.from)
            || matches!(self.s.state, State::Leader { .. } | State::Syncing { .. })
        {
            return;
        }
        if self.contradicted(&st.from, &st.grants) || !self.s.sees_majority() {
            self.s.stash = Some(st);
            return;
        }
        self.on_am_leader(&st.from.clone(), st.term, st.grants, st.msg, now);
    }

    pub(super) fn on_view(&mut self, node: NodeId, view: Arc<LockView>, now: Duration) {
        if !self.s.alive.contains(&node) {
            return;
        }
        if self
            .s
            .views
            .get(&node)
            .is_some_and(|old| view.version < old.version)
        {
            return;
        }
        self.s.views.insert(node.clone(), view.clone());
        for agent in view.agents() {
            self.listed(&node, &MemberId::of_agent(agent), view.holds(agent));
        }
        self.check_departures(now);
        self.try_finish_sync();
        if let State::Following { term, grants } = &self.s.state
            && let Some((_, granted)) = grants.iter().find(|(n, _)| n == &node)
            && view.version >= *granted
            && !view.holds(&term.leader.agent())
        {
            debug!(member = %self.s.me, leader = %term.leader, %node, "the leader no longer holds the election lock");
            self.leader_lost();
        }
        self.retry_stash(now);
    }

    /// The view of the lock on `node` lists the agent of `m` (holding the lock if `holds`).
    fn listed(&mut self, node: &NodeId, m: &MemberId, holds: bool) {
        let _ = self.learn(m, Role::Candidate, Learnt::View { holds });
        if let Some(k) = self.s.members.get_mut(m) {
            k.seen = true;
            if m.node() == node {
                k.seen_home = true;
            }
        }
    }

    /// `node` came up: the members living there that views already list are learnt now (they
    /// were passed over while their node was not up, and a view that lists them need not
    /// change again).
    pub(super) fn learn_listed_on(&mut self, node: &NodeId) {
        let listed: Vec<(NodeId, MemberId, bool)> = self
            .s
            .views
            .iter()
            .flat_map(|(at, v)| {
                v.agents()
                    .into_iter()
                    .filter(|a| a.node() == node)
                    .map(|a| (at.clone(), MemberId::of_agent(a), v.holds(a)))
            })
            .collect();
        for (at, m, holds) in listed {
            self.listed(&at, &m, holds);
        }
    }

    /// Forgets the candidates that left: the view of a candidate's own node (if this member
    /// watches it) no longer lists it, and either it did before, or no view lists it any more
    /// though one did.
    ///
    /// It runs on every view that arrives, and an election's first node lists every candidate: the
    /// agents of all views are gathered once per run (and only if a candidate missing from its
    /// own node's view needs them), not once per candidate, so a run costs the size of the
    /// views plus the members rather than their product.
    pub(super) fn check_departures(&mut self, now: Duration) {
        let s = &self.s;
        let mut anywhere: Option<HashSet<&AgentId>> = None;
        let mut departed: Vec<MemberId> = Vec::new();
        for (m, k) in &s.members {
            if k.role != Role::Candidate {
                continue;
            }
            let agent = m.agent();
            let home = s.views.get(m.node());
            if home.is_some_and(|h| h.lists(&agent)) {
                continue;
            }
            let gone = (home.is_some() && k.seen_home)
                || (k.seen
                    && !anywhere
                        .get_or_insert_with(|| s.views.values().flat_map(|v| v.agents()).collect())
                        .contains(&agent));
            if gone {
                departed.push(m.clone());
            }
        }
        for m in departed {
            self.gone(&m, now);
        }
    }
}
