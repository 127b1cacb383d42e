//! Where a node's agent ids come from, so that threads beginning transactions side by side
//! write no cache line they share.
//!
//! An agent id is the node's name, its incarnation and a serial. Handing out serials one
//! atomic add at a time, and putting in each id a clone of the node's one name `Arc`, made
//! every transaction write two lines that every other thread writes too (the counter, and the
//! `Arc`'s count, which the table, the router and the grant each bump): two threads doing
//! uncontended transactions lost a fifth of their speed to it. So each thread keeps, for the
//! last node it began a transaction on ([`ThreadIds`]):
//! - a **block of serials** ([`SERIAL_BLOCK`] of them, one atomic add per block);
//! - a **copy of the node's name** in an `Arc` of its own. Node ids compare and hash by name,
//!   so a copy is the same id; only pointer-equality shortcuts see the difference.
//!
//! Invariants: every serial is handed out at most once per node incarnation (blocks are
//! disjoint ranges of one counter, and a thread without thread-locals takes single serials from
//! the same counter); on one thread, a later id of a node is larger. Ids made on different
//! threads order by block, not by time: an agent begun later on another thread may compare
//! smaller, by less than the blocks the threads hold. The deadlock rule (the largest agent of
//! a cycle gives way) needs only a total order that every node computes alike; and a waiting
//! agent is still overtaken by only finitely many younger-looking ones (the rest of the blocks
//! already taken), so it cannot give way forever.

use locks_core::{AgentId, NodeId};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many serials a thread takes from its node at once. The router shards its mailboxes by
/// block, so that two threads' agents land in different shards.
pub(crate) const SERIAL_BLOCK: u64 = 64;

/// The source of [`AgentIds::token`]s: unique in the process, never reused.
static TOKENS: AtomicU64 = AtomicU64::new(0);

/// A node's agent id source (see the module documentation).
#[derive(Debug)]
pub(crate) struct AgentIds {
    node: NodeId,
    incarnation: u64,
    /// The first serial no thread has taken yet.
    next: AtomicU64,
    /// Tells this source's thread-local state from another node's.
    token: u64,
}

/// What one thread keeps for the last [`AgentIds`] it drew from.
struct ThreadIds {
    token: u64,
    node: NodeId,
    next: u64,
    end: u64,
}

thread_local! {
    static THREAD_IDS: RefCell<Option<ThreadIds>> = const { RefCell::new(None) };
}

impl AgentIds {
    /// The ids of `node` in `incarnation`, serials from 1.
    pub fn new(node: NodeId, incarnation: u64) -> AgentIds {
        AgentIds {
            node,
            incarnation,
            next: AtomicU64::new(1),
            token: TOKENS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A fresh agent id.
    pub fn next(&self) -> AgentId {
        let from_thread = THREAD_IDS.try_with(|ids| {
            let mut ids = ids.borrow_mut();
            let ids = match &mut *ids {
                Some(ids) if ids.token == self.token => ids,
                slot => slot.insert(ThreadIds {
                    token: self.token,
                    node: NodeId::new(self.node.as_str()).unwrap_or_else(|_| self.node.clone()),
                    next: 0,
                    end: 0,
                }),
            };
            if ids.next == ids.end {
                ids.next = self.next.fetch_add(SERIAL_BLOCK, Ordering::Relaxed);
                ids.end = ids.next.saturating_add(SERIAL_BLOCK);
            }
            let serial = ids.next;
            ids.next += 1;
            AgentId::new(ids.node.clone(), self.incarnation, serial)
        });
        // A thread being torn down has no thread-locals left: one serial from the counter.
        from_thread.unwrap_or_else(|_| {
            let serial = self.next.fetch_add(1, Ordering::Relaxed);
            AgentId::new(self.node.clone(), self.incarnation, serial)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn ids(name: &str) -> AgentIds {
        AgentIds::new(NodeId::new(name).unwrap(), 7)
    }

    #[test]
    fn one_thread_gets_growing_ids_of_its_node() {
        let src = ids("n");
        let got: Vec<AgentId> = (0..3 * SERIAL_BLOCK).map(|_| src.next()).collect();
        assert!(got.windows(2).all(|w| w[0] < w[1]));
        assert!(
            got.iter()
                .all(|a| a.node().as_str() == "n" && a.incarnation() == 7)
        );
    }

    #[test]
    fn threads_never_get_the_same_id() {
        let src = std::sync::Arc::new(ids("n"));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let src = src.clone();
                std::thread::spawn(move || (0..500).map(|_| src.next()).collect::<Vec<_>>())
            })
            .collect();
        let mut seen = HashSet::new();
        for h in handles {
            for id in h.join().unwrap() {
                assert!(
                    seen.insert(id.serial()),
                    "serial {} handed out twice",
                    id.serial()
                );
            }
        }
        assert_eq!(seen.len(), 2000);
    }

    #[test]
    fn two_nodes_drawn_in_turn_on_one_thread_keep_their_own_serials() {
        let (a, b) = (ids("a"), ids("b"));
        let mut from_a = Vec::new();
        for _ in 0..10 {
            from_a.push(a.next());
            let other = b.next();
            assert_eq!(other.node().as_str(), "b");
        }
        assert!(from_a.windows(2).all(|w| w[0] < w[1]));
        let serials: HashSet<u64> = from_a.iter().map(AgentId::serial).collect();
        assert_eq!(serials.len(), 10);
    }
}
