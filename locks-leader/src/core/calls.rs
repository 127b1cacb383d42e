//! Calls, casts and broadcasts, and what the callbacks' returns ask for.

use super::{Forwarded, LocalWork, MemberCore, MemberEffect, PeerMsg, Pending, State};
use crate::callbacks::Action;
use crate::callbacks::{CallId, CallReturn, Callbacks, Caller, CallerKind, Handled};
use crate::error::CallError;
use locks_core::MemberId;
use std::time::Duration;
use tracing::{debug, warn};

impl<C: Callbacks> MemberCore<C> {
    /// A leader call from a client: handled here if this member leads, forwarded to the leader
    /// if it follows one, held back otherwise. Answered by `deadline` at the latest.
    pub fn leader_call(
        &mut self,
        call: CallId,
        req: C::Call,
        deadline: Duration,
        now: Duration,
    ) -> Vec<MemberEffect<C>> {
        if self.s.stopped {
            self.s.out.push(MemberEffect::Reply {
                call,
                result: Err(CallError::Stopped("stopped".into())),
            });
        } else if deadline <= now {
            self.s.out.push(MemberEffect::Reply {
                call,
                result: Err(CallError::Timeout),
            });
        } else {
            self.route_call(call, req, deadline);
        }
        self.take()
    }

    /// A leader cast from a client (routed like a leader call; no answer, no guarantee).
    pub fn leader_cast(&mut self, msg: C::Cast, now: Duration) -> Vec<MemberEffect<C>> {
        let _ = now;
        if !self.s.stopped {
            self.route_cast(msg);
        }
        self.take()
    }

    /// A call from a client, handled here in every state.
    pub fn call(&mut self, call: CallId, req: C::Call, now: Duration) -> Vec<MemberEffect<C>> {
        let _ = now;
        if self.s.stopped {
            self.s.out.push(MemberEffect::Reply {
                call,
                result: Err(CallError::Stopped("stopped".into())),
            });
        } else {
            let caller = Caller(CallerKind::Local(call));
            let r = self.invoke(|cb, ctx| cb.handle_call(req, caller.clone(), ctx));
            self.call_return(caller, r, None);
        }
        self.take()
    }

    /// A cast from a client, handled here in every state.
    pub fn cast(&mut self, msg: C::Cast, now: Duration) -> Vec<MemberEffect<C>> {
        let _ = now;
        if !self.s.stopped {
            let h = self.invoke(|cb, ctx| cb.handle_cast(msg, ctx));
            self.handled(h);
        }
        self.take()
    }

    /// A local message for `handle_info`.
    pub fn info(&mut self, msg: C::Info, now: Duration) -> Vec<MemberEffect<C>> {
        let _ = now;
        if !self.s.stopped {
            let h = self.invoke(|cb, ctx| cb.handle_info(msg, ctx));
            self.handled(h);
        }
        self.take()
    }

    /// `from_leader(msg)` to every synced member; only a leader may.
    pub fn broadcast(
        &mut self,
        msg: C::Broadcast,
        now: Duration,
    ) -> Result<Vec<MemberEffect<C>>, CallError> {
        let _ = now;
        if !self.s.is_leader() || self.s.stopped {
            return Err(CallError::NotLeader);
        }
        self.broadcast_synced(None, msg);
        Ok(self.take())
    }

    pub(super) fn route_call(&mut self, call: CallId, req: C::Call, deadline: Duration) {
        match &self.s.state {
            State::Leader { .. } if !self.s.established() => {
                // Majority mode: not before the term is accepted by a majority.
                self.s.pending.push_back(Pending::Call {
                    call,
                    req,
                    deadline,
                });
            }
            State::Leader { .. } => {
                let caller = Caller(CallerKind::Local(call));
                let r = self.invoke(|cb, ctx| cb.handle_leader_call(req, caller.clone(), ctx));
                self.call_return(caller, r, Some(deadline));
            }
            State::Following { term, .. } => {
                let leader = term.leader.clone();
                self.s.forwarded.insert(
                    call,
                    Forwarded {
                        leader: leader.clone(),
                        req: req.clone(),
                        deadline,
                    },
                );
                self.s.send(&leader, PeerMsg::LeaderCall { call, req });
            }
            State::Candidate | State::Syncing { .. } if !self.s.sees_majority() => {
                let result = Err(self.no_majority());
                self.s.out.push(MemberEffect::Reply { call, result });
            }
            State::Candidate | State::Syncing { .. } => {
                self.s.pending.push_back(Pending::Call {
                    call,
                    req,
                    deadline,
                });
            }
        }
    }

