//! The map from lock ids to lock records.
//!
//! Records live in a slab (`Vec`), and the index from lock id to slot is a hash table of bare
//! slot numbers, hashed by their record's key path: the id is stored once, in its record, and an
//! index bucket is 4 bytes instead of the 24 of a map from id to slot (a table of a million
//! locks has two million buckets). Lookups take a key slice, so finding the ancestors of a lock
//! allocates nothing; comparing a candidate reads its record.
//!
//! A path's hash is its keys hashed one after the other (no length in front), so the hashes of
//! all the prefixes of a lock id come from one pass over its keys ([`Locks::path_hashes`]): a
//! `Lock` finds or creates the lock and each of its ancestors hashing every key once.
//!
//! **Retired records.** A record that falls unused (no entries, no watchers) is not deleted at
//! once: it is *retired*, kept in the index, and deleted only once more than [`RETIRED`]
//! records were retired after its last retirement ([`Locks::evict`], at the end of a table
//! operation). A retirement is listed with the record's version, which every change of its
//! queue moves, so an older listing of a record retired again since is skipped: an ancestor
//! that every transaction takes and releases is retired by each of them, and must not be
//! deleted by the listing of the transaction 20 before. A lock
//! taken again meanwhile reuses its record, which saves hashing the path again, an index
//! insertion and removal, and the allocation of the id: an ancestor (a database's table) is
//! released and taken again by every transaction on its rows. A retired record is invisible to
//! everything but [`Locks::find_any_hashed`] and [`Locks::find_or_create`]: [`Locks::find`],
//! [`Locks::slice`] and [`Locks::len`] leave unused records out, so the
//! table's answers are those of a table that deleted them.
//!
//! Invariants: `index` holds `s` exactly when `slots[s]` holds a record, under the hash of that
//! record's keys; free slots are `None` and listed in `free`; every unused record's slot is in
//! `retired` with the record's current version (possibly beside older listings), and
//! `retired` holds at most [`RETIRED`] listings between operations.

use super::record::LockRecord;
use ahash::RandomState;
use hashbrown::HashTable;
use locks_core::{Key, LockId};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash, Hasher};

/// How many retired records a table keeps (see the module documentation).
pub(super) const RETIRED: usize = 64;

/// The hashes of a lock id's prefixes, shortest first (see [`Locks::path_hashes`]).
pub(super) type PathHashes = SmallVec<[u64; 8]>;

/// The lock records of a table.
#[derive(Clone, Debug, Default)]
pub(super) struct Locks {
    /// Randomly seeded: lock ids come from the network.
    hasher: RandomState,
    index: HashTable<u32>,
    slots: Vec<Option<LockRecord>>,
    free: Vec<u32>,
    /// Slots of records retired, with the record's version then, oldest first (a slot may be
    /// listed twice, or hold a record in use again, or retired again since: [`Locks::evict`]
    /// checks).
    retired: VecDeque<(u32, u64)>,
}

/// The keys of the record in slot `s`, if there is one.
fn keys_at(slots: &[Option<LockRecord>], s: u32) -> Option<&[Key]> {
    slots
        .get(s as usize)
        .and_then(Option::as_ref)
        .map(|r| r.id.keys())
}

/// The index's hash of the path `keys` (see the module documentation).
fn hash_path(hasher: &RandomState, keys: &[Key]) -> u64 {
    let mut h = hasher.build_hasher();
    for key in keys {
        key.hash(&mut h);
    }
    h.finish()
}

impl Locks {
    /// The hashes of the first 1, 2, ... `keys.len()` keys of `keys`, from one pass.
    pub fn path_hashes(&self, keys: &[Key]) -> PathHashes {
        let mut h = self.hasher.build_hasher();
        keys.iter()
            .map(|key| {
                key.hash(&mut h);
                h.finish()
            })
            .collect()
    }

    /// The slot of the lock whose path is `keys`, if its record is in use.
    pub fn find(&self, keys: &[Key]) -> Option<u32> {
        let s = self.find_any_hashed(keys, hash_path(&self.hasher, keys))?;
        self.get(s).filter(|r| !r.is_unused()).map(|_| s)
    }

