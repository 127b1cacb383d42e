//! One lock's record: its entries, conversion queue, wait queue and watchers, and the
//! operations that keep them consistent. The rules that move entries between the queues (grant
//! at once or queue, grant order) are in `grant.rs`.
//!
//! Invariants, true between operations (each operation ends with [`LockRecord::process_grants`]):
//! - every entry is granted (`held`, no `want`), converting (`held` and `want`, and its agent is
//!   in the conversion queue exactly once) or waiting (`want` only, its agent in the wait queue
//!   exactly once); the queues hold no other agents;
//! - the group mode is the group of the granted entries' `held` modes, recomputed from them
//!   (where one of StickyLocking's pictures and the group matrix disagree, the matrix wins), never stored;
//! - the first conversion is not compatible with the group of the *other* holders (not one
//!   that includes the converter's own mode, or a sole holder could never convert), and when
//!   nobody converts the first waiter is not compatible with the group: whatever could be
//!   granted has been;
//! - a record with more than `index_threshold` entries keeps a [`HolderIndex`] (agent → position,
//!   holders per mode) so that finding an agent and computing a group are O(1) on hot locks.

use super::entry::Entry;
use ahash::RandomState;
use locks_core::{LockId, Mode, ModeTable};
use smallvec::SmallVec;
use std::collections::{HashMap, VecDeque};

/// What one operation changed on one lock: who must be told (see `notify`).
///
/// Queue marks are the smallest queue position at which something was inserted, removed or
/// changed during the operation. Every mutation lowers the mark to its own position, so the
/// entries in front of the final mark are the same, in the same order, as before the operation:
/// exactly the entries behind it may have a stale view of what is ahead of them.
#[derive(Debug, Default)]
pub(super) struct Changes {
    /// Agents whose own entry changed (may repeat; deduplicated when notices are built).
    pub changed: SmallVec<[u32; 4]>,
    /// A holder was added or removed, or a held mode changed.
    pub holders: bool,
    /// Lowest changed position in the conversion queue.
    pub conv_mark: Option<usize>,
    /// Lowest changed position in the wait queue.
    pub wait_mark: Option<usize>,
    /// The operation removed a plain holder (granted, not converting) whose agent can confirm
    /// no wait any more: a local agent that ended (not a ghost). Its release may be quiet
    /// (`notify.rs`).
    pub gone_holder: bool,
    /// The entry this operation created, if any: its agent has no older view of the lock.
    pub created: Option<u32>,
}

impl Changes {
    pub(super) fn entry(&mut self, agent: u32) {
        self.changed.push(agent);
    }

    pub(super) fn conv_at(&mut self, pos: usize) {
        self.conv_mark = Some(self.conv_mark.map_or(pos, |m| m.min(pos)));
    }

    pub(super) fn wait_at(&mut self, pos: usize) {
        self.wait_mark = Some(self.wait_mark.map_or(pos, |m| m.min(pos)));
    }

    /// Whether the lock's queue changed at all (its version must then move).
    pub fn touched(&self) -> bool {
        !self.changed.is_empty()
            || self.holders
            || self.conv_mark.is_some()
            || self.wait_mark.is_some()
    }
}

/// Lookup structures for locks with many entries (a hot root with thousands of `IS` holders).
#[derive(Clone, Debug)]
struct HolderIndex {
    /// Agent → position in `entries`.
    pos: HashMap<u32, u32, RandomState>,
    /// How many granted entries hold each mode.
    held: [u32; Mode::COUNT],
}

/// The parts of a record most locks never need, boxed so a lock with one holder stays small.
#[derive(Clone, Debug, Default)]
pub(super) struct Extra {
    pub(super) converting: VecDeque<u32>,
    pub(super) waiting: VecDeque<u32>,
    watchers: SmallVec<[u32; 2]>,
    index: Option<HolderIndex>,
    /// Some pending entry was not told of a quiet release ahead of it (`notify.rs`, "A quiet
    /// release"): the next operation that tells any pending entry tells them all.
    stale_pending: bool,
}

impl Extra {
    fn is_empty(&self) -> bool {
        self.converting.is_empty()
            && self.waiting.is_empty()
            && self.watchers.is_empty()
            && self.index.is_none()
    }
}

