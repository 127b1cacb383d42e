//! Confirmed broadcasts: in majority mode, the reply of a leader call that returned
//! [`CallReturn::ReplyBroadcast`] waits until members on a majority of the group's nodes have
//! applied the broadcast (the leader's own node counts: it applied it first).
//!
//! Why: a leader that replied as soon as it had *sent* the broadcast could die a moment later
//! with the broadcast still in flight, and the write its caller was told about would be on no
//! surviving member. Once a majority of the group's nodes has it, a single crash cannot take
//! it away: whoever leads next is elected by a majority, and at least one member there has
//! the write to give it (gdict's `surrendered` merges such entries back).
//!
//! How: such a broadcast goes out as `FromLeader` with `ack: Some(seq)`, `seq` growing with
//! every confirmed broadcast of this member; a follower answers `Applied { term, seq }` after
//! `from_leader` ran. Channels between two members are FIFO, so an `Applied` for `seq` covers
//! every earlier numbered broadcast to that member too: the leader keeps one number per member.
//! Only `FromLeader` acknowledgements count: a member that was sent `AmLeader` instead got
//! whatever `elected` chose to send, which need not include the write.
//!
//! Invariants: held replies are answered in the order of their numbers; a leader that steps
//! down or stops fails them (`LeaderDied`, `Stopped`: the write may or may not survive); a
//! client's held call still fails at its deadline; at most [`MAX_HELD`] replies are held (the
//! oldest fails with `Timeout` beyond that). In islands mode nothing is held: a confirmed write
//! there can be lost at a heal anyway (see `GroupOptions::islands`).

use super::{MemberCore, MemberEffect, PeerMsg};
use crate::callbacks::{Callbacks, Caller, CallerKind};
use crate::error::CallError;
use locks_core::{MemberId, NodeId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// How many replies a leader holds at most while it waits for acknowledgements.
pub(crate) const MAX_HELD: usize = 10_000;

/// A reply waiting for its broadcast to reach a majority.
pub(crate) struct Held<C: Callbacks> {
    seq: u64,
    caller: Caller,
    reply: C::Reply,
    /// A client's call deadline (a forwarded call's follower keeps its own).
    deadline: Option<Duration>,
}

/// The leader's side of confirmed broadcasts.
pub(crate) struct Confirmations<C: Callbacks> {
    /// The number of the last confirmed broadcast (never reused by this member).
    last: u64,
    /// The largest number each member said it applied, in the current leadership.
    applied: BTreeMap<MemberId, u64>,
    held: VecDeque<Held<C>>,
}

impl<C: Callbacks> Default for Confirmations<C> {
    fn default() -> Self {
        Confirmations {
            last: 0,
            applied: BTreeMap::new(),
            held: VecDeque::new(),
        }
    }
}

impl<C: Callbacks> Confirmations<C> {
    /// The earliest deadline of a held client call.
    pub(crate) fn next_deadline(&self) -> Option<Duration> {
        self.held.iter().filter_map(|h| h.deadline).min()
    }

    /// How many replies are held.
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }
}

impl<C: Callbacks> MemberCore<C> {
    /// `ReplyBroadcast` by a leader: broadcast, then reply, at once in islands mode, once
    /// a majority applied it in majority mode.
    pub(super) fn reply_broadcast(
        &mut self,
        caller: Caller,
        reply: C::Reply,
        b: C::Broadcast,
        deadline: Option<Duration>,
    ) {
        if !self.s.majority_mode() || !self.s.is_leader() {
            self.broadcast_synced(None, b);
            self.reply_to(&caller, reply);
            return;
        }
        let c = &mut self.s.confirm;
        c.last += 1;
        let seq = c.last;
        c.held.push_back(Held {
            seq,
            caller,
            reply,
            deadline,
        });
        if c.held.len() > MAX_HELD
            && let Some(oldest) = c.held.pop_front()
        {
            self.fail_one(oldest, CallError::Timeout);
        }
        self.broadcast_with(None, b, Some(seq));
        self.release_confirmed();
    }

    /// `Applied` from a follower: counts if it answers one of this leader's terms.
    pub(super) fn on_applied(&mut self, from: &MemberId, term: &crate::term::Term, seq: u64) {
        if !self.s.is_leader() || term.leader != self.s.me {
            return;
        }
        let applied = self.s.confirm.applied.entry(from.clone()).or_insert(0);
        *applied = (*applied).max(seq);
        self.release_confirmed();
    }

    /// Answers the held replies whose broadcast a majority applied, in order.
    fn release_confirmed(&mut self) {
        while let Some(front) = self.s.confirm.held.front() {
            let seq = front.seq;
            let nodes: BTreeSet<&NodeId> = self
                .s
                .confirm
                .applied
                .iter()
                .filter(|(_, s)| **s >= seq)
                .map(|(m, _)| m.node())
                .chain(std::iter::once(self.s.me.node()))
                .collect();
            if !self.s.group.is_empty() && !self.s.is_majority(nodes) {
                break;
            }
            let held = self.s.confirm.held.pop_front().expect("a front");
            self.reply_to(&held.caller, held.reply);
        }
    }

    /// Fails every held reply with `error` and forgets the acknowledgements (a leader stepping
    /// down or stopping).
    pub(super) fn fail_held(&mut self, error: CallError) {
        self.s.confirm.applied.clear();
        for held in std::mem::take(&mut self.s.confirm.held) {
            self.fail_one(held, error.clone());
        }
    }

    /// Fails the held client calls past their deadline.
    pub(super) fn expire_held(&mut self, now: Duration) {
        let (expired, kept): (VecDeque<Held<C>>, VecDeque<Held<C>>) =
            std::mem::take(&mut self.s.confirm.held)
                .into_iter()
                .partition(|h| h.deadline.is_some_and(|d| d <= now));
        self.s.confirm.held = kept;
        for held in expired {
            self.fail_one(held, CallError::Timeout);
        }
    }

    fn fail_one(&mut self, held: Held<C>, error: CallError) {
        match held.caller.0 {
            CallerKind::Local(call) => self.s.out.push(MemberEffect::Reply {
                call,
                result: Err(error),
            }),
            CallerKind::Remote { member, call } => {
                let msg = PeerMsg::LeaderReply {
                    call,
                    result: Err(error),
                };
                self.s.send(&member, msg);
            }
        }
    }
}