    pub(super) fn route_cast(&mut self, msg: C::Cast) {
        match &self.s.state {
            State::Leader { .. } if !self.s.established() => {
                self.s.pending.push_back(Pending::Cast(msg));
            }
            State::Leader { .. } => {
                let h = self.invoke(|cb, ctx| cb.handle_leader_cast(msg, ctx));
                self.handled(h);
            }
            State::Following { term, .. } => {
                let leader = term.leader.clone();
                self.s.send(&leader, PeerMsg::LeaderCast { msg });
            }
            State::Candidate | State::Syncing { .. } => {
                self.s.pending.push_back(Pending::Cast(msg));
            }
        }
    }

    /// Sends on the leader calls and casts held back, now that a leader is known.
    pub(super) fn flush_pending(&mut self) {
        let leads = self.s.established();
        if !leads && !matches!(self.s.state, State::Following { .. }) {
            return;
        }
        let pending = std::mem::take(&mut self.s.pending);
        for p in pending {
            match p {
                Pending::Call {
                    call,
                    req,
                    deadline,
                } => self.route_call(call, req, deadline),
                Pending::Cast(msg) => self.route_cast(msg),
                Pending::Remote { from, call, req } => self.on_leader_call(&from, call, req),
            }
        }
    }

    pub(super) fn on_leader_call(&mut self, from: &MemberId, call: CallId, req: C::Call) {
        if self.s.is_leader() && !self.s.established() {
            // Majority mode: held until the term is accepted by a majority, or refused with
            // `NotLeader` if this member steps down first.
            self.s.pending.push_back(Pending::Remote {
                from: from.clone(),
                call,
                req,
            });
        } else if self.s.is_leader() {
            let caller = Caller(CallerKind::Remote {
                member: from.clone(),
                call,
            });
            let r = self.invoke(|cb, ctx| cb.handle_leader_call(req, caller.clone(), ctx));
            self.call_return(caller, r, None);
        } else {
            let msg = PeerMsg::LeaderReply {
                call,
                result: Err(CallError::NotLeader),
            };
            self.s.send(from, msg);
        }
    }

    pub(super) fn on_leader_reply(
        &mut self,
        from: &MemberId,
        call: CallId,
        result: Result<C::Reply, CallError>,
        now: Duration,
    ) {
        let _ = now;
        let Some(f) = self.s.forwarded.remove(&call) else {
            return;
        };
        match result {
            Err(CallError::NotLeader) => {
                // Not handled: send it again to whoever leads. The member that answered does
                // not lead, whatever this member believed.
                if matches!(&self.s.state, State::Following { term, .. } if &term.leader == from) {
                    debug!(member = %self.s.me, "the leader answered that it does not lead");
                    self.leader_lost();
                }
                self.s.pending.push_front(Pending::Call {
                    call,
                    req: f.req,
                    deadline: f.deadline,
                });
                self.flush_pending();
            }
            result => self.s.out.push(MemberEffect::Reply { call, result }),
        }
    }

    /// Fails the forwarded calls (to `leader`, or all) with `error`.
    pub(super) fn fail_forwarded(&mut self, leader: Option<&MemberId>, error: CallError) {
        let failed: Vec<CallId> = self
            .s
            .forwarded
            .iter()
            .filter(|(_, f)| leader.is_none_or(|l| &f.leader == l))
            .map(|(c, _)| *c)
            .collect();
        for call in failed {
            self.s.forwarded.remove(&call);
            self.s.out.push(MemberEffect::Reply {
                call,
                result: Err(error.clone()),
            });
        }
    }

    pub(super) fn fail_all_calls(&mut self, error: CallError) {
        self.fail_forwarded(None, error.clone());
        for p in std::mem::take(&mut self.s.pending) {
            if let Pending::Call { call, .. } = p {
                self.s.out.push(MemberEffect::Reply {
                    call,
                    result: Err(error.clone()),
                });
            }
        }
    }

