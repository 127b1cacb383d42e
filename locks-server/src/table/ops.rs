//! The operations of the table but `Lock` (which is in `grant.rs` with the grant rules): each
//! request walks the lock hierarchy, edits the requesting agent's entries lock by lock, settles
//! each lock's queues and collects the notices.
//!
//! Invariants kept here (beyond those of `record`):
//! - an agent with an entry on a lock has an entry on every ancestor of it (the intention modes of
//!   its direct locks), so ancestors of an existing entry always exist;
//! - the intention counts on an ancestor match the agent's direct locks below it: each direct
//!   lock in mode `m` counts once as `intention(m)` on every ancestor;
//! - `AgentSlot::locks` / `watches` list exactly the slots with the agent's entry / watch;
//! - a record with no entries and no watchers is deleted before the operation returns.

use super::LockTable;
use super::notify::{self, Audience, NotifyCtx, Sends};
use super::record::Changes;
use locks_core::proto::{AgentMessage, Note, Rejection};
use locks_core::{AgentId, LockId, Mode};

/// Where a `Lock` request left its agent (for the fast path's answer).
pub(super) struct Placed {
    /// The agent's interned number.
    pub agent: u32,
    /// The slot of the lock's record.
    pub slot: u32,
    /// Whether the agent's entry on every ancestor is granted, if the request edited them all
    /// (`None` when it left them as they were).
    pub ancestors_granted: Option<bool>,
}

/// What one operation does to one agent's entry on one lock.
pub(super) enum Edit {
    /// Replace the direct mode (`Some(new)`), and/or swap one intention count for another.
    Need {
        direct: Option<Option<Mode>>,
        add: Option<Mode>,
        remove: Option<Mode>,
    },
    /// `Convert` the direct mode down to this one (see `LockRecord::convert_direct`, `grant.rs`).
    Convert(Mode),
    /// Surrender: lose the grant, go to the back of the wait queue.
    Requeue,
    /// Drop the entry and the watch (the agent is being removed).
    Remove,
}

impl LockTable {
    /// `Convert`: sets the agent's direct mode on `lock` to a weaker one, whatever the state of
    /// its entry there (granted, converting or waiting), and the intention on every ancestor to
    /// match; it never waits. Refused only when the agent has no direct lock on `lock` or
    /// `mode` is not weaker than its direct mode.
    ///
    /// Why every state: the agent's request and its direct mode here must stay one thing. An
    /// entry converts up because of a lock on a descendant or a stronger lock on the same id,
    /// neither of which the client sees as a reason its conversion down should fail; refused,
    /// the client would think it holds the weaker mode while the table kept the stronger one
    /// for as long as the agent lives.
    pub(super) fn convert(&mut self, agent: &AgentId, lock: &LockId, mode: Mode) -> Sends {
        if !self.modes.contains(mode) {
            return self.reject(agent, lock, Rejection::ModeNotInTable(mode));
        }
        let found = self.agents.lookup(agent).and_then(|a| {
            let s = self.locks.find(lock.keys())?;
            Some((a, s, self.locks.get(s)?.entry(a)?.direct?))
        });
        let Some((a, s, direct)) = found else {
            return self.reject(agent, lock, Rejection::NotHeld);
        };
        if direct == mode || !self.modes.covers(direct, mode) {
            let reason = Rejection::NotWeaker {
                held: direct,
                requested: mode,
            };
            return self.reject(agent, lock, reason);
        }
        let v = self.next_version();
        let mut out = Sends::new();
        let (old_i, new_i) = (self.modes.intention(direct), self.modes.intention(mode));
        let mut touched = false;
        if old_i != new_i {
            touched |= self.for_ancestors(lock, a, Some(new_i), Some(old_i), v, &mut out);
        }
        touched |= self.answer(s, a, Edit::Convert(mode), v, &mut out);
        // Until this answer comes, the agent's older notices may overstate what it holds.
        Self::mark_answer(&mut out, agent, lock, Note::Converted);
        self.finish(a, touched, v);
        out
    }

    /// `Unlock`: drops the direct lock (granted or pending) and the intentions it caused.
    pub(super) fn unlock(&mut self, agent: &AgentId, lock: &LockId) -> Sends {
        let found = self.agents.lookup(agent).and_then(|a| {
            let s = self.locks.find(lock.keys())?;
            Some((a, s, self.locks.get(s)?.entry(a)?.direct?))
        });
        let Some((a, s, direct)) = found else {
            return self.reject(agent, lock, Rejection::NotHeld);
        };
        let v = self.next_version();
        let mut out = Sends::new();
        let intention = self.modes.intention(direct);
        let mut touched = self.for_ancestors(lock, a, None, Some(intention), v, &mut out);
        touched |= self.set_direct(s, a, None, v, &mut out);
        // Until this answer comes, a grant sent before it may still be on its way.
        Self::mark_answer(&mut out, agent, lock, Note::Unlocked);
        self.finish(a, touched, v);
        out
    }

