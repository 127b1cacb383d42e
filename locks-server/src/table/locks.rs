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
//! Invariants: `index` holds `s` exactly when `slots[s]` holds a record, under the hash of that
//! record's keys; free slots are `None` and listed in `free`.

use super::record::LockRecord;
use ahash::RandomState;
use hashbrown::HashTable;
use locks_core::{Key, LockId};
use smallvec::SmallVec;
use std::hash::{BuildHasher, Hash, Hasher};

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

    /// The slot of the lock whose path is `keys`.
    pub fn find(&self, keys: &[Key]) -> Option<u32> {
        self.find_hashed(keys, hash_path(&self.hasher, keys))
    }

    /// [`Locks::find`], with the path's hash already known.
    pub fn find_hashed(&self, keys: &[Key], hash: u64) -> Option<u32> {
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
        if let Some(s) = self.find_hashed(keys, hash) {
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

    /// Deletes the record in slot `s`.
    pub fn remove(&mut self, s: u32) {
        if let Some(r) = self.slots.get_mut(s as usize).and_then(Option::take) {
            let hash = hash_path(&self.hasher, r.id.keys());
            if let Ok(entry) = self.index.find_entry(hash, |&t| t == s) {
                entry.remove();
            }
            self.free.push(s);
        }
    }

    /// Every record, unordered.
    pub fn iter(&self) -> impl Iterator<Item = &LockRecord> {
        self.slots.iter().flatten()
    }

    /// The records in slots `from..from + n`, and whether slots follow (for a count taken a
    /// slice at a time: `super::census`).
    pub fn slice(&self, from: usize, n: usize) -> (impl Iterator<Item = &LockRecord>, bool) {
        let more = from.saturating_add(n) < self.slots.len();
        (self.slots.iter().skip(from).take(n).flatten(), more)
    }

    /// How many records exist.
    pub fn len(&self) -> usize {
        self.index.len()
    }
}
