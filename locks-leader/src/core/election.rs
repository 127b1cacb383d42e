//! One election step: how a member moves between states as its agent's status says
//! (`reassess`), the grants it holds, the terms it takes (`next_term`, `bump`, `take_term`),
//! becoming leader and stepping down (see the module documentation of [`super`]).

use super::{MemberCore, MemberEffect, PeerMsg, Pending, SYNC_TIMEOUT, State};
use crate::callbacks::Callbacks;
use crate::error::CallError;
use crate::term::Term;
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
                } else if current.len() < grants.len()
                    && let State::Leader { grants, .. } = &mut self.s.state
                {
                    *grants = current;
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
        for k in self.s.members.values_mut() {
            k.synced = false;
        }
        self.publish();
        let e = self.invoke(|cb, ctx| cb.elected(None, ctx));
        self.elected_return(None, e);
    }

    /// Stops leading: says `Uncertain` to every member, refuses the forwarded calls it held
    /// back (their followers send them again), and tells the callbacks (`stepped_down`).
    pub(super) fn step_down(&mut self) {
        debug!(member = %self.s.me, "no longer holds its election locks; stepping down");
        self.s.state = State::Candidate;
        self.s.acks.clear();
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
}
