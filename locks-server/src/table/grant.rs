//! Whether a request is granted at once or queued, and in what order queued requests are
//! granted: the table's grant rules (StickyLocking's lock queues, made precise where
//! StickyLocking is loose), stated and decided here and nowhere else: the other files of the
//! table only call these functions.
//!
//! **A `Lock` request** ([`LockTable::lock_as`]) is refused before anything is placed when its
//! mode is not in the table, its id is deeper than the node accepts, or the table is full
//! ([`LockTable::refusal`]); otherwise it is one entry per lock of its path: on the lock
//! itself the requested mode (grouped with the direct mode the agent already had there), on
//! every ancestor the intention of that mode ([`ModeTable::intention`]: `IS` for `IS`/`S`,
//! `IX` otherwise). Each entry is placed on its own lock ([`LockRecord::place`]):
//! - a new entry is granted at once when nobody converts or waits there and its mode is
//!   compatible with the group of the holders, and otherwise joins the back of the wait queue;
//! - a granted entry that needs more is an up-conversion to `group(need, held)` at the back of
//!   the conversion queue, and one that needs less is converted down at once;
//! - a pending entry whose need changes keeps its place with the new mode.
//!
//! When the agent holds its lock is the hierarchy's rule, [`locks_core::held_in_hierarchy`]:
//! its entry on the lock *and* on every ancestor granted, so a read of `[a]` and a write of
//! `[a, b]` are kept apart by the intention entry on `[a]`.
//!
//! **Grant order** ([`LockRecord::process_grants`], after every change of a lock): conversions
//! first, in FIFO order, each while compatible with the group of the *other* holders; then,
//! only when no conversion waits, new requests in FIFO order while compatible with the group.
//! Each queue stops at the first request that cannot be granted, so nobody overtakes a waiter.
//! A surrendered entry goes to the back of the wait queue ([`LockRecord::requeue`]). The
//! deadlock detector's model of this order, who waits for whom in a queue served so, is
//! `locks_core::waits` (the agents read it off the queues' views): a change of the order here
//! changes who waits for whom there, and the table's property test (`tests/table_oracle`)
//! fails while an entry left pending has no blocker in it.
//!
//! **`TryLock`** ([`LockTable::try_lock`]) is a `Lock` carried out only if every entry of its
//! path would be granted at once ([`LockRecord::admits_new`], the same test `place` applies to
//! a new entry), and otherwise refused whole with [`Rejection::Busy`], changing nothing.
//!
//! **`Convert` down** ([`LockRecord::convert_direct`]): an entry whose conversion up waits
//! gives up at once what it no longer asks for.

use super::LockTable;
use super::notify::{Audience, Sends};
use super::ops::{Edit, Placed};
use super::record::{Changes, LockRecord, fold_mask};
use locks_core::proto::Rejection;
use locks_core::{AgentId, LockId, Mode, ModeTable};

impl LockTable {
    /// Whether a request that may create a lock is refused before anything is placed: a mode
    /// the table does not have, a lock id deeper than the node accepts, a full table.
    pub(super) fn refusal(&self, lock: &LockId, mode: Option<Mode>) -> Option<Rejection> {
        if let Some(m) = mode.filter(|m| !self.modes.contains(*m)) {
            return Some(Rejection::ModeNotInTable(m));
        }
        if lock.depth() > self.max_depth {
            return Some(Rejection::LockIdTooLarge(format!(
                "{} keys deep; this node accepts at most {}",
                lock.depth(),
                self.max_depth
            )));
        }
        if self.locks.capacity_used().saturating_add(lock.depth()) >= u32::MAX as usize {
            return Some(Rejection::LockIdTooLarge("the lock table is full".into()));
        }
        None
    }

    /// `Lock`: the entry on `lock` needs `mode` (grouped with any direct mode it had), every
    /// ancestor needs `intention(mode)`.
    pub(super) fn lock(&mut self, agent: &AgentId, lock: &LockId, mode: Mode) -> Sends {
        self.lock_as(agent, lock, mode, false).0
    }

