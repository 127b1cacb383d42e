//! A bounded copy of the table for cluster introspection ([`LockTable::report`]): the first
//! locks by id, with their queues, and how many locks there are in all.
//!
//! Invariant: the work is bounded by what the caller asks for, not by what the table holds
//! beyond one pass over it: memory is O(`max_locks`) (a max-heap keeps the smallest ids seen
//! so far, so a table of a million locks asked for ten copies ten), time O(n log `max_locks`).
//! The report is sorted by lock id, like [`LockTable::snapshot`].

use super::record::LockRecord;
use super::{LockTable, notify};
use locks_core::proto::{LockReport, TableReport};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A record ordered by its lock id (the heap's order).
struct ById<'t>(&'t LockRecord);

impl PartialEq for ById<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for ById<'_> {}

impl PartialOrd for ById<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ById<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.id.cmp(&other.0.id)
    }
}

impl LockTable {
    /// The first `max_locks` locks by id with their queues, and the number of locks in the
    /// table (see [`TableReport`]; `id` is left 0 for the caller to set).
    pub fn report(&self, max_locks: usize) -> TableReport {
        // The largest kept id is on top: a smaller one replaces it.
        let mut kept: BinaryHeap<ById<'_>> = BinaryHeap::with_capacity(max_locks.min(1024));
        let mut total: u64 = 0;
        for rec in self.locks.iter() {
            total += 1;
            if kept.len() < max_locks {
                kept.push(ById(rec));
            } else if let Some(mut top) = kept.peek_mut()
                && rec.id < top.0.id
            {
                *top = ById(rec);
            }
        }
        let locks = kept
            .into_sorted_vec()
            .into_iter()
            .map(|ById(rec)| LockReport {
                lock: rec.id.clone(),
                view: notify::view(rec, &self.modes, &self.agents),
            })
            .collect();
        TableReport {
            id: 0,
            node: self.node.clone(),
            version: self.version,
            total_locks: total,
            locks,
        }
    }
}