    /// The slot of the lock whose path is `keys`, whose hash is `hash`, retired or not (an
    /// operation about to use it).
    pub fn find_any_hashed(&self, keys: &[Key], hash: u64) -> Option<u32> {
        self.index
            .find(hash, |&s| keys_at(&self.slots, s) == Some(keys))
            .copied()
    }

    /// The slot of the first `depth` keys of `lock`, creating an empty record (at `version`) if
    /// there is none; `hash` is the hash of those keys if the caller knows it. `None` only if
    /// 2^32 locks exist.
    pub fn find_or_create(
        &mut self,
        lock: &LockId,
        depth: usize,
        version: u64,
        hash: Option<u64>,
    ) -> Option<u32> {
        let keys = lock.keys().get(..depth)?;
        let hash = hash.unwrap_or_else(|| hash_path(&self.hasher, keys));
        if let Some(s) = self.find_any_hashed(keys, hash) {
            return Some(s);
        }
        self.create_hashed(lock, depth, version, hash)
    }

    /// Creates an empty record (at `version`) for the first `depth` keys of `lock`, whose hash
    /// is `hash`, which must not have one (the caller has just looked). `None` only if 2^32
    /// locks exist.
    pub fn create_hashed(
        &mut self,
        lock: &LockId,
        depth: usize,
        version: u64,
        hash: u64,
    ) -> Option<u32> {
        let id = if depth == lock.depth() {
            lock.clone()
        } else {
            lock.prefix(depth)?
        };
        let record = LockRecord::new(id, version);
        let s = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(record);
                s
            }
            None => {
                let s = u32::try_from(self.slots.len()).ok()?;
                self.slots.push(Some(record));
                s
            }
        };
        let (hasher, slots) = (&self.hasher, &self.slots);
        self.index.insert_unique(hash, s, |&t| {
            // Every slot in the index holds a record (invariant); an empty one hashes as the
            // empty path rather than panicking.
            hash_path(hasher, keys_at(slots, t).unwrap_or(&[]))
        });
        Some(s)
    }

    /// The record in slot `s`.
    pub fn get(&self, s: u32) -> Option<&LockRecord> {
        self.slots.get(s as usize).and_then(Option::as_ref)
    }

    /// The record in slot `s`, mutably.
    pub fn get_mut(&mut self, s: u32) -> Option<&mut LockRecord> {
        self.slots.get_mut(s as usize).and_then(Option::as_mut)
    }

    /// Retires the record in slot `s`, which has just fallen unused (see the module
    /// documentation).
    pub fn retire(&mut self, s: u32) {
        if let Some(r) = self.get(s) {
            self.retired.push_back((s, r.version));
        }
    }

    /// Deletes the oldest retired records beyond [`RETIRED`] that are still unused. Called
    /// between operations only: an operation may hold the slot of a retired record it found.
    pub fn evict(&mut self) {
        while self.retired.len() > RETIRED {
            let Some((s, version)) = self.retired.pop_front() else {
                break;
            };
            // A listing older than the record's last retirement is not the one that counts.
            if self
                .get(s)
                .is_some_and(|r| r.is_unused() && r.version == version)
            {
                self.remove(s);
            }
        }
    }

    /// Deletes the record in slot `s`.
    fn remove(&mut self, s: u32) {
        if let Some(r) = self.slots.get_mut(s as usize).and_then(Option::take) {
            let hash = hash_path(&self.hasher, r.id.keys());
            if let Ok(entry) = self.index.find_entry(hash, |&t| t == s) {
                entry.remove();
            }
            self.free.push(s);
        }
    }

    /// The records in use in slots `from..from + n`, and whether slots follow (for the
    /// whole-table reads taken a slice at a time: census, report, snapshot). A record keeps
    /// its slot for its whole life, so a pass of slices from 0 sees every record in use for the
    /// whole pass exactly once, whatever changes between two slices.
    pub fn slice(&self, from: usize, n: usize) -> (impl Iterator<Item = &LockRecord>, bool) {
        let more = from.saturating_add(n) < self.slots.len();
        let records = self.slots.iter().skip(from).take(n).flatten();
        (records.filter(|r| !r.is_unused()), more)
    }

    /// How many records are in use.
    pub fn len(&self) -> usize {
        let mut unused: SmallVec<[u32; RETIRED]> = self
            .retired
            .iter()
            .map(|&(s, _)| s)
            .filter(|&s| self.get(s).is_some_and(LockRecord::is_unused))
            .collect();
        unused.sort_unstable();
        unused.dedup();
        self.index.len() - unused.len()
    }

    /// How many records exist, retired ones included (a bound on [`Locks::len`]).
    pub fn capacity_used(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::lock_id;

    fn lock(i: u64) -> LockId {
        lock_id!["t", i]
    }

    /// A record for `lock` in use (one watcher: enough for `is_unused` to say no).
    fn used(locks: &mut Locks, id: &LockId) -> u32 {
        let s = locks.find_or_create(id, id.depth(), 1, None).unwrap();
        locks.get_mut(s).unwrap().add_watcher(7);
        s
    }

    fn unuse(locks: &mut Locks, s: u32) {
        locks.get_mut(s).unwrap().remove_watcher(7);
        locks.retire(s);
    }

    #[test]
    fn a_retired_record_is_reused_and_invisible_meanwhile() {
        let mut locks = Locks::default();
        let a = lock(1);
        let s = used(&mut locks, &a);
        assert_eq!((locks.find(a.keys()), locks.len()), (Some(s), 1));
        unuse(&mut locks, s);
        locks.evict();
        // Kept for reuse, but no one else sees it.
        assert_eq!(locks.find(a.keys()), None);
        assert_eq!(locks.len(), 0);
        assert_eq!(locks.slice(0, usize::MAX).0.count(), 0);
        assert_eq!(locks.slice(0, 10).0.count(), 0);
        assert_eq!(locks.capacity_used(), 1);
        // Taken again: the same slot, and visible again.
        assert_eq!(used(&mut locks, &a), s);
        assert_eq!((locks.find(a.keys()), locks.len()), (Some(s), 1));
    }

    /// Like the version a table operation gives a record it changes.
    fn touch(locks: &mut Locks, s: u32, version: u64) {
        locks.get_mut(s).unwrap().version = version;
    }

    #[test]
    fn a_record_retired_again_is_kept_by_its_last_retirement_not_its_first() {
        // An ancestor every transaction takes and releases, beside a row of its own each time:
        // only the rows may go.
        let mut locks = Locks::default();
        let table = lock_id!["t"];
        let kept = used(&mut locks, &table);
        unuse(&mut locks, kept);
        let mut version = 1;
        for i in 0..(4 * RETIRED as u64) {
            version += 1;
            assert_eq!(used(&mut locks, &table), kept, "transaction {i}");
            let row = used(&mut locks, &lock(i));
            touch(&mut locks, kept, version);
            touch(&mut locks, row, version);
            unuse(&mut locks, row);
            unuse(&mut locks, kept);
            locks.evict();
            let hash = hash_path(&locks.hasher, table.keys());
            assert_eq!(
                locks.find_any_hashed(table.keys(), hash),
                Some(kept),
                "the ancestor was deleted after transaction {i}"
            );
            assert!(locks.retired.len() <= RETIRED);
        }
        // The rows beyond the bound are gone for good.
        assert!(locks.capacity_used() <= RETIRED + 1);
    }

    #[test]
    fn beyond_the_bound_the_oldest_unused_records_are_deleted_and_reused_ones_kept() {
        let mut locks = Locks::default();
        let first = used(&mut locks, &lock(0));
        unuse(&mut locks, first);
        // Reused after its retirement: still listed, but in use, so never deleted.
        assert_eq!(used(&mut locks, &lock(0)), first);
        let n = RETIRED as u64 + 10;
        for i in 1..=n {
            let s = used(&mut locks, &lock(i));
            unuse(&mut locks, s);
            // Retired twice (a slot may be listed more than once).
            locks.retire(s);
            locks.evict();
            assert!(locks.retired.len() <= RETIRED);
        }
        assert_eq!(locks.find(lock(0).keys()), Some(first));
        assert_eq!(locks.len(), 1);
        assert!(
            locks.capacity_used() <= RETIRED + 1,
            "{}",
            locks.capacity_used()
        );
        // The oldest are gone for good, the newest kept for reuse.
        assert_eq!(
            locks.find_any_hashed(lock(1).keys(), hash_path(&locks.hasher, lock(1).keys())),
            None
        );
        let last = lock(n);
        assert!(
            locks
                .find_any_hashed(last.keys(), hash_path(&locks.hasher, last.keys()))
                .is_some()
        );
    }
}