/// One lock (one [`LockId`]) of the table.
#[derive(Clone, Debug)]
pub(super) struct LockRecord {
    /// The lock.
    pub id: LockId,
    /// The table version at the last change of this lock's queue.
    pub version: u64,
    /// One entry per agent, in no particular order (views sort holders by grant version).
    pub(super) entries: SmallVec<[Entry; 1]>,
    pub(super) extra: Option<Box<Extra>>,
}

// The holders' masks (`held_mask`, `fold_mask`) have a bit per mode in a `u8`.
const _: () = assert!(
    Mode::COUNT <= 8,
    "a mode mask is a u8: widen it for more modes"
);

/// Folds the modes set in `mask` (bit `i` = mode with index `i`) in matrix order.
pub(super) fn fold_mask(modes: &ModeTable, mask: u8) -> Option<Mode> {
    // No holder, or holders of one mode (every uncontended lock): nothing to fold.
    if mask == 0 {
        return None;
    }
    if mask & (mask - 1) == 0 {
        return Mode::from_index(mask.trailing_zeros() as usize);
    }
    Mode::ALL
        .into_iter()
        .filter(|m| mask & (1 << m.index()) != 0)
        .fold(None, |acc, m| Some(acc.map_or(m, |g| modes.group(m, g))))
}

impl LockRecord {
    /// An empty record.
    pub fn new(id: LockId, version: u64) -> LockRecord {
        LockRecord {
            id,
            version,
            entries: SmallVec::new(),
            extra: None,
        }
    }

    /// All entries, unordered.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The position of `agent`'s entry.
    pub fn pos(&self, agent: u32) -> Option<usize> {
        match self.extra.as_ref().and_then(|x| x.index.as_ref()) {
            Some(ix) => ix.pos.get(&agent).map(|&p| p as usize),
            None => self.entries.iter().position(|e| e.agent == agent),
        }
    }

    /// `agent`'s entry.
    pub fn entry(&self, agent: u32) -> Option<&Entry> {
        self.pos(agent).map(|p| &self.entries[p])
    }

