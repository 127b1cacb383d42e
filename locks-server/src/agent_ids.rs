//! Where a node's agent ids come from, so that threads beginning transactions side by side
//! write no cache line they share.
//!
//! An agent id is the node's name, its incarnation and a serial. Handing out serials one
//! atomic add at a time, and putting in each id a clone of the node's one name `Arc`, would
//! make every transaction write two lines that every other thread writes too (the counter, and
//! the `Arc`'s count, which the table, the router and the grant each bump). So each thread
//! keeps, for the last node it began a transaction on ([`ThreadIds`]):
//! - a **block of serials** ([`SERIAL_BLOCK`] of them, one atomic add per block);
//! - a **copy of the node's name** in an `Arc` of its own. Node ids compare and hash by name,
//!   so a copy is the same id; only pointer-equality shortcuts see the difference.
//!
//! Each block is registered with the router when the thread takes it, and its word says which
//! of its transactions are live ([`AgentIds::begin`]; `crate::router::agents`), so that a
//! transaction needs no mailbox until a message comes for it. A serial handed out for an agent
//! that registers its own mailbox ([`AgentIds::next`]), and the serials a thread leaves unused
//! when it ends or draws from another node, are marked gone at once, so that the block is
//! forgotten when its last transaction ends.
//!
//! Invariants: every serial is handed out at most once per node incarnation (blocks are
//! disjoint ranges of one counter, and a thread without thread-locals takes a whole block for
//! a single serial, so that blocks stay aligned); on one thread, a later id of a node is larger. Ids made on different
//! threads order by block, not by time: an agent begun later on another thread may compare
//! smaller, by less than the blocks the threads hold. The deadlock rule (the largest agent of
//! a cycle gives way) needs only a total order that every node computes alike; and a waiting
//! agent is still overtaken by only finitely many younger-looking ones (the rest of the blocks
//! already taken), so it cannot give way forever.

use crate::router::agents::{Agents, Block, Presence, SERIAL_BLOCK, block_of};
use locks_core::{AgentId, NodeId};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// The source of [`AgentIds::token`]s: unique in the process, never reused.
static TOKENS: AtomicU64 = AtomicU64::new(0);

/// A node's agent id source (see the module documentation).
#[derive(Debug)]
pub(crate) struct AgentIds {
    node: NodeId,
    incarnation: u64,
    /// The first serial no thread has taken yet: always the first of a block.
    next: AtomicU64,
    /// Tells this source's thread-local state from another node's.
    token: u64,
    /// The router's registry of mailboxes and blocks.
    agents: Arc<Agents>,
}

/// What one thread keeps for the last [`AgentIds`] it drew from.
struct ThreadIds {
    token: u64,
    node: NodeId,
    next: u64,
    end: u64,
    /// The block `next..end` belongs to, registered with the router.
    block: Option<Arc<Block>>,
    agents: Weak<Agents>,
}

impl Drop for ThreadIds {
    /// The serials the thread will not hand out are gone (the thread ends, or draws from
    /// another node now), so that its block can be forgotten once its transactions end.
    fn drop(&mut self) {
        if let (Some(block), Some(agents)) = (&self.block, self.agents.upgrade()) {
            agents.forgo(block, self.next..self.end);
        }
    }
}

thread_local! {
    static THREAD_IDS: RefCell<Option<ThreadIds>> = const { RefCell::new(None) };
}

impl AgentIds {
    /// The ids of `node` in `incarnation`, serials from 1, their blocks registered in `agents`.
    pub fn new(node: NodeId, incarnation: u64, agents: Arc<Agents>) -> AgentIds {
        AgentIds {
            node,
            incarnation,
            next: AtomicU64::new(1),
            token: TOKENS.fetch_add(1, Ordering::Relaxed),
            agents,
        }
    }