    /// [`Self::lock`]; `quiet`: the requester is told nothing but a refusal (the fast path
    /// reads its state from the table instead), everybody else exactly the same. Also returns
    /// what the fast path would otherwise look up again, unless the request was refused.
    pub(super) fn lock_as(
        &mut self,
        agent: &AgentId,
        lock: &LockId,
        mode: Mode,
        quiet: bool,
    ) -> (Sends, Option<Placed>) {
        if let Some(r) = self.refusal(lock, Some(mode)) {
            return (self.reject(agent, lock, r), None);
        }
        let Some(a) = self.agents.intern(agent) else {
            return (self.reject(agent, lock, Rejection::ShuttingDown), None);
        };
        let v = self.next_version();
        let mut out = Sends::new();
        // Found once: the ancestors' edits below never remove this record (it is in use, and
        // an edit removes only the record it edits).
        let hashes = self.locks.path_hashes(lock.keys());
        let hash_of = |depth: usize| hashes.get(depth.wrapping_sub(1)).copied().unwrap_or(0);
        let found = self
            .locks
            .find_any_hashed(lock.keys(), hash_of(lock.depth()));
        let old = found.and_then(|s| self.locks.get(s)?.entry(a)?.direct);
        let new = old.map_or(mode, |d| self.modes.group(mode, d));
        let (old_i, new_i) = (
            old.map(|d| self.modes.intention(d)),
            self.modes.intention(new),
        );
        let mut touched = false;
        let aud = Audience {
            mute: quiet.then_some(a),
            ..Audience::default()
        };
        let mut ancestors_granted = None;
        if old_i != Some(new_i) {
            let mut granted = true;
            for depth in 1..lock.depth() {
                let found =
                    self.locks
                        .find_or_create(lock, depth, self.version, Some(hash_of(depth)));
                let Some(s) = found else {
                    granted = false;
                    continue;
                };
                let edit = Edit::Need {
                    direct: None,
                    add: Some(new_i),
                    remove: old_i,
                };
                touched |= self.apply(s, a, edit, &aud, v, &mut out);
                // Later edits in this operation touch other locks only: what the agent's
                // entry is now is what it is when the operation returns.
                granted &= self.entry_granted(s, a);
            }
            ancestors_granted = Some(granted);
        }
        let direct = match found {
            Some(s) => Some(s),
            None => {
                self.locks
                    .create_hashed(lock, lock.depth(), self.version, hash_of(lock.depth()))
            }
        };
        if let Some(s) = direct {
            touched |= if quiet {
                let edit = Edit::Need {
                    direct: Some(Some(new)),
                    add: None,
                    remove: None,
                };
                let named = Audience {
                    respond: Some(a),
                    ..aud
                };
                self.apply(s, a, edit, &named, v, &mut out)
            } else {
                self.set_direct(s, a, Some(new), v, &mut out)
            };
        }
        self.finish(a, touched, v);
        let placed = direct.map(|slot| Placed {
            agent: a,
            slot,
            ancestors_granted,
        });
        (out, placed)
    }

    /// Whether agent `a` has a granted entry (not converting) on lock slot `s`.
    pub(super) fn entry_granted(&self, s: u32, a: u32) -> bool {
        self.locks
            .get(s)
            .and_then(|r| r.entry(a))
            .is_some_and(|e| e.want.is_none() && e.held.is_some())
    }
}

impl LockTable {
    /// `TryLock`: carried out as a `Lock` only if the table grants it at once, refused with
    /// [`Rejection::Busy`] otherwise. A refused `TryLock` leaves the table exactly as it was (no
    /// entry, no version, no notice to anybody); a granted one is the same operation as `Lock`,
    /// with the same notices. The check is conservative: an agent that already has an entry on
    /// the lock or on one of its ancestors is refused, although a `Lock` might have been granted
    /// it; the agent asks again with `Lock` later, so a refusal only ever delays it.
    pub(super) fn try_lock(&mut self, agent: &AgentId, lock: &LockId, mode: Mode) -> Sends {
        if let Some(r) = self.refusal(lock, Some(mode)) {
            return self.reject(agent, lock, r);
        }
        if !self.grants_at_once(agent, lock, mode) {
            return self.reject(agent, lock, Rejection::Busy);
        }
        self.lock(agent, lock, mode)
    }

