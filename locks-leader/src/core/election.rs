//! One election step: how a member moves between states as its agent's status says
//! (`reassess`) and as other members announce themselves (`on_am_leader`), the grants it
//! holds, the terms it takes (`next_term`, `bump`, `take_term`), sees and accepts (`see`,
//! `recall`, and each transition that accepts one), becoming leader,
//! following and stepping down (see the module documentation of [`super`] for the states).
//! Every transition is made here, in the function the list below names; an input that calls
//! for one (a node down, a message, a view) is noticed where it arrives, and the function's
//! documentation says where. The facts a transition asks for are kept elsewhere, each by the
//! part that keeps them up to date: which nodes the first node has asked and whether they
//! cover the nodes up (`first_node.rs`: `widen`, `covers_alive`), what a majority of the group's
//! nodes is (`majority.rs`: `is_majority`), and whether a view received contradicts an
//! announcement (`society.rs`: `contradicted`).
//!
//! - **Candidate or follower → syncing**: its agent holds the election lock on every node the
//!   member considers up (`have_all`) and, in majority mode, on a majority of the group's nodes
//!   among them (`holds_majority`).
//! - **Syncing → leader** (`try_finish_sync`): it still holds them, holds the sync lock, and,
//!   in majority mode, its poll is done (`poll_done`: every member asked answered, and a view at
//!   least as new as the grant came from every node where it holds the lock). It takes the term
//!   `next_term`: at least the largest fencing version of its grants, above every term it has
//!   seen or accepted.
//! - **Syncing → candidate**: it lost one of the locks; its sync lock was not granted, or was
//!   granted when it no longer held the election locks (`on_sync_result`); or the sync took
//!   longer than `SYNC_TIMEOUT` (`check_sync_deadline`). It checks again after `RECHECK`.
//! - **Leader → candidate** (`step_down`): it lost one of the locks, or (majority mode) holds
//!   them on no majority of the nodes up, or its leases do not prove a majority
//!   (`check_leases`, which the shell calls before every input that could make it answer as
//!   leader). A node going down is one such input (`member.rs`, `node_down`).
//! - **Leader, granted again** somewhere: a new term; a larger term seen in a message's
//!   envelope: `bump` (`on_term_seen`).
//! - **Candidate → follower** (`on_am_leader`): another member announces its term, and this
//!   member neither leads nor syncs, sees a majority, has accepted no larger term, and has no
//!   view that contradicts the announcement.
//! - **Follower → candidate** (`leader_lost`): its leader is gone, says it leads no more, or
//!   no longer holds the election lock, or this member no longer sees a majority; it tells the
//!   candidates, and whoever leads answers.
//! - **Any state → candidate, for good** (`stand_down`): the member stops (`member.rs`,
//!   `stop_with`, which then takes no more steps).

use super::{
    Inner, MemberCore, MemberEffect, PeerMsg, Pending, RECHECK, SYNC_TIMEOUT, Stashed, State,
};
use crate::callbacks::Callbacks;
use crate::error::CallError;
use crate::term::{Role, Term};
use locks_core::{MemberId, NodeId};
use std::collections::VecDeque;
use std::time::Duration;
use tracing::debug;