    /// `RemoveAgent`: drops every entry and watch of the agent.
    pub(super) fn remove_agent(&mut self, agent: &AgentId) -> Sends {
        let Some(a) = self.agents.lookup(agent) else {
            return Sends::new();
        };
        // Slots only, inline for the usual transaction (a lock and its ancestors): no
        // allocation and no lock id copied to end it.
        // In slot order, which is the records' order in memory (an agent with many locks
        // keeps them in a hash set). A slot with no record left is skipped by `apply`.
        let mut targets: smallvec::SmallVec<[u32; 8]> = smallvec::SmallVec::new();
        if let Some(slot) = self.agents.get(a) {
            slot.locks.copy_into(&mut targets);
            targets.extend_from_slice(&slot.watches);
        }
        targets.sort_unstable();
        // A lock may be both held and watched.
        targets.dedup();
        let v = self.next_version();
        let mut out = Sends::new();
        let aud = Audience {
            skip: Some(a),
            ..Audience::default()
        };
        let mut touched = false;
        for t in targets {
            touched |= self.apply(t, a, Edit::Remove, &aud, v, &mut out);
        }
        // The notices in lock id order, as if the locks had been edited in that order: an
        // edit changes only its own lock, so the notices of each lock are the same whatever
        // the order, and a stable sort keeps each lock's own in the order they were made. The
        // usual transaction's release tells nobody, and sorts nothing.
        out.sort_by(|(_, x), (_, y)| notice_lock(x).cmp(&notice_lock(y)));
        self.agents.remove(a);
        if touched {
            self.version = v;
        }
        out
    }

    /// `Watch`: `watcher` gets a view of `lock` now and after every change.
    pub(super) fn watch(&mut self, watcher: &AgentId, lock: &LockId) -> Sends {
        if let Some(r) = self.refusal(lock, None) {
            return self.reject(watcher, lock, r);
        }
        let Some(a) = self.agents.intern(watcher) else {
            return self.reject(watcher, lock, Rejection::ShuttingDown);
        };
        let Some(s) = self
            .locks
            .find_or_create(lock, lock.depth(), self.version, None)
        else {
            self.agents.release_if_idle(a);
            return Sends::new();
        };
        let Some(rec) = self.locks.get_mut(s) else {
            return Sends::new();
        };
        if rec.add_watcher(a)
            && let Some(slot) = self.agents.get_mut(a)
        {
            slot.watches.push(s);
        }
        let view = notify::view(rec, &self.modes, &self.agents);
        vec![(
            watcher.clone(),
            AgentMessage::Watched {
                node: self.node.clone(),
                lock: lock.clone(),
                view: view.into(),
            },
        )]
    }

    /// `Unwatch`: stops the views.
    pub(super) fn unwatch(&mut self, watcher: &AgentId, lock: &LockId) -> Sends {
        let Some(a) = self.agents.lookup(watcher) else {
            return Sends::new();
        };
        if let Some(s) = self.locks.find(lock.keys()) {
            if let Some(rec) = self.locks.get_mut(s) {
                rec.remove_watcher(a);
                rec.trim(self.index_threshold);
                if rec.is_unused() {
                    self.locks.retire(s);
                }
            }
            if let Some(slot) = self.agents.get_mut(a) {
                slot.watches.retain(|w| *w != s);
            }
        }
        self.agents.release_if_idle(a);
        Sends::new()
    }

    /// Applies an intention change to every ancestor of `lock`, root first.
    fn for_ancestors(
        &mut self,
        lock: &LockId,
        a: u32,
        add: Option<Mode>,
        remove: Option<Mode>,
        v: u64,
        out: &mut Sends,
    ) -> bool {
        let mut touched = false;
        for depth in 1..lock.depth() {
            let Some(s) = lock.keys().get(..depth).and_then(|k| self.locks.find(k)) else {
                continue;
            };
            let edit = Edit::Need {
                direct: None,
                add,
                remove,
            };
            touched |= self.apply(s, a, edit, &Audience::default(), v, out);
        }
        touched
    }

    /// Sets (or with `None` drops) agent `a`'s direct mode on lock slot `s` and answers the agent
    /// with its entry: the last step of `Lock` and `Unlock` (`Convert` ends through
    /// [`Self::answer`] too). Returns whether the lock's queue changed.
    pub(super) fn set_direct(
        &mut self,
        s: u32,
        a: u32,
        direct: Option<Mode>,
        v: u64,
        out: &mut Sends,
    ) -> bool {
        let edit = Edit::Need {
            direct: Some(direct),
            add: None,
            remove: None,
        };
        self.answer(s, a, edit, v, out)
    }

