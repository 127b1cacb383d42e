//! Majority mode: who may lead and for how long (see the crate documentation, "Majority and
//! islands", for what it promises and why); the term a leader takes is taken with the rest of
//! the election step, in `election.rs`.
//!
//! This module owns the group's node set, the count of a majority against it, the poll a
//! candidate makes before it takes a term (when the poll is done and when the member takes
//! over is decided with the rest of the election step, in `election.rs`), the acceptance of a
//! leader's term by the other members, the leader's proof, and what the member publishes as its
//! leader.
//!
//! Invariants:
//! - `group` only grows: the configured nodes, this member's node, and the home node of every
//!   member (candidate or worker) ever learnt of (from a view of the lock or a message): every
//!   node with a member has a lock server that holds the election lock.
//!   A node going down never removes it, so an island never counts a majority of fewer nodes
//!   than the group had.
//! - In majority mode a member enters `Syncing` only while it holds the election lock on a
//!   majority of `group`, becomes `Leader` only once every member known on those nodes has
//!   answered its poll, and counts as leader ([`Inner::established`]) only once a majority of
//!   `group` (its own node included) accepted its term: a node accepts it when a member homed
//!   there did, or, where the leader knows no member, when the node's lock server raised its
//!   versions to the term while the leader held the lock there.
//! - A leader that no longer holds the lock on a majority of `group` among the nodes it
//!   considers up, or whose leases on them do not prove a majority, steps down before its
//!   next answer.
//!
//! **Nodes without a member.** The election lock decides who leads: a group configured on
//! nodes `a`, `b`, `c` whose one candidate runs on `a` leads once it holds the lock on two of
//! them, whether or not members run there (etcd's election, where a campaign leads as soon as
//! its key is the oldest, polls nobody either). What a member's acceptance adds is for the
//! terms (crate documentation, "Terms as fencing versions"): the next leader's majority shares a
//! node with the ones that accepted, and learns the term from it. A node where no member runs
//! has nobody to accept or remember the term, so its lock server stands in: the leader asks it
//! (`ServerRequest::RaiseVersions`, in its agent's name) to raise its versions to the term's
//! epoch, and it answers (`Raised`) only if the agent still holds the election lock there,
//! checked after the raise. Whoever is granted the lock there next gets a larger version, and
//! a term is at least its leader's grant versions (`next_term`), so the next leader whose
//! majority includes that node takes a larger term although no member it polls knows this one.
//! Counting such a node without the raise would not do: each node's versions start from its
//! own start time, so a leader on a node started later than the others (or with a clock ahead)
//! takes a term above every version they hand out, and a next leader elected on them alone
//! would take a smaller one. A member that appears there later finds the leader as any
//! newcomer does (on the first node's and its own node's queue) and accepts its term; one that
//! appears after the leader is gone is a candidate like any other, and the raised versions
//! keep the next term above. Only nodes without a known member are asked: a raise is as good
//! as an acceptance anywhere, but where a member runs its `Accepted` comes anyway.

use super::{Inner, MemberCore, MemberEffect, PeerMsg, Pending, Poll, State};
use crate::callbacks::Callbacks;
use crate::error::CallError;
use crate::options::ElectionMode;
use crate::term::Term;
use locks_core::proto::ServerRequest;
use locks_core::{MemberId, NodeId};
use std::collections::BTreeSet;
use tracing::debug;

/// What a leader's claim rests on, for the shell to check against its leases at the moment
/// it answers: the claim holds while the leases on at least `needed` of `nodes` are valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderProof {
    /// The leadership.
    pub term: Term,
    /// The group's nodes on which the leader holds the election lock (its own included).
    pub nodes: Vec<NodeId>,
    /// How many of them make a majority of the group's nodes (0 in islands mode: nothing to
    /// prove).
    pub needed: usize,
}

impl LeaderProof {
    /// Whether the claim holds, given which nodes' leases are valid.
    pub fn holds(&self, lease_valid: impl Fn(&NodeId) -> bool) -> bool {
        self.nodes.iter().filter(|n| lease_valid(n)).count() >= self.needed
    }
}