    /// Whether a `Lock` of `lock` in `mode` by `agent` would be granted at once, on the lock and
    /// on every ancestor: the agent has no entry on any of them, and on each that exists nobody
    /// waits or converts and the holders' group allows the mode needed there (what
    /// [`LockRecord::admits_new`]).
    fn grants_at_once(&self, agent: &AgentId, lock: &LockId, mode: Mode) -> bool {
        let a = self.agents.lookup(agent);
        let intention = self.modes.intention(mode);
        (1..=lock.depth()).all(|depth| {
            let need = if depth == lock.depth() {
                mode
            } else {
                intention
            };
            let Some(record) = self
                .locks
                .find(&lock.keys()[..depth])
                .and_then(|s| self.locks.get(s))
            else {
                return true;
            };
            a.is_none_or(|a| record.entry(a).is_none()) && record.admits_new(need, &self.modes)
        })
    }
}

impl LockRecord {
    /// Whether a new entry needing `need` is granted at once: nobody converts or waits here and
    /// `need` is compatible with the group of the holders (StickyLocking's immediate grant: what
    /// [`Self::process_grants`] would do with it at the front of an empty queue).
    pub fn admits_new(&self, need: Mode, modes: &ModeTable) -> bool {
        let queues_empty = self
            .extra
            .as_deref()
            .is_none_or(|x| x.converting.is_empty() && x.waiting.is_empty());
        queues_empty && self.group(modes).is_none_or(|g| modes.compatible(need, g))
    }

    /// `Convert`: sets the direct mode of the entry at `pos` to `direct`, weaker than the one it
    /// had (call [`Self::place`] afterwards). A converting entry also gives up at once what it
    /// holds and no longer asks for: its held mode `h` becomes what it still asks for of `h`
    /// (`Entry::still_asked`), when `h` covers that. A conversion down is granted at once, so
    /// nobody may be blocked by a mode its holder gave up while its conversion up waits; if the
    /// new direct mode is not covered by `h` (the entry was upgrading to it), `h` stays, since
    /// the entry cannot be granted more than it holds without waiting. Granted and waiting
    /// entries need nothing here: `place` down-converts the one and lowers the other's pending
    /// mode in place.
    pub fn convert_direct(
        &mut self,
        pos: usize,
        direct: Mode,
        modes: &ModeTable,
        ch: &mut Changes,
    ) {
        let e = &mut self.entries[pos];
        e.direct = Some(direct);
        let (Some(h), Some(_)) = (e.held, e.want) else {
            return;
        };
        let kept = e.still_asked(modes, direct, h);
        if kept != h && modes.covers(h, kept) {
            let agent = e.agent;
            self.set_held(pos, Some(kept));
            ch.holders = true;
            ch.entry(agent);
        }
    }

    /// Brings the entry at `pos` in line with what it needs now, without granting anything that
    /// must wait ([`Self::process_grants`] does that). Returns true if the entry was removed
    /// because it needs nothing.
    ///
    /// - needs nothing: removed (from the holders and from its queue);
    /// - granted, needs less: down-converted at once;
    /// - granted, needs more: an up-conversion to `group(need, held)` at the back of the
    ///   conversion queue (granted by `process_grants` if nobody converts ahead of it and the
    ///   other holders allow it — StickyLocking's immediate conversion);
    /// - converting, its held mode now covers the need: the conversion is withdrawn;
    /// - converting or waiting, needs a different mode: the pending mode changes in place;
    /// - new: granted at once if nobody converts or waits and the group allows it (StickyLocking,
    ///   immediate grant: what `process_grants` would do with it), at the back of the wait
    ///   queue otherwise.
    pub fn place(&mut self, pos: usize, modes: &ModeTable, v: u64, ch: &mut Changes) -> bool {
        let e = &self.entries[pos];
        let agent = e.agent;
        let (held, want) = (e.held, e.want);
        let Some(need) = e.need(modes) else {
            self.remove(pos, ch);
            return true;
        };
        match (held, want) {
            (Some(h), None) => {
                if need == h {
                    return false;
                }
                if modes.covers(h, need) {
                    self.set_held(pos, Some(need));
                    ch.holders = true;
                } else {
                    self.entries[pos].want = Some(modes.group(need, h));
                    let q = &mut self.extra_mut().converting;
                    ch.conv_at(q.len());
                    q.push_back(agent);
                }
                ch.entry(agent);
            }
            (Some(h), Some(w)) => {
                if modes.covers(h, need) {
                    self.entries[pos].want = None;
                    self.unqueue_conv(agent, ch);
                    if h != need {
                        self.set_held(pos, Some(need));
                        ch.holders = true;
                    }
                    ch.entry(agent);
                } else {
                    let w2 = modes.group(need, h);
                    if w2 != w {
                        self.entries[pos].want = Some(w2);
                        self.mark_conv(agent, ch);
                        ch.entry(agent);
                    }
                }
            }
            (None, Some(w)) => {
                if need != w {
                    self.entries[pos].want = Some(need);
                    self.mark_wait(agent, ch);
                    ch.entry(agent);
                }
            }
            (None, None) => {
                self.entries[pos].version = v;
                if self.admits_new(need, modes) {
                    // What `process_grants` would do with it at the front of an empty queue,
                    // with the same changes, without the boxed queue an uncontended lock
                    // would allocate and free for every new entry.
                    self.set_held(pos, Some(need));
                    ch.wait_at(0);
                    ch.holders = true;
                    ch.entry(agent);
                    return false;
                }
                self.entries[pos].want = Some(need);
                let q = &mut self.extra_mut().waiting;
                ch.wait_at(q.len());
                q.push_back(agent);
                ch.entry(agent);
            }
        }
        false
    }