impl<C: Callbacks> MemberCore<C> {
    /// Moves between states as the agent's status says (see the module documentation).
    pub(super) fn reassess(&mut self, now: Duration) {
        if self.s.stopped {
            return;
        }
        self.widen();
        let have_all = self.have_all() && self.holds_majority();
        match self.s.state.clone() {
            State::Candidate | State::Following { .. }
                if have_all && self.s.recheck_at.is_none() =>
            {
                let was_following = matches!(self.s.state, State::Following { .. });
                self.s.sync_gen += 1;
                let attempt = self.s.sync_gen;
                self.s.state = State::Syncing {
                    attempt,
                    deadline: now + SYNC_TIMEOUT,
                };
                if was_following {
                    // Holding the lock everywhere means the old leader does not any more.
                    self.fail_forwarded(None, CallError::LeaderDied);
                    self.publish();
                }
                let nodes = self.s.alive.iter().cloned().collect();
                debug!(member = %self.s.me, attempt, "have all election locks; syncing");
                self.s.out.push(MemberEffect::StartSync { attempt, nodes });
                self.extend_poll();
            }
            State::Syncing { attempt, .. } if !have_all => {
                debug!(member = %self.s.me, attempt, "lost an election lock while syncing");
                self.s.out.push(MemberEffect::EndSync { attempt });
                self.s.state = State::Candidate;
                self.s.sync_held = None;
                self.s.poll = None;
            }
            State::Syncing { .. } => self.try_finish_sync(),
            State::Leader { .. } if !have_all => self.step_down(),
            State::Leader { grants, .. } => {
                // The lock was granted again somewhere (a node came back and the request was
                // served before the member looked): a new leadership, whose grants followers
                // can check against their views. A node merely lost needs no new term.
                let current = self.grants();
                if current.iter().any(|g| !grants.contains(g)) {
                    debug!(member = %self.s.me, grants = ?current, "election lock granted again; new term");
                    let term = self.next_term(&current);
                    self.take_term(term, current);
                } else {
                    if current.len() < grants.len()
                        && let State::Leader { grants, .. } = &mut self.s.state
                    {
                        *grants = current;
                    }
                    // A member it was waiting for may be gone from its node.
                    self.raise_where_no_member();
                }
            }
            _ => {}
        }
    }

    /// The fencing version of the election lock on each node where the agent holds it.
    pub(super) fn grants(&self) -> Vec<(NodeId, u64)> {
        self.s
            .agent
            .as_ref()
            .and_then(|a| a.lock_result())
            .and_then(|r| r.locks.into_iter().find(|l| l.lock == self.s.lock))
            .map(|l| l.nodes.into_vec())
            .unwrap_or_default()
    }

    /// A term for a leadership with `grants`: at least the largest fencing version, above every
    /// term seen or accepted.
    pub(super) fn next_term(&self, grants: &[(NodeId, u64)]) -> Term {
        let top = grants.iter().map(|(_, v)| *v).max().unwrap_or(0);
        let floor = self
            .s
            .seen
            .iter()
            .chain(self.s.accepted.iter())
            .map(|t| t.epoch.saturating_add(1))
            .max()
            .unwrap_or(0);
        Term {
            epoch: top.max(floor),
            leader: self.s.me.clone(),
        }
    }

    pub(super) fn become_leader(&mut self, attempt: u64) {
        let grants = self.grants();
        let term = self.next_term(&grants);
        debug!(member = %self.s.me, %term, ?grants, "elected");
        self.take_term(term, grants);
        self.s.out.push(MemberEffect::EndSync { attempt });
        self.flush_pending();
    }

    /// A leader that learnt of a larger term than its own takes a larger one and announces it.
    pub(super) fn bump(&mut self) {
        let State::Leader { term, grants } = &self.s.state else {
            return;
        };
        let grants = grants.clone();
        let epoch = term
            .epoch
            .max(self.s.seen.as_ref().map_or(0, |t| t.epoch))
            .saturating_add(1);
        let term = Term {
            epoch,
            leader: self.s.me.clone(),
        };
        debug!(member = %self.s.me, %term, "a larger term was seen; taking a larger one");
        self.take_term(term, grants);
    }

    /// Leads with `term`: every member is new to it, `elected` says what to announce.
    pub(super) fn take_term(&mut self, term: Term, grants: Vec<(NodeId, u64)>) {
        self.s.accepted = Some(term.clone());
        self.s.see(Some(&term));
        self.s.state = State::Leader {
            term: term.clone(),
            grants,
        };
        self.s.acks.clear();
        self.s.raising.clear();
        for k in self.s.members.values_mut() {
            k.synced = false;
        }
        self.publish();
        self.raise_where_no_member();
        let e = self.invoke(|cb, ctx| cb.elected(None, ctx));
        self.elected_return(None, e);
    }

