//! Who gives way in a deadlock, and what it gives up: the victim order, decided here and
//! nowhere else.
//!
//! **The victim order** ([`victim_order`]): of the agents on one cycle, the greatest by this
//! order is the victim. [`ViewGraph`](super::graph::ViewGraph) names a cycle's victim with it
//! (`cycle_of`, `victim_cycle`), and the probe (`agent/probe.rs`, `give_way`) checks with it that
//! no agent of a confirmed cycle outranks the one about to give way. It compares the ids'
//! `(node, incarnation, serial)`, written out here (not taken from [`AgentId`]'s `Ord`, which
//! orders ids for maps and logs): every agent computes it from ids alone, so all agents that
//! know the same edges name the same victim.
//!
//! **The lock it gives up** ([`lock_given_up`]): the smallest `(lock, node)` copy on an edge
//! into the victim from inside its cycle.
//!
//! To make the victim another agent of the cycle, change [`victim_order`]: the graph, the probe
//! and the tests of `graph/tests.rs` follow it, and nothing else compares agent ids for this
//! purpose. An order by what the ids hold is this one change. The present order already makes
//! the later of two transactions of one thread (the larger serial) the victim; an order by real
//! age across threads and nodes needs the age in the id as well (`locks-core/src/ident.rs`, made
//! in `locks-server/src/agent_ids.rs`): see ARCHITECTURE.md, "A different victim order".

use locks_core::{AgentId, LockId, NodeId};
use std::cmp::Ordering;

/// The victim order: `Greater` when `a` gives way before `b` (of the agents of a cycle, the
/// greatest is the victim).
///
/// ```
/// use locks_agent::state_machine::victim_order;
/// use locks_core::{AgentId, NodeId};
/// use std::cmp::Ordering;
///
/// let node = NodeId::new("n1").unwrap();
/// let older = AgentId::new(node.clone(), 1, 1);
/// let newer = AgentId::new(node, 1, 2);
/// assert_eq!(victim_order(&newer, &older), Ordering::Greater);
/// ```
pub fn victim_order(a: &AgentId, b: &AgentId) -> Ordering {
    fn key(x: &AgentId) -> (&NodeId, u64, u64) {
        (x.node(), x.incarnation(), x.serial())
    }
    key(a).cmp(&key(b))
}

/// The copy the victim gives up, from the `(lock, node)` copies labelling the edges into it
/// from its cycle: the smallest.
pub fn lock_given_up<'a>(
    into_victim: impl IntoIterator<Item = &'a (LockId, NodeId)>,
) -> Option<&'a (LockId, NodeId)> {
    into_victim.into_iter().min()
}