    /// Surrender: the entry at `pos` loses its grant (or its place) and goes to the back of the
    /// wait queue, needing its full mode.
    pub fn requeue(&mut self, pos: usize, modes: &ModeTable, v: u64, ch: &mut Changes) {
        let e = &self.entries[pos];
        let agent = e.agent;
        let need = e.need(modes);
        match (e.held, e.want) {
            (Some(_), want) => {
                if want.is_some() {
                    self.unqueue_conv(agent, ch);
                }
                self.set_held(pos, None);
                ch.holders = true;
            }
            (None, Some(_)) => self.unqueue_wait(agent, ch),
            (None, None) => {}
        }
        let e = &mut self.entries[pos];
        e.want = need;
        e.version = v;
        if need.is_some() {
            let q = &mut self.extra_mut().waiting;
            ch.wait_at(q.len());
            q.push_back(agent);
        }
        ch.entry(agent);
    }

    /// StickyLocking's grant processing: conversions first, in FIFO order, each granted when
    /// compatible with the group of the other holders; then, only if no conversion waits, new
    /// requests in FIFO order while compatible with the group. Both stop at the first request
    /// that cannot be granted.
    pub fn process_grants(&mut self, modes: &ModeTable, v: u64, ch: &mut Changes) {
        while let Some(agent) = self
            .extra
            .as_deref()
            .and_then(|x| x.converting.front().copied())
        {
            let Some(pos) = self.pos(agent) else {
                // Unreachable while the invariants hold; drop the stray agent rather than spin.
                self.pop_conv(ch);
                continue;
            };
            let (Some(h), Some(w)) = (self.entries[pos].held, self.entries[pos].want) else {
                self.pop_conv(ch);
                continue;
            };
            let others = fold_mask(modes, self.held_mask(Some(pos)));
            if !others.is_none_or(|g| modes.compatible(w, g)) {
                break;
            }
            self.pop_conv(ch);
            // The conversion was checked in mode `w`; the entry keeps only what it needs now
            // (`w` may include a held mode it no longer needs, see `place`).
            let need = self.entries[pos].need(modes).unwrap_or(w);
            let granted = if modes.covers(w, need) { need } else { w };
            if granted != h {
                self.set_held(pos, Some(granted));
                ch.holders = true;
            }
            self.entries[pos].want = None;
            ch.entry(agent);
        }
        if self
            .extra
            .as_deref()
            .is_some_and(|x| !x.converting.is_empty())
        {
            return;
        }
        while let Some(agent) = self
            .extra
            .as_deref()
            .and_then(|x| x.waiting.front().copied())
        {
            let Some(pos) = self.pos(agent) else {
                self.pop_wait(ch);
                continue;
            };
            let (None, Some(w)) = (self.entries[pos].held, self.entries[pos].want) else {
                self.pop_wait(ch);
                continue;
            };
            if !self.group(modes).is_none_or(|g| modes.compatible(w, g)) {
                break;
            }
            self.pop_wait(ch);
            self.set_held(pos, Some(w));
            let e = &mut self.entries[pos];
            e.want = None;
            e.version = v;
            ch.holders = true;
            ch.entry(agent);
        }
    }
}