    /// Stops leading: says `Uncertain` to every member, refuses the forwarded calls it held
    /// back (their followers send them again), and tells the callbacks (`stepped_down`).
    pub(super) fn step_down(&mut self) {
        debug!(member = %self.s.me, "no longer holds its election locks; stepping down");
        self.s.state = State::Candidate;
        self.s.acks.clear();
        self.s.raising.clear();
        // Replies waiting for a majority: the write may or may not survive this leadership.
        self.fail_held(CallError::LeaderDied);
        self.publish();
        let members: Vec<MemberId> = self.s.members.keys().cloned().collect();
        for m in &members {
            if let Some(k) = self.s.members.get_mut(m) {
                k.synced = false;
            }
            self.s.send(m, PeerMsg::Uncertain);
        }
        let mut kept = VecDeque::new();
        for p in std::mem::take(&mut self.s.pending) {
            match p {
                Pending::Remote { from, call, .. } => {
                    let msg = PeerMsg::LeaderReply {
                        call,
                        result: Err(CallError::NotLeader),
                    };
                    self.s.send(&from, msg);
                }
                other => kept.push_back(other),
            }
        }
        self.s.pending = kept;
        let h = self.invoke(|cb, ctx| cb.stepped_down(ctx));
        self.handled(h);
        self.refuse_without_majority();
        self.undefer();
    }

    /// Whether the agent holds the lock on every node the member considers up (its request
    /// covers them all, and it holds every node it asked).
    pub(super) fn have_all(&self) -> bool {
        self.s
            .agent
            .as_ref()
            .is_some_and(|a| a.status().have_all_locks())
            && self.covers_alive()
    }
    /// Whether the election agent holds the lock on a majority of the group's nodes among
    /// those the member considers up (always in islands mode).
    pub(super) fn holds_majority(&self) -> bool {
        if !self.s.majority_mode() {
            return true;
        }
        let grants = self.grants();
        self.s.is_majority(
            grants
                .iter()
                .map(|(n, _)| n)
                .filter(|n| self.s.alive.contains(*n) && !self.s.unleased.contains(*n)),
        )
    }

    /// Takes over if the sync lock is held and the poll is complete.
    pub(super) fn try_finish_sync(&mut self) {
        let State::Syncing { attempt, .. } = self.s.state else {
            return;
        };
        // Candidates learnt since the poll started are asked too.
        self.extend_poll();
        if self.s.sync_held != Some(attempt) {
            return;
        }
        if self.poll_done() && self.have_all() && self.holds_majority() {
            self.s.sync_held = None;
            self.s.poll = None;
            self.become_leader(attempt);
        }
    }

    /// Whether the poll of the current attempt is complete: every member asked answered (or
    /// is gone), and a view at least as new as the grant came from every node where the lock
    /// is held (so every candidate queued there at the grant is known and asked).
    pub(super) fn poll_done(&self) -> bool {
        if !self.s.majority_mode() {
            return true;
        }
        let Some(poll) = &self.s.poll else {
            return false;
        };
        let views_caught_up = self
            .grants()
            .iter()
            .all(|(n, granted)| self.s.views.get(n).is_some_and(|v| v.version >= *granted));
        views_caught_up
            && poll
                .asked
                .iter()
                .all(|m| poll.answered.contains(m) || !self.s.members.contains_key(m))
    }