impl<C: Callbacks> Inner<C> {
    pub(crate) fn majority_mode(&self) -> bool {
        self.mode == ElectionMode::Majority
    }

    /// How many of the group's nodes make a majority.
    pub(crate) fn needed(&self) -> usize {
        self.group.len() / 2 + 1
    }

    /// Whether `nodes` include a majority of the group's nodes.
    pub(crate) fn is_majority<'a>(&self, nodes: impl IntoIterator<Item = &'a NodeId>) -> bool {
        let inside: BTreeSet<&NodeId> = nodes
            .into_iter()
            .filter(|n| self.group.contains(*n))
            .collect();
        inside.len() >= self.needed()
    }

    /// Whether this member leads and may answer as leader: in islands mode whenever it is in
    /// the `Leader` state; in majority mode once a majority of the group's nodes accepted its
    /// term (a member's `Accepted`, or a node's raised versions: see the module documentation).
    pub(crate) fn established(&self) -> bool {
        if !self.is_leader() {
            return false;
        }
        !self.majority_mode()
            || self.is_majority(self.acks.iter().chain(std::iter::once(self.me.node())))
    }

    /// The leader as the member tells the world: its own term once established, the leader it
    /// follows, or none.
    pub(crate) fn public_term(&self) -> Option<Term> {
        match &self.state {
            State::Leader { term, .. } if self.established() => Some(term.clone()),
            State::Following { term, .. } => Some(term.clone()),
            _ => None,
        }
    }

    /// Whether the nodes this member considers up are a majority of the group's (always in
    /// islands mode, and while the group's nodes are not known yet).
    pub(crate) fn sees_majority(&self) -> bool {
        !self.majority_mode() || self.group.is_empty() || self.is_majority(self.alive.iter())
    }

    /// Notes the home node of a member (candidate or worker) in the group's nodes: its lock
    /// server holds the election lock like any other.
    pub(crate) fn note_member(&mut self, m: &MemberId) {
        if self.group.insert(m.node().clone()) {
            debug!(member = %self.me, node = %m.node(), size = self.group.len(), "group node learnt");
        }
    }
}

impl<C: Callbacks> MemberCore<C> {
    /// What this member's leadership rests on, while it is established: for the shell to
    /// check before it answers as leader. `None` when it does not lead.
    pub fn leader_proof(&self) -> Option<LeaderProof> {
        let State::Leader { term, grants } = &self.s.state else {
            return None;
        };
        if !self.s.established() {
            return None;
        }
        if !self.s.majority_mode() {
            return Some(LeaderProof {
                term: term.clone(),
                nodes: Vec::new(),
                needed: 0,
            });
        }
        let nodes = grants
            .iter()
            .map(|(n, _)| n)
            .filter(|n| self.s.group.contains(*n) && self.s.alive.contains(*n))
            .cloned()
            .collect();
        Some(LeaderProof {
            term: term.clone(),
            nodes,
            needed: self.s.needed(),
        })
    }

    /// Publishes the leader the member believes in, if it changed; a leader whose term just got
    /// established hands on the calls it held back.
    pub(super) fn publish(&mut self) {
        let now = self.s.public_term();
        if now == self.s.published {
            return;
        }
        self.s.published = now.clone();
        self.s.out.push(MemberEffect::LeaderChanged(now));
        if self.s.established() {
            self.flush_pending();
        }
    }

    /// Starts (or extends) the poll of the current sync attempt: asks every member known on
    /// the nodes where the election lock is held for the largest term it accepted.
    pub(super) fn extend_poll(&mut self) {
        let State::Syncing { attempt, .. } = self.s.state else {
            return;
        };
        if !self.s.majority_mode() {
            return;
        }
        let nodes: BTreeSet<NodeId> = self.grants().into_iter().map(|(n, _)| n).collect();
        let poll = self.s.poll.get_or_insert_with(|| Poll {
            attempt,
            ..Poll::default()
        });
        if poll.attempt != attempt {
            *poll = Poll {
                attempt,
                ..Poll::default()
            };
        }
        let ask: Vec<MemberId> = self
            .s
            .members
            .keys()
            .filter(|m| nodes.contains(m.node()) && !poll.asked.contains(*m))
            .cloned()
            .collect();
        for m in ask {
            if let Some(p) = &mut self.s.poll {
                p.asked.insert(m.clone());
            }
            self.s.send(&m, PeerMsg::Poll { attempt });
        }
    }