    pub(super) fn expire_calls(&mut self, now: Duration) {
        self.expire_held(now);
        let mut kept = std::collections::VecDeque::new();
        for p in std::mem::take(&mut self.s.pending) {
            match p {
                Pending::Call { call, deadline, .. } if deadline <= now => {
                    self.s.out.push(MemberEffect::Reply {
                        call,
                        result: Err(CallError::Timeout),
                    });
                }
                other => kept.push_back(other),
            }
        }
        self.s.pending = kept;
        let expired: Vec<CallId> = self
            .s
            .forwarded
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(c, _)| *c)
            .collect();
        for call in expired {
            self.s.forwarded.remove(&call);
            self.s.out.push(MemberEffect::Reply {
                call,
                result: Err(CallError::Timeout),
            });
        }
    }

    pub(super) fn reply_to(&mut self, caller: &Caller, reply: C::Reply) {
        match &caller.0 {
            CallerKind::Local(call) => self.s.out.push(MemberEffect::Reply {
                call: *call,
                result: Ok(reply),
            }),
            CallerKind::Remote { member, call } => {
                let msg = PeerMsg::LeaderReply {
                    call: *call,
                    result: Ok(reply),
                };
                self.s.send(member, msg);
            }
        }
    }

    /// `from_leader(msg)` to the synced members (or to `to`), if this member leads.
    pub(super) fn broadcast_synced(&mut self, to: Option<Vec<MemberId>>, msg: C::Broadcast) {
        self.broadcast_with(to, msg, None);
    }

    /// [`MemberCore::broadcast_synced`], numbered `ack` for an acknowledgement (`confirm`).
    pub(super) fn broadcast_with(
        &mut self,
        to: Option<Vec<MemberId>>,
        msg: C::Broadcast,
        ack: Option<u64>,
    ) {
        let State::Leader { term, .. } = &self.s.state else {
            warn!(member = %self.s.me, "a broadcast by a member that does not lead was dropped");
            return;
        };
        let term = term.clone();
        let targets: Vec<MemberId> = match to {
            Some(list) => list,
            None => self
                .s
                .members
                .iter()
                .filter(|(_, k)| k.synced)
                .map(|(m, _)| m.clone())
                .collect(),
        };
        for m in targets {
            let msg = PeerMsg::FromLeader {
                term: term.clone(),
                msg: msg.clone(),
                ack,
            };
            self.s.send(&m, msg);
        }
    }

    pub(super) fn handled(&mut self, h: Handled<C::Broadcast>) {
        match h {
            Handled::Ok => {}
            Handled::Broadcast(b) => self.broadcast_synced(None, b),
            Handled::Stop(reason) => self.stop_with(reason),
        }
    }

    /// Carries out a call's return; `deadline` is a client call's (a held reply fails then).
    pub(super) fn call_return(
        &mut self,
        caller: Caller,
        r: CallReturn<C::Reply, C::Broadcast>,
        deadline: Option<Duration>,
    ) {
        match r {
            CallReturn::Reply(reply) => self.reply_to(&caller, reply),
            CallReturn::ReplyBroadcast(reply, b) => {
                // The broadcast goes first: a follower that forwarded the call applies it
                // before its caller sees the reply (one channel per pair of members). In
                // majority mode the reply also waits for a majority to apply it (`confirm`).
                self.reply_broadcast(caller, reply, b, deadline);
            }
            CallReturn::NoReply => {}
            CallReturn::Stop { reason, reply } => {
                if let Some(reply) = reply {
                    self.reply_to(&caller, reply);
                }
                self.stop_with(reason);
            }
        }
    }

    pub(super) fn apply_actions(&mut self, actions: Vec<Action<C>>) {
        for action in actions {
            match action {
                Action::Reply(caller, reply) => self.reply_to(&caller, reply),
                Action::Broadcast(to, msg) => self.broadcast_synced(to, msg),
                Action::LeaderCast(msg) => {
                    if self.s.established() {
                        self.s.local.push_back(LocalWork::LeaderCast(msg));
                    } else {
                        self.route_cast(msg);
                    }
                }
            }
        }
    }

    /// Runs the callbacks asked for by earlier callbacks (a leader's cast to itself).
    pub(super) fn drain_local(&mut self) {
        while let Some(work) = self.s.local.pop_front() {
            if self.s.stopped {
                self.s.local.clear();
                break;
            }
            match work {
                LocalWork::LeaderCast(msg) => self.route_cast(msg),
            }
        }
    }
}