    /// Checks the leader's claim against the leases (`lease_valid(node)`: whether this node's
    /// lease on `node` is still valid; true for its own node): a majority-mode leader that
    /// cannot prove a majority steps down. The shell calls it before every input that could
    /// make the member answer as leader, so that no answer rests on an expired lease.
    pub fn check_leases(
        &mut self,
        lease_valid: impl Fn(&NodeId) -> bool,
        now: Duration,
    ) -> Vec<MemberEffect<C>> {
        let _ = now;
        if self.s.stopped || !self.s.majority_mode() || !self.s.is_leader() {
            return Vec::new();
        }
        let State::Leader { grants, .. } = &self.s.state else {
            return Vec::new();
        };
        let proven: Vec<&NodeId> = grants
            .iter()
            .map(|(n, _)| n)
            .filter(|n| self.s.alive.contains(*n) && lease_valid(n))
            .collect();
        if !self.s.is_majority(proven) {
            debug!(member = %self.s.me, "leases do not prove a majority; stepping down");
            self.s.unleased = grants
                .iter()
                .map(|(n, _)| n)
                .filter(|n| !lease_valid(n))
                .cloned()
                .collect();
            self.step_down();
        }
        self.take()
    }

    /// Another member announces it leads with `term`: followed unless this member leads or
    /// syncs itself (the lock decides between claimants), sees no majority (majority mode: the
    /// announcement is kept aside until it does), has accepted a larger term (refused with
    /// `Nack`), or a view says the sender lost the lock since its grant (kept aside until the
    /// views agree). A member that follows accepts the term (`Accepted`, which the leader
    /// counts towards establishing it) and publishes its leader.
    pub(super) fn on_am_leader(
        &mut self,
        from: &MemberId,
        term: Term,
        grants: Vec<(NodeId, u64)>,
        msg: C::Broadcast,
        now: Duration,
    ) {
        let _ = now;
        if &term.leader != from {
            debug!(member = %self.s.me, %from, %term, "am_leader naming another leader ignored");
            return;
        }
        if matches!(self.s.state, State::Leader { .. } | State::Syncing { .. }) {
            // Two claimants: the lock decides, and the loser steps down.
            debug!(member = %self.s.me, %from, %term, "am_leader while leading or syncing ignored");
            return;
        }
        if !self.s.sees_majority() {
            // Majority mode: no leader can be on this member's side of a partition, as far as
            // it knows; the sender's message may have come before the node-up events of a
            // heal, and a leader that stays put does not announce itself again: keep it until
            // a majority is in sight (see `retry_stash`).
            debug!(member = %self.s.me, %from, %term, "am_leader without a majority in sight; kept aside");
            return self.stash(from, term, grants, msg);
        }
        if self.s.accepted.as_ref().is_some_and(|a| &term < a) {
            debug!(member = %self.s.me, %from, %term, "am_leader with an old term refused");
            self.s.send(from, PeerMsg::Nack);
            return;
        }
        if self.contradicted(from, &grants) {
            // A view says the sender lost the lock on some node since its grant: it is stale,
            // or that node is already down for it and not yet for this member. Keep it until
            // the views no longer contradict it (see `retry_stash`).
            debug!(member = %self.s.me, %from, %term, "am_leader contradicted by a view; kept aside");
            return self.stash(from, term, grants, msg);
        }
        self.s.stash = None;
        let previous = self.s.term().map(|t| t.leader.clone());
        let same = matches!(&self.s.state, State::Following { term: t, .. } if t == &term);
        if previous.as_ref() != Some(from) {
            self.fail_forwarded(None, CallError::LeaderDied);
        }
        self.s.accepted = Some(term.clone());
        self.s.see(Some(&term));
        self.s.state = State::Following {
            term: term.clone(),
            grants,
        };
        // The leader counts this acceptance towards establishing its term (majority mode).
        self.s.send(from, PeerMsg::Accepted { term: term.clone() });
        if !same {
            debug!(member = %self.s.me, %term, "following");
            self.publish();
        }
        let h = self.invoke(|cb, ctx| cb.surrendered(msg, ctx));
        self.handled(h);
        self.flush_pending();
    }