    /// A candidate about to lead asks for the largest term this member accepted (carried by
    /// the envelope of the answer).
    pub(super) fn on_poll(&mut self, from: &MemberId, attempt: u64) {
        self.s.send(from, PeerMsg::Polled { attempt });
    }

    pub(super) fn on_polled(&mut self, from: &MemberId, attempt: u64) {
        if let Some(p) = &mut self.s.poll
            && p.attempt == attempt
        {
            p.answered.insert(from.clone());
        }
        self.try_finish_sync();
    }

    /// A member (candidate or worker) accepted this leader's term: its node counts towards
    /// establishing it.
    pub(super) fn on_accepted(&mut self, from: &MemberId, term: &Term) {
        if let State::Leader { term: mine, .. } = &self.s.state
            && mine == term
            && self.s.members.contains_key(from)
        {
            self.s.acks.insert(from.node().clone());
        }
    }

    /// Asks the lock server of every node where this leader holds the election lock and knows
    /// no member (its own node aside) to raise its versions to the term: no member there can
    /// accept it, and the raise stands in for an acceptance (see the module documentation).
    pub(super) fn raise_where_no_member(&mut self) {
        let State::Leader { term, grants } = &self.s.state else {
            return;
        };
        if !self.s.majority_mode() {
            return;
        }
        // Called at every settle of a leader: nothing more than a look at its grants once
        // every node accepted or was asked.
        let open: Vec<&NodeId> = grants
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                *n != self.s.me.node() && !self.s.acks.contains(*n) && !self.s.raising.contains(*n)
            })
            .collect();
        if open.is_empty() {
            return;
        }
        let homes: BTreeSet<&NodeId> = self.s.members.keys().map(|m| m.node()).collect();
        let ask: Vec<NodeId> = open
            .into_iter()
            .filter(|n| !homes.contains(n))
            .cloned()
            .collect();
        let floor = term.epoch;
        for node in ask {
            debug!(member = %self.s.me, %node, floor, "no member known there; raising its versions to the term");
            self.s.raising.insert(node.clone());
            let request = ServerRequest::RaiseVersions {
                agent: self.s.agent_id.clone(),
                lock: self.s.lock.clone(),
                floor,
            };
            self.s.out.push(MemberEffect::ToServer { node, request });
        }
    }

    /// The lock server of `node` raised its versions to `floor` while this member's agent held
    /// the election lock there: every later grant there has a version above `floor`, so a
    /// leader's term that is at most `floor` counts as accepted on `node`.
    pub(super) fn on_raised(&mut self, node: &NodeId, floor: u64) {
        if let State::Leader { term, grants } = &self.s.state
            && term.epoch <= floor
            && grants.iter().any(|(n, _)| n == node)
        {
            self.s.acks.insert(node.clone());
        }
    }

    /// In majority mode, a member that sees no majority of the group's nodes refuses the leader
    /// calls it holds (`NoMajority`): no leader can appear on its side.
    pub(super) fn refuse_without_majority(&mut self) {
        if self.s.sees_majority() || self.s.is_leader() {
            return;
        }
        let error = self.no_majority();
        let mut kept = std::collections::VecDeque::new();
        for p in std::mem::take(&mut self.s.pending) {
            match p {
                Pending::Call { call, .. } => self.s.out.push(MemberEffect::Reply {
                    call,
                    result: Err(error.clone()),
                }),
                other => kept.push_back(other),
            }
        }
        self.s.pending = kept;
    }

    pub(super) fn no_majority(&self) -> CallError {
        CallError::NoMajority {
            up: self.s.alive.intersection(&self.s.group).count(),
            group: self.s.group.len(),
        }
    }
}