    /// A serial from the calling thread's block (taking a new block when it has none left):
    /// the id and its block. `None` on a thread being torn down, which has no thread-locals.
    fn draw(&self) -> Option<(AgentId, Arc<Block>)> {
        THREAD_IDS
            .try_with(|ids| {
                let mut ids = ids.borrow_mut();
                let ids = match &mut *ids {
                    Some(ids) if ids.token == self.token => ids,
                    slot => slot.insert(ThreadIds {
                        token: self.token,
                        node: NodeId::new(self.node.as_str()).unwrap_or_else(|_| self.node.clone()),
                        next: 0,
                        end: 0,
                        block: None,
                        agents: Arc::downgrade(&self.agents),
                    }),
                };
                if ids.next == ids.end || ids.block.is_none() {
                    ids.next = self.next.fetch_add(SERIAL_BLOCK, Ordering::Relaxed);
                    ids.end = ids.next.saturating_add(SERIAL_BLOCK);
                    ids.block = Some(self.agents.new_block(self.incarnation, block_of(ids.next)));
                }
                let serial = ids.next;
                ids.next += 1;
                let block = ids.block.clone()?;
                Some((
                    AgentId::new(ids.node.clone(), self.incarnation, serial),
                    block,
                ))
            })
            .ok()
            .flatten()
    }

    /// A serial of a block of its own, for a thread without thread-locals: no other serial
    /// of that block is ever handed out, so it is in no block's word.
    fn single(&self) -> AgentId {
        let serial = self.next.fetch_add(SERIAL_BLOCK, Ordering::Relaxed);
        AgentId::new(self.node.clone(), self.incarnation, serial)
    }

    /// A fresh agent id for an agent that registers its mailbox itself
    /// ([`crate::embed::Router::register_agent`] or `register_idle_agent`).
    pub fn next(&self) -> AgentId {
        match self.draw() {
            Some((id, block)) => {
                self.agents.forgo(&block, id.serial()..id.serial() + 1);
                id
            }
            None => self.single(),
        }
    }

    /// A fresh agent id for a transaction that begins now, live without a mailbox until a
    /// message comes for it (see `crate::router::agents`). On a thread without thread-locals
    /// its mailbox is registered at once instead.
    pub fn begin(&self) -> Presence {
        match self.draw() {
            Some((id, block)) => {
                self.agents.begin(&block, id.serial());
                Presence {
                    id,
                    block: Some(block),
                }
            }
            None => {
                let id = self.single();
                self.agents.register_idle(id.clone());
                Presence { id, block: None }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn ids(name: &str) -> AgentIds {
        AgentIds::new(NodeId::new(name).unwrap(), 7, Arc::default())
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

    #[test]
    fn ids_of_both_kinds_grow_together_on_one_thread() {
        let src = ids("n");
        let got: Vec<AgentId> = (0..2 * SERIAL_BLOCK)
            .map(|i| match i % 3 {
                0 => src.next(),
                _ => src.begin().id().clone(),
            })
            .collect();
        assert!(got.windows(2).all(|w| w[0] < w[1]));
    }

    /// A thread that ends with serials of its block unused leaves the block to be forgotten
    /// with its last transaction's end, wherever that ends; so does a block used up.
    #[test]
    fn a_block_is_forgotten_once_its_thread_is_gone_and_its_transactions_ended() {
        let agents: Arc<Agents> = Arc::default();
        let src = Arc::new(AgentIds::new(NodeId::new("n").unwrap(), 7, agents.clone()));
        let thread_src = src.clone();
        let presences = std::thread::spawn(move || {
            (0..SERIAL_BLOCK + 3)
                .map(|i| match i % 2 {
                    0 => thread_src.begin(),
                    _ => {
                        let _ = thread_src.next();
                        thread_src.begin()
                    }
                })
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        assert_eq!(agents.count(), presences.len());
        for presence in &presences {
            agents.end(presence);
        }
        assert_eq!(agents.count(), 0);
        assert!(
            agents.is_empty(),
            "a block outlived its thread and its transactions"
        );
    }
}