    /// Keeps an announcement aside (see `retry_stash`).
    fn stash(
        &mut self,
        from: &MemberId,
        term: Term,
        grants: Vec<(NodeId, u64)>,
        msg: C::Broadcast,
    ) {
        self.s.stash = Some(Stashed {
            from: from.clone(),
            term,
            grants,
            msg,
        });
    }

    /// A message whose envelope shows a term larger than this leader's own (`known`), other
    /// than another member's claim to lead, makes the leader take a larger one (`bump`).
    pub(super) fn on_term_seen(&mut self, known: Option<&Term>, claim: bool) {
        if !claim
            && let State::Leader { term, .. } = &self.s.state
            && known.is_some_and(|k| k > term)
        {
            self.bump();
        }
    }

    /// Follower → candidate: its leader is lost. The member says so to the candidates, and
    /// whoever leads answers. Called when the leader's member is gone, says it follows nobody,
    /// or a view shows it no longer holds the election lock (`society.rs`); when the leader's
    /// node went down or this member no longer sees a majority (`member.rs`, `node_down`); and
    /// when the leader answered a forwarded call that it does not lead (`calls.rs`).
    pub(super) fn leader_lost(&mut self) {
        let State::Following { term, .. } = &self.s.state else {
            return;
        };
        debug!(member = %self.s.me, leader = %term.leader, "leader lost");
        self.s.state = State::Candidate;
        self.publish();
        self.fail_forwarded(None, CallError::LeaderDied);
        for m in self.s.with_role(Role::Candidate) {
            if m != self.s.me {
                self.s.send(&m, PeerMsg::Uncertain);
            }
        }
    }

    /// The sync lock of the current attempt was granted (`ok`) or not. Syncing → leader once
    /// the member still holds the election locks (and, in majority mode, its poll is done:
    /// until then the sync lock is kept); otherwise syncing → candidate, checked again after
    /// [`RECHECK`].
    pub(super) fn on_sync_result(&mut self, attempt: u64, ok: bool, now: Duration) {
        if ok && self.have_all() && self.holds_majority() {
            self.s.sync_held = Some(attempt);
            self.try_finish_sync();
        } else {
            if ok {
                self.s.out.push(MemberEffect::EndSync { attempt });
            }
            debug!(member = %self.s.me, attempt, ok, "sync failed; checking again shortly");
            self.s.state = State::Candidate;
            self.s.recheck_at = Some(now + RECHECK);
        }
    }

    /// Syncing → candidate when the attempt's deadline ([`SYNC_TIMEOUT`] after it began) has
    /// passed; checked again after [`RECHECK`].
    pub(super) fn check_sync_deadline(&mut self, now: Duration) {
        if let State::Syncing { attempt, deadline } = self.s.state
            && deadline <= now
        {
            debug!(member = %self.s.me, attempt, "sync timed out");
            self.s.out.push(MemberEffect::EndSync { attempt });
            self.s.state = State::Candidate;
            self.s.recheck_at = Some(now + RECHECK);
        }
    }

    /// Any state → candidate as the member stops (for good: a stopped member takes no more
    /// steps); a sync under way is ended.
    pub(super) fn stand_down(&mut self) {
        if let State::Syncing { attempt, .. } = self.s.state {
            self.s.out.push(MemberEffect::EndSync { attempt });
        }
        self.s.state = State::Candidate;
        self.publish();
    }
}

/// The terms a member has seen and accepted, which every term it takes exceeds.
impl<C: Callbacks> Inner<C> {
    /// Notes a term seen in a message.
    pub(crate) fn see(&mut self, term: Option<&Term>) {
        if let Some(t) = term
            && self.seen.as_ref().is_none_or(|s| t > s)
        {
            self.seen = Some(t.clone());
        }
    }

    /// A term accepted by this group's member on this node before (the data directory's):
    /// counts as accepted unless a larger one already is.
    pub(crate) fn recall(&mut self, term: Term) {
        if self.accepted.as_ref().is_none_or(|a| &term > a) {
            self.accepted = Some(term);
        }
    }
}
