//! A bounded copy of the table for cluster introspection ([`LockTable::report`]): the first
//! locks by id, with their queues, and how many locks there are in all.
//!
//! The report is made in two parts, so that a sharded node can take it a slice at a time
//! (`crate::local`) and copy only what it lists:
//! - **picking** ([`Picks`], [`LockTable::pick_slice`]): the ids of the first `max_locks`
//!   locks by id among those offered, and how many were offered. Memory is O(`max_locks`) (a
//!   max-heap keeps the smallest ids seen so far, so a table of a million locks asked for ten
//!   keeps ten ids), time O(log `max_locks`) per lock offered; nothing but ids is copied;
//! - **viewing** ([`LockTable::lock_reports`]): the queue of each picked lock, read when the
//!   picking is done.
//!
//! The report is sorted by lock id, like [`LockTable::snapshot`], and lists each lock once.

use super::{LockTable, SLICE};
use locks_core::LockId;
use locks_core::proto::{LockReport, TableReport};
use std::collections::BinaryHeap;

/// The first lock ids by id among those offered, at most `max` of them, and how many were
/// offered (see the module documentation).
#[derive(Debug)]
pub(crate) struct Picks {
    max: usize,
    /// The largest kept id is on top: a smaller one replaces it.
    heap: BinaryHeap<LockId>,
    offered: u64,
}

impl Picks {
    /// Keeps at most `max` ids.
    pub fn new(max: usize) -> Picks {
        Picks {
            max,
            heap: BinaryHeap::with_capacity(max.min(1024)),
            offered: 0,
        }
    }

    /// Offers one lock's id.
    pub fn offer(&mut self, id: &LockId) {
        self.offered += 1;
        if self.heap.len() < self.max {
            self.heap.push(id.clone());
        } else if let Some(mut top) = self.heap.peek_mut()
            && *id < *top
        {
            *top = id.clone();
        }
    }

    /// How many ids were offered.
    pub fn offered(&self) -> u64 {
        self.offered
    }

    /// The kept ids, sorted, each once (an id offered twice, by a lock seen before and after
    /// it moved to another slot, is listed once).
    pub fn into_ids(self) -> Vec<LockId> {
        let mut ids = self.heap.into_sorted_vec();
        ids.dedup();
        ids
    }
}

impl LockTable {
    /// Offers the ids of the locks in record slots `from..from + SLICE` to `picks`; returns
    /// where the next slice starts, `None` after the last. Every lock in use for the whole of
    /// a pass of slices is offered exactly once.
    pub(crate) fn pick_slice(&self, picks: &mut Picks, from: usize) -> Option<usize> {
        let (records, more) = self.locks.slice(from, SLICE);
        for rec in records {
            picks.offer(&rec.id);
        }
        more.then_some(from + SLICE)
    }

    /// The queues of the locks `ids`, in their order, leaving out those that do not exist.
    pub(crate) fn lock_reports<'a>(
        &'a self,
        ids: impl IntoIterator<Item = &'a LockId> + 'a,
    ) -> impl Iterator<Item = LockReport> + 'a {
        ids.into_iter().filter_map(|id| {
            Some(LockReport {
                lock: id.clone(),
                view: self.view(id)?,
            })
        })
    }

    /// The first `max_locks` locks by id with their queues, and the number of locks in the
    /// table (see [`TableReport`]; `id` is left 0 for the caller to set).
    pub fn report(&self, max_locks: usize) -> TableReport {
        let mut picks = Picks::new(max_locks);
        let mut from = Some(0);
        while let Some(start) = from {
            from = self.pick_slice(&mut picks, start);
        }
        let total_locks = picks.offered();
        let ids = picks.into_ids();
        TableReport {
            id: 0,
            node: self.node.clone(),
            version: self.version,
            total_locks,
            locks: self.lock_reports(&ids).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::lock_id;

    #[test]
    fn picks_keep_the_smallest_ids_sorted_and_count_every_offer() {
        let mut picks = Picks::new(3);
        for i in [9i64, 4, 7, 1, 8, 2, 6, 2] {
            picks.offer(&lock_id!["k", i]);
        }
        assert_eq!(picks.offered(), 8);
        // 2 was offered twice (a lock that moved): listed once.
        assert_eq!(
            picks.into_ids(),
            [lock_id!["k", 1], lock_id!["k", 2]],
            "the second offer of 2 took a place: nothing larger came in"
        );
        let mut none = Picks::new(0);
        none.offer(&lock_id!["k"]);
        assert_eq!((none.offered(), none.into_ids()), (1, vec![]));
    }

    #[test]
    fn picks_match_a_full_sort_whatever_the_order_offered() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut ids: Vec<LockId> = (0..2000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                lock_id!["k", (state % 5000) as i64]
            })
            .collect();
        ids.sort();
        ids.dedup();
        for max in [0, 1, 10, 500, 5000] {
            let mut picks = Picks::new(max);
            // Largest first: every offer replaces the top.
            for id in ids.iter().rev() {
                picks.offer(id);
            }
            let want: Vec<LockId> = ids.iter().take(max).cloned().collect();
            assert_eq!(picks.into_ids(), want, "max {max}");
        }
    }
}
