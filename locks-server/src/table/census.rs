//! How many locks and entries the table has per mode: what the node's sampled gauges show
//! (`crate::metrics`). Read-only; one pass over the records, run about once a second by the
//! node's sampler, so nothing is kept up to date on the grant path.
//!
//! The pass is taken `SLICE` record slots at a time: a million locks take 10-20 ms to count,
//! which under one hold of the table's mutex would stall every fast-path call for as long, and
//! on the node's thread every actor. A slice holds the mutex for some tens of microseconds, and
//! the sampler yields between slices. The counts are then not of one instant (a lock may move
//! between slices), which gauges sampled once a second do not need.

use super::{LockTable, SLICE};
use locks_core::Mode;

/// Counts per mode, indexed by [`Mode::index`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Census {
    /// Lock ids with at least one holder, by the group mode of their holders.
    pub held: [u64; Mode::COUNT],
    /// Granted entries, by the mode held (a converting entry counts with what it holds).
    pub granted: [u64; Mode::COUNT],
    /// Waiting or converting entries, by the mode they wait for.
    pub waiting: [u64; Mode::COUNT],
}

impl LockTable {
    /// Counts the table's locks and entries per mode in one go (see [`Census`]).
    #[cfg(test)]
    pub(crate) fn census(&self) -> Census {
        let mut census = Census::default();
        let mut from = Some(0);
        while let Some(start) = from {
            from = self.census_slice(&mut census, start);
        }
        census
    }

    /// Adds the counts of the [`SLICE`] record slots from `from` to `census`; returns where
    /// the next slice starts, `None` after the last.
    pub(crate) fn census_slice(&self, census: &mut Census, from: usize) -> Option<usize> {
        let (records, more) = self.locks.slice(from, SLICE);
        for record in records {
            if let Some(group) = record.group(&self.modes) {
                census.held[group.index()] += 1;
            }
            for entry in record.entries() {
                if let Some(held) = entry.held {
                    census.granted[held.index()] += 1;
                }
                if let Some(want) = entry.want {
                    census.waiting[want.index()] += 1;
                }
            }
        }
        more.then_some(from + SLICE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::proto::ServerRequest;
    use locks_core::{AgentId, ModeTable, NodeId, lock_id};

    #[test]
    fn counts_holders_waiters_and_intention_entries() {
        let node = NodeId::new("n").unwrap();
        let mut table = LockTable::new(node.clone(), ModeTable::standard(), 0);
        let agent = |s| AgentId::new(node.clone(), 1, s);
        let lock = |a, id, mode| ServerRequest::Lock {
            agent: agent(a),
            lock: id,
            mode,
        };
        let _ = table.handle(lock(1, lock_id!["a", "b"], Mode::X));
        let _ = table.handle(lock(2, lock_id!["a", "b"], Mode::S));
        let census = table.census();
        // ["a"]: IX (agent 1) and IS (agent 2) granted, group IX; ["a", "b"]: X held, S waits.
        assert_eq!(census.held[Mode::IX.index()], 1);
        assert_eq!(census.held[Mode::X.index()], 1);
        assert_eq!(census.granted[Mode::IX.index()], 1);
        assert_eq!(census.granted[Mode::IS.index()], 1);
        assert_eq!(census.granted[Mode::X.index()], 1);
        assert_eq!(census.waiting[Mode::S.index()], 1);
        assert_eq!(census.waiting.iter().sum::<u64>(), 1);
    }

    #[test]
    fn slices_add_up_to_the_whole_table() {
        let node = NodeId::new("n").unwrap();
        let mut table = LockTable::new(node.clone(), ModeTable::standard(), 0);
        let n = 2 * SLICE as i64 + 7;
        for i in 0..n {
            let _ = table.handle(ServerRequest::Lock {
                agent: AgentId::new(node.clone(), 1, 1),
                lock: lock_id!["s", i],
                mode: Mode::S,
            });
        }
        let census = table.census();
        assert_eq!(census.granted[Mode::S.index()], n as u64);
        assert_eq!(census.held[Mode::S.index()], n as u64);
        // ["s"] itself: IS, one holder.
        assert_eq!(census.held[Mode::IS.index()], 1);
    }
}
