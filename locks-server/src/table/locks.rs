//! The map from lock ids to lock records.
//!
//! Records live in a slab (`Vec`) and the hash map only maps a lock id to its slot, so the map's
//! buckets stay small (a lock id and a `u32`) for a table of millions of locks. Lookups take a
//! key slice, so finding the ancestors of a lock allocates nothing.
//!
//! Invariants: `map[id] == s` exactly when `slots[s]` holds the record of `id`; free slots are
//! `None` and listed in `free`.

use super::record::LockRecord;
use ahash::RandomState;
use locks_core::{Key, LockId};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// A lock id as a map key that can be looked up by its key slice.
#[derive(Clone, Debug)]
struct PathKey(LockId);

impl Hash for PathKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.keys().hash(state);
    }
}

impl PartialEq for PathKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.keys() == other.0.keys()
    }
}

impl Eq for PathKey {}

impl Borrow<[Key]> for PathKey {
    fn borrow(&self) -> &[Key] {
        self.0.keys()
    }
}

/// The lock records of a table.
#[derive(Debug, Default)]
pub(super) struct Locks {
    map: HashMap<PathKey, u32, RandomState>,
    slots: Vec<Option<LockRecord>>,
    free: Vec<u32>,
}

impl Locks {
    /// The slot of the lock whose path is `keys`.
    pub fn find(&self, keys: &[Key]) -> Option<u32> {
        self.map.get(keys).copied()
    }

    /// The slot of the first `depth` keys of `lock`, creating an empty record (at `version`) if
    /// there is none. `None` only if 2^32 locks exist.
    pub fn find_or_create(&mut self, lock: &LockId, depth: usize, version: u64) -> Option<u32> {
        let keys = lock.keys().get(..depth)?;
        if let Some(s) = self.find(keys) {
            return Some(s);
        }
        let id = if depth == lock.depth() {
            lock.clone()
        } else {
            lock.prefix(depth)?
        };
        let record = LockRecord::new(id.clone(), version);
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
        self.map.insert(PathKey(id), s);
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
            self.map.remove(r.id.keys());
            self.free.push(s);
        }
    }

    /// Every record, unordered.
    pub fn iter(&self) -> impl Iterator<Item = &LockRecord> {
        self.slots.iter().flatten()
    }

    /// How many records exist.
    pub fn len(&self) -> usize {
        self.map.len()
    }
}
