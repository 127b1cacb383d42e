//! The first node a candidate asks: the election lock is asked for on one node first, the
//! *first node* (the smallest node the candidate considers up), and on the others only once
//! the candidate holds the lock there.
//!
//! **Why.** Candidates that all ask for the lock on every node at once each get it first on
//! some nodes (their own, at least) and wait on the others: every election starts as a
//! knot of N-way deadlocks over N nodes, which the agents' deadlock resolution untangles one
//! surrender at a time, each with its views forwarded among the agents involved. Through the
//! first node, candidates that see the same nodes queue on one node; its holder alone asks the
//! others, and nobody holds anything there to make it wait: no cycle, and the cost of an
//! election is each candidate's queue entry on the first node and the holder's requests.
//!
//! **The rule.** A candidate's request covers the first node, and every node it considers up (but
//! those a majority-mode leader defers: module `tenure`) once it holds the lock on every node
//! it asked. A node that comes up is asked at once when the request already covers every node
//! up, or when it becomes the first node; otherwise once the first node is held. When the first node goes down,
//! the next smallest node is the first node, and the request covers it too. Requests only grow
//! (until nodes go down).
//!
//! **Why it is safe.** Who leads is decided by the lock on every node the member
//! considers up (the member counts as having all its locks only when its request covers them:
//! [`MemberCore::covers_alive`]) and, in majority mode, on a majority of the group's nodes;
//! the first node changes only the order in which a candidate asks, so no two members lead at once
//! in majority mode for the same reasons as without it (modules `majority` and `tenure`).
//!
//! **Why no deadlock is left.** The first node does not make cycles impossible: candidates with
//! different views of the nodes up have different first nodes, and a first node moves when a smaller node
//! comes up or the first node goes down, while a candidate keeps the grants it has elsewhere. Such a
//! candidate waits on the new first node behind another that holds it and waits on a node the first
//! one holds: a cycle, which the agents' deadlock resolution breaks as it breaks any other.
//! That resolution forwards views only to agents on nodes the forwarding agent considers up
//! (a message to a node that is down would be lost), so the agent must know every node that
//! is up, whether the request names it yet or not: the member tells its agent of every node
//! that comes up ([`MemberCore::agent_sees_up`]) as it tells it of every node that goes down.
//! An agent left believing such a node down would never pass its edges to the cycle's other
//! agents living there, and the cycle would stay. The one exception is a majority-mode
//! leader's deferred nodes (module `tenure`): a leader holds every lock it asked for and waits
//! for nobody, so it is on no cycle, and it tells its agent of them when it steps down.

use super::MemberCore;
use crate::callbacks::Callbacks;
use locks_core::NodeId;
use std::collections::BTreeSet;

impl<C: Callbacks> MemberCore<C> {
    /// The node a candidate asks first: the smallest it considers up.
    pub(super) fn first_node(&self) -> Option<NodeId> {
        self.s.alive.iter().next().cloned()
    }

    /// The nodes the election request names.
    pub(super) fn requested(&self) -> BTreeSet<NodeId> {
        self.s
            .agent
            .as_ref()
            .and_then(|a| a.request_on(&self.s.lock))
            .map(|r| r.nodes.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether the request names every node the member considers up (but deferred ones).
    pub(super) fn covers_alive(&self) -> bool {
        let requested = self.requested();
        self.s
            .alive
            .iter()
            .all(|n| requested.contains(n) || self.s.deferred.contains(n))
    }

    /// Whether a node that just came up is to be asked now (see the module documentation).
    pub(super) fn asks_at_once(&self, node: &NodeId) -> bool {
        let requested = self.requested();
        requested.contains(node)
            || self.first_node().as_ref() == Some(node)
            || self
                .s
                .alive
                .iter()
                .filter(|n| *n != node)
                .all(|n| requested.contains(n) || self.s.deferred.contains(n))
    }

    /// Extends the request as the first node says: to the first node if it moved, to every node up once
    /// the lock is held on every node asked.
    pub(super) fn widen(&mut self) {
        if self.s.stopped {
            return;
        }
        let Some(agent) = &self.s.agent else {
            return;
        };
        let held_all = agent.status().have_all_locks();
        if held_all && !self.s.watch_all {
            // A holder of the first node asks every node, and a would-be leader needs their views
            // (its poll, module `majority`): from now on the member watches every node up.
            self.s.watch_all = true;
            self.refresh_watches();
        }
        let requested = self.requested();
        let missing: Vec<NodeId> = match self.first_node() {
            // A node deferred by a leader stays so (module `tenure`), even as its first node.
            Some(g) if !requested.contains(&g) && !self.s.deferred.contains(&g) => vec![g],
            _ if held_all => self
                .s
                .alive
                .iter()
                .filter(|n| !requested.contains(*n) && !self.s.deferred.contains(*n))
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        for node in missing {
            self.extend_request(&node);
        }
    }

    /// Tells the agent that `node` is up when the request is not extended to it now (it is
    /// asked later, once the first node is held): the agent forwards views to the agents living
    /// there from now on (see the module documentation).
    pub(super) fn agent_sees_up(&mut self, node: &NodeId) {
        if let Some(agent) = &mut self.s.agent {
            let effects = agent.node_up(node);
            self.agent_effects(effects);
        }
    }
}