    /// Applies `edit` to agent `a`'s entry on lock slot `s` and answers the agent with its
    /// entry, changed or not. Returns whether the lock's queue changed.
    fn answer(&mut self, s: u32, a: u32, edit: Edit, v: u64, out: &mut Sends) -> bool {
        let aud = Audience {
            respond: Some(a),
            ..Audience::default()
        };
        self.apply(s, a, edit, &aud, v, out)
    }

    /// Marks `agent`'s answer on `lock` (the last notice to it about `lock` in `out`: it always
    /// gets one, after those of the ancestors) with `note`, so that it can tell the notices sent
    /// before its request was applied from those sent after.
    fn mark_answer(out: &mut Sends, agent: &AgentId, lock: &LockId, note: Note) {
        let answer = out.iter_mut().rev().find_map(|(to, m)| match m {
            AgentMessage::Notice(n) if to == agent && n.lock == *lock => Some(n),
            _ => None,
        });
        if let Some(n) = answer {
            n.note = Some(Box::new(note));
        }
    }

    /// Applies `edit` to agent `a`'s entry on lock slot `s`, grants what can be granted, appends
    /// the notices and deletes the record if it is no longer used. Returns whether the lock's
    /// queue changed (it then has version `v`).
    pub(super) fn apply(
        &mut self,
        s: u32,
        a: u32,
        edit: Edit,
        aud: &Audience<'_>,
        v: u64,
        out: &mut Sends,
    ) -> bool {
        let Some(rec) = self.locks.get_mut(s) else {
            return false;
        };
        let modes = &self.modes;
        let mut ch = Changes::default();
        match edit {
            Edit::Need {
                direct,
                add,
                remove,
            } => {
                let pos = match rec.pos(a) {
                    Some(p) => Some(p),
                    None if add.is_some() || matches!(direct, Some(Some(_))) => {
                        if let Some(slot) = self.agents.get_mut(a) {
                            slot.locks.insert(s);
                        }
                        ch.created = Some(a);
                        Some(rec.insert(a, v, self.index_threshold))
                    }
                    None => None,
                };
                if let Some(pos) = pos {
                    if let Some(d) = direct {
                        rec.set_direct(pos, d);
                    }
                    if let Some(m) = remove {
                        rec.remove_intent(pos, m);
                    }
                    if let Some(m) = add {
                        rec.add_intent(pos, m);
                    }
                    if rec.place(pos, modes, v, &mut ch)
                        && let Some(slot) = self.agents.get_mut(a)
                    {
                        slot.locks.remove(s);
                    }
                }
            }
            Edit::Convert(direct) => {
                if let Some(pos) = rec.pos(a) {
                    rec.convert_direct(pos, direct, modes, &mut ch);
                    // A lower direct mode never empties the entry: it still needs `direct`.
                    rec.place(pos, modes, v, &mut ch);
                }
            }
            Edit::Requeue => {
                if let Some(pos) = rec.pos(a) {
                    rec.requeue(pos, modes, v, &mut ch);
                }
            }
            Edit::Remove => {
                if let Some(pos) = rec.pos(a) {
                    let e = &rec.entries()[pos];
                    // Only a local agent's removal is known to be its end: a remote agent's
                    // may come from its node leaving the cluster while it still runs, and a
                    // ghost (local by name) stands for a remote agent whose waiters were
                    // never told of the rename: their views still show the agent itself.
                    ch.gone_holder = e.held.is_some()
                        && e.want.is_none()
                        && self
                            .agents
                            .id(a)
                            .is_some_and(|id| id.node() == &self.node && !id.is_ghost());
                    rec.remove(pos, &mut ch);
                }
                rec.remove_watcher(a);
            }
        }
        rec.process_grants(modes, v, &mut ch);
        let touched = ch.touched();
        if touched {
            rec.version = v;
        }
        if touched || aud.respond.is_some() {
            let ctx = NotifyCtx {
                node: &self.node,
                modes,
                agents: &self.agents,
            };
            if let Some(stale) = notify::emit(rec, &ctx, &ch, aud, out) {
                rec.set_stale_pending(stale);
            }
        }
        rec.trim(self.index_threshold);
        if rec.is_unused() {
            self.locks.retire(s);
        }
        touched
    }

    /// The version an operation that changes something hands out (saturating: a table whose
    /// base is near `u64::MAX` stops counting rather than panicking).
    pub(super) fn next_version(&self) -> u64 {
        self.version.saturating_add(1)
    }

    /// Ends an operation of agent `a`: moves the version if anything changed, forgets the agent
    /// if it has nothing left.
    pub(super) fn finish(&mut self, a: u32, touched: bool, v: u64) {
        if touched {
            self.version = v;
        }
        self.agents.release_if_idle(a);
    }
}

/// The lock a notice of an edit is about (`notify::emit` makes only these two kinds).
fn notice_lock(msg: &AgentMessage) -> Option<&LockId> {
    match msg {
        AgentMessage::Notice(n) => Some(&n.lock),
        AgentMessage::Watched { lock, .. } => Some(lock),
        _ => None,
    }
}