    /// The agents waiting to convert, in FIFO order.
    pub fn converting(&self) -> impl Iterator<Item = u32> + '_ {
        self.extra
            .as_deref()
            .into_iter()
            .flat_map(|x| x.converting.iter().copied())
    }

    /// The agents waiting for a first grant, in FIFO order.
    pub fn waiting(&self) -> impl Iterator<Item = u32> + '_ {
        self.extra
            .as_deref()
            .into_iter()
            .flat_map(|x| x.waiting.iter().copied())
    }

    /// The watchers of this lock.
    pub fn watchers(&self) -> &[u32] {
        self.extra.as_deref().map_or(&[], |x| &x.watchers)
    }

    /// Adds a watcher; false if it already watches.
    pub fn add_watcher(&mut self, agent: u32) -> bool {
        let w = &mut self.extra_mut().watchers;
        if w.contains(&agent) {
            return false;
        }
        w.push(agent);
        true
    }

    /// Removes a watcher; false if it did not watch.
    pub fn remove_watcher(&mut self, agent: u32) -> bool {
        let Some(x) = self.extra.as_deref_mut() else {
            return false;
        };
        match x.watchers.iter().position(|&w| w == agent) {
            Some(i) => {
                x.watchers.remove(i);
                true
            }
            None => false,
        }
    }

    /// Whether some pending entry may have missed a quiet release ahead of it.
    pub fn stale_pending(&self) -> bool {
        self.extra.as_deref().is_some_and(|x| x.stale_pending)
    }

    /// Records whether some pending entry may have missed a quiet release (never while nothing
    /// is pending: a new entry is told the queue as it is when it joins).
    pub fn set_stale_pending(&mut self, stale: bool) {
        if let Some(x) = self.extra.as_deref_mut() {
            x.stale_pending = stale && !(x.converting.is_empty() && x.waiting.is_empty());
        }
    }

    /// Whether the record can be deleted: no entries and no watchers.
    pub fn is_unused(&self) -> bool {
        self.entries.is_empty() && self.watchers().is_empty()
    }

    /// The group mode of the holders.
    pub fn group(&self, modes: &ModeTable) -> Option<Mode> {
        fold_mask(modes, self.held_mask(None))
    }

    /// Adds an entry for `agent`, which needs nothing yet; the caller sets its needs and calls
    /// [`Self::place`]. Returns its position.
    pub fn insert(&mut self, agent: u32, version: u64, index_threshold: usize) -> usize {
        let pos = self.entries.len();
        self.entries.push(Entry::new(agent, version));
        if let Some(ix) = self.index_mut() {
            ix.pos.insert(agent, pos as u32);
        } else if self.entries.len() > index_threshold {
            self.build_index();
        }
        pos
    }

    /// Sets the direct mode of the entry at `pos` (call [`Self::place`] afterwards).
    pub fn set_direct(&mut self, pos: usize, direct: Option<Mode>) {
        self.entries[pos].direct = direct;
    }

    /// Counts one more descendant lock needing `mode` (call [`Self::place`] afterwards).
    pub fn add_intent(&mut self, pos: usize, mode: Mode) {
        self.entries[pos].add_intent(mode);
    }

    /// Counts one descendant lock needing `mode` less (call [`Self::place`] afterwards).
    pub fn remove_intent(&mut self, pos: usize, mode: Mode) {
        self.entries[pos].remove_intent(mode);
    }

    /// Removes the entry at `pos` from the holders and from its queue.
    pub fn remove(&mut self, pos: usize, ch: &mut Changes) {
        let (agent, held, want) = {
            let e = &self.entries[pos];
            (e.agent, e.held, e.want)
        };
        if want.is_some() {
            if held.is_some() {
                self.unqueue_conv(agent, ch);
            } else {
                self.unqueue_wait(agent, ch);
            }
        }
        if held.is_some() {
            ch.holders = true;
        }
        self.swap_remove(pos);
        ch.entry(agent);
    }

    /// Drops the boxed extras when unused and the index when the lock has become small, and
    /// the mark of a quiet release once nothing is pending (an operation that empties the
    /// queues without telling anyone pending leaves it set otherwise, and whether it survived
    /// then depended on whether the extras were kept for an index).
    pub fn trim(&mut self, index_threshold: usize) {
        let len = self.entries.len();
        if let Some(x) = self.extra.as_deref_mut() {
            if x.converting.is_empty() && x.waiting.is_empty() {
                x.stale_pending = false;
            }
            if x.index.is_some() && len.saturating_mul(2) < index_threshold {
                x.index = None;
            }
            if x.is_empty() {
                self.extra = None;
            }
        }
    }

    pub(super) fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    fn index_mut(&mut self) -> Option<&mut HolderIndex> {
        self.extra.as_deref_mut().and_then(|x| x.index.as_mut())
    }

    fn build_index(&mut self) {
        let mut pos = HashMap::with_capacity_and_hasher(self.entries.len(), RandomState::new());
        let mut held = [0u32; Mode::COUNT];
        for (i, e) in self.entries.iter().enumerate() {
            pos.insert(e.agent, i as u32);
            if let Some(h) = e.held {
                held[h.index()] += 1;
            }
        }
        self.extra_mut().index = Some(HolderIndex { pos, held });
    }

    /// Bit `i` set when some holder (other than the entry at `skip`) holds the mode of index `i`.
    pub(super) fn held_mask(&self, skip: Option<usize>) -> u8 {
        let skipped = skip.and_then(|p| self.entries[p].held);
        match self.extra.as_deref().and_then(|x| x.index.as_ref()) {
            Some(ix) => {
                let mut counts = ix.held;
                if let Some(h) = skipped {
                    counts[h.index()] = counts[h.index()].saturating_sub(1);
                }
                counts
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .fold(0, |m, (i, _)| m | (1 << i))
            }
            None => self
                .entries
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != skip)
                .filter_map(|(_, e)| e.held)
                .fold(0, |m, h| m | (1 << h.index())),
        }
    }

    pub(super) fn set_held(&mut self, pos: usize, held: Option<Mode>) {
        let e = &mut self.entries[pos];
        let old = std::mem::replace(&mut e.held, held);
        if let Some(ix) = self.extra.as_deref_mut().and_then(|x| x.index.as_mut()) {
            if let Some(o) = old {
                ix.held[o.index()] = ix.held[o.index()].saturating_sub(1);
            }
            if let Some(n) = held {
                ix.held[n.index()] += 1;
            }
        }
    }

    fn swap_remove(&mut self, pos: usize) {
        let e = self.entries.swap_remove(pos);
        let moved = self.entries.get(pos).map(|m| m.agent);
        if let Some(ix) = self.index_mut() {
            ix.pos.remove(&e.agent);
            if let Some(h) = e.held {
                ix.held[h.index()] = ix.held[h.index()].saturating_sub(1);
            }
            if let Some(m) = moved {
                ix.pos.insert(m, pos as u32);
            }
        }
    }

    pub(super) fn pop_conv(&mut self, ch: &mut Changes) {
        if let Some(x) = self.extra.as_deref_mut() {
            x.converting.pop_front();
            ch.conv_at(0);
        }
    }

    pub(super) fn pop_wait(&mut self, ch: &mut Changes) {
        if let Some(x) = self.extra.as_deref_mut() {
            x.waiting.pop_front();
            ch.wait_at(0);
        }
    }

    pub(super) fn unqueue_conv(&mut self, agent: u32, ch: &mut Changes) {
        if let Some(x) = self.extra.as_deref_mut()
            && let Some(i) = x.converting.iter().position(|&a| a == agent)
        {
            x.converting.remove(i);
            ch.conv_at(i);
        }
    }

    pub(super) fn unqueue_wait(&mut self, agent: u32, ch: &mut Changes) {
        if let Some(x) = self.extra.as_deref_mut()
            && let Some(i) = x.waiting.iter().position(|&a| a == agent)
        {
            x.waiting.remove(i);
            ch.wait_at(i);
        }
    }

    pub(super) fn mark_conv(&self, agent: u32, ch: &mut Changes) {
        if let Some(i) = self
            .extra
            .as_deref()
            .and_then(|x| x.converting.iter().position(|&a| a == agent))
        {
            ch.conv_at(i);
        }
    }

    pub(super) fn mark_wait(&self, agent: u32, ch: &mut Changes) {
        if let Some(i) = self
            .extra
            .as_deref()
            .and_then(|x| x.waiting.iter().position(|&a| a == agent))
        {
            ch.wait_at(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_with_one_holder_stays_small() {
        assert_eq!(std::mem::size_of::<LockRecord>(), 64);
    }

    #[test]
    fn the_mark_of_a_quiet_release_goes_once_nothing_is_pending_index_or_not() {
        // A table whose records keep their extras for an index and one whose records drop
        // them must tell the same agents: the mark cannot outlive the queues in one of them.
        for index_threshold in [0, usize::MAX] {
            let mut rec = LockRecord::new(locks_core::lock_id!["l"], 1);
            rec.extra_mut().waiting.push_back(7);
            rec.set_stale_pending(true);
            assert!(rec.stale_pending());
            rec.trim(index_threshold);
            assert!(rec.stale_pending(), "a waiter is still there");
            // An operation empties the queue and tells nobody pending (`emit` returns `None`).
            rec.extra_mut().waiting.clear();
            rec.build_index();
            rec.trim(index_threshold);
            assert!(!rec.stale_pending(), "threshold {index_threshold}");
            // A waiter that joins later is told the queue as it is: nothing stale.
            rec.extra_mut().waiting.push_back(8);
            assert!(!rec.stale_pending(), "threshold {index_threshold}");
        }
    }

    #[test]
    fn the_group_of_every_set_of_held_modes_is_the_matrix_fold() {
        // `fold_mask` answers the empty and one-mode sets without folding; every set, in both
        // tables, must come out as the group matrix folded in matrix order.
        for modes in [ModeTable::standard(), ModeTable::shared_exclusive()] {
            for mask in 0..(1u8 << Mode::COUNT) {
                let folded = Mode::ALL
                    .into_iter()
                    .filter(|m| mask & (1 << m.index()) != 0)
                    .fold(None, |acc, m| Some(acc.map_or(m, |g| modes.group(m, g))));
                assert_eq!(fold_mask(&modes, mask), folded, "mask {mask:#08b}");
            }
        }
    }
}
