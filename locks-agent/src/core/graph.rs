//! The wait-for graph over agents, built from lock views, and the choice of a deadlock's victim.
//!
//! Pure: [`ViewGraph::build`] takes lock views (a queue of one lock on one node at one
//! version) and the mode table; everything else is a question to the graph. The graph is
//! rebuilt from scratch on every analysis, so a stale edge cannot outlive the view it came from.
//!
//! **Edges** come from each view by the rules of [`locks_core::waits`] (who waits for whom in
//! one queue); each edge is labelled with the `(lock, node)` copies that cause it.
//!
//! **Deadlocks.** A cycle of two or more agents is a deadlock, and its greatest agent by
//! [`victim_order`] is its victim (see [`super::victim`]): an agent must give way exactly when
//! it lies on a cycle of agents it does not rank below, that is, when it is in a strongly
//! connected component (petgraph's `tarjan_scc`) of two or more agents of the graph restricted
//! to agents up to itself by that order.
//! This is a property of the graph alone, so every agent that knows the same edges names the
//! same victims, whatever order it learnt them in. Deciding by cycle rather than by whole
//! component also keeps the real victim acting when other agents' knowledge is outdated: a
//! stale edge can merge components and make some larger agent look like the victim, but it
//! cannot hide a real cycle from that cycle's largest agent. (A decision taken on a stale edge
//! is harmless: the surrender names the version it saw, and the server ignores a stale one.)
//!
//! The victim gives up the copy [`lock_given_up`] picks among the `(lock, node)` labels of the
//! edges into it from its component: a lock it holds (or is queued ahead on) that another
//! agent of the cycle waits for.

use super::victim::{lock_given_up, victim_order};
use locks_core::proto::LockView;
use locks_core::waits::pending_of;
pub(crate) use locks_core::waits::{
    ViewIndex, blockers_of, holders_blocking, is_waited_for, view_edges,
};
use locks_core::{AgentId, LockId, ModeTable, NodeId};
use petgraph::Direction;
use petgraph::dot::Dot;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::{EdgeRef, NodeFiltered};
use std::collections::{BTreeSet, HashMap};
use std::fmt;

/// Up to this many agents, [`ViewGraph::build`] numbers them by binary search.
const SEARCH_AT_MOST: usize = 32;

/// The `(lock, node)` copies that make one agent wait for another.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitLabel(pub BTreeSet<(LockId, NodeId)>);

impl fmt::Display for WaitLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (lock, node)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{lock}@{node}")?;
        }
        Ok(())
    }
}

/// A deadlock found in the graph: a strongly connected component of two or more agents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    /// The agents of the component, in increasing id order.
    pub agents: Vec<AgentId>,
    /// The greatest of them by [`victim_order`]: the agent that must give way.
    pub victim: AgentId,
    /// The lock the victim gives up ([`lock_given_up`] of the copies on the edges into the
    /// victim from inside the component).
    pub lock: LockId,
    /// The node of that lock.
    pub node: NodeId,
}

/// Who waits for whom, according to a set of lock views: an agent's wait-for graph (the
/// cluster's, read from the tables, is `locks_server::WaitForGraph`).
#[derive(Clone, Debug, Default)]
pub struct ViewGraph {
    /// Vertices in increasing id order, so a vertex is found by binary search.
    graph: DiGraph<AgentId, WaitLabel>,
}

impl ViewGraph {
    /// Builds the graph from lock views (see the module documentation for the edges).
    ///
    /// Cost: linear in the views and their edges, plus sorting the agents and the edges (which
    /// keeps the result independent of the order of the views). Agents are numbered by their
    /// place in id order and edges sorted as numbers, so no agent id is cloned per edge.
    pub fn build<'a>(
        modes: &ModeTable,
        views: impl IntoIterator<Item = (&'a LockId, &'a NodeId, &'a LockView)>,
    ) -> ViewGraph {
        Self::build_excusing(modes, views, |_, _, _| false)
    }

    /// Builds the graph from lock views, leaving out the edges of waiters that `excused` says
    /// do not wait on that copy (they told the builder so: see `core/agent/probe.rs`).
    pub fn build_excusing<'a>(
        modes: &ModeTable,
        views: impl IntoIterator<Item = (&'a LockId, &'a NodeId, &'a LockView)>,
        excused: impl Fn(&LockId, &NodeId, &AgentId) -> bool,
    ) -> ViewGraph {
        let views: Vec<(&LockId, &NodeId, &LockView)> = views.into_iter().collect();
        // Vertices and edges go in sorted order, so the graph (and its DOT text) depends only on
        // the views, never on the order they were learnt in.
        let mut agents: Vec<&AgentId> = views
            .iter()
            .flat_map(|(_, _, v)| {
                v.granted
                    .iter()
                    .map(|e| &e.agent)
                    .chain(pending_of(v).map(|(a, _)| a))
            })
            .collect();
        agents.sort_unstable();
        agents.dedup();
        let mut graph = DiGraph::with_capacity(agents.len(), 0);
        for a in &agents {
            graph.add_node((*a).clone());
        }
        // A vertex's index is its place in `agents`. An analysis usually sees a few agents, for
        // which a binary search costs less than building a map; a hot queue's thousands get one.
        let map: Option<HashMap<&AgentId, usize>> = (agents.len() > SEARCH_AT_MOST)
            .then(|| agents.iter().enumerate().map(|(i, a)| (*a, i)).collect());
        let number = |a: &AgentId| {
            let place = match &map {
                Some(map) => map.get(a).copied(),
                None => agents.binary_search(&a).ok(),
            };
            NodeIndex::new(
                place.unwrap_or_else(|| unreachable!("every agent of a view is a vertex")),
            )
        };
        // Node indices follow the id order, so sorting `(waiter, blocker, view)` by number sorts
        // the edges by id, with all the views of one edge together.
        let mut edges: Vec<(NodeIndex, NodeIndex, usize)> = Vec::new();
        for (k, (_, _, view)) in views.iter().enumerate() {
            edges.extend(
                view_edges(modes, view)
                    .into_iter()
                    .filter(|(w, _)| !excused(views[k].0, views[k].1, w))
                    .map(|(w, b)| (number(w), number(b), k)),
            );
        }
        edges.sort_unstable();
        for run in edges.chunk_by(|x, y| (x.0, x.1) == (y.0, y.1)) {
            let label = run
                .iter()
                .map(|&(_, _, k)| (views[k].0.clone(), views[k].1.clone()))
                .collect();
            graph.add_edge(run[0].0, run[0].1, WaitLabel(label));
        }
        ViewGraph { graph }
    }

    /// The vertex of `agent`, if it is in the graph.
    fn index_of(&self, agent: &AgentId) -> Option<NodeIndex> {
        let (mut lo, mut hi) = (0, self.graph.node_count());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.graph[NodeIndex::new(mid)].cmp(agent) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(NodeIndex::new(mid)),
            }
        }
        None
    }

    /// How many agents appear in the views.
    pub fn agent_count(&self) -> usize {
        self.graph.node_count()
    }

    /// How many (agent, agent) wait-for edges there are.
    pub fn edge_count(&self) -> usize {
        self.graph.edge_count()
    }

    /// The locks that make `waiter` wait for `holder`, if it does.
    pub fn waits_for(&self, waiter: &AgentId, holder: &AgentId) -> Option<&WaitLabel> {
        let (w, h) = (self.index_of(waiter)?, self.index_of(holder)?);
        let e = self.graph.find_edge(w, h)?;
        self.graph.edge_weight(e)
    }

    /// The agents `agent` waits for directly, in increasing id order.
    pub fn waits_for_set(&self, agent: &AgentId) -> Vec<AgentId> {
        self.neighbours(agent, Direction::Outgoing)
    }

    /// The agents from which a path of waits leads to `agent`, `agent` included.
    pub fn reaching(&self, agent: &AgentId) -> BTreeSet<AgentId> {
        let mut out = BTreeSet::new();
        let Some(start) = self.index_of(agent) else {
            return out;
        };
        let mut bfs = petgraph::visit::Bfs::new(petgraph::visit::Reversed(&self.graph), start);
        while let Some(n) = bfs.next(petgraph::visit::Reversed(&self.graph)) {
            out.insert(self.graph[n].clone());
        }
        out
    }

    /// The copies whose edges can lie on a cycle through `agent` and an agent it waits for:
    /// those with an edge out of `agent`, or an edge between agents that (transitively) wait for
    /// `agent`. These are the views worth forwarding.
    pub fn cycle_copies(&self, agent: &AgentId) -> BTreeSet<(LockId, NodeId)> {
        let reaching = self.reaching(agent);
        let mut out = BTreeSet::new();
        for e in self.graph.edge_references() {
            let (w, b) = (&self.graph[e.source()], &self.graph[e.target()]);
            if w == agent || reaching.contains(b) {
                out.extend(e.weight().0.iter().cloned());
            }
        }
        out
    }

    /// The agents that wait directly for `agent`, in increasing id order.
    pub fn waited_by_set(&self, agent: &AgentId) -> Vec<AgentId> {
        self.neighbours(agent, Direction::Incoming)
    }

    fn neighbours(&self, agent: &AgentId, dir: Direction) -> Vec<AgentId> {
        let Some(i) = self.index_of(agent) else {
            return Vec::new();
        };
        let mut out: Vec<AgentId> = self
            .graph
            .neighbors_directed(i, dir)
            .map(|n| self.graph[n].clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Every strongly connected component of two or more agents, with its greatest agent by
    /// [`victim_order`] as victim, ordered by victim. (With several cycles in one component, more than one agent may
    /// have to give way: see [`ViewGraph::victims`].)
    pub fn cycles(&self) -> Vec<Cycle> {
        let mut out: Vec<Cycle> = petgraph::algo::tarjan_scc(&self.graph)
            .into_iter()
            .filter(|scc| scc.len() >= 2)
            .filter_map(|scc| self.cycle_of(&scc))
            .collect();
        out.sort_by(|a, b| victim_order(&a.victim, &b.victim));
        out
    }

    /// The deadlock `agent` must break, if any: its strongly connected component in the graph
    /// restricted to agents not above itself by [`victim_order`], when that has two or more
    /// agents.
    pub fn victim_cycle(&self, agent: &AgentId) -> Option<Cycle> {
        let me = self.index_of(agent)?;
        let sub = NodeFiltered::from_fn(&self.graph, |n| {
            victim_order(&self.graph[n], agent) != std::cmp::Ordering::Greater
        });
        let scc = petgraph::algo::tarjan_scc(&sub)
            .into_iter()
            .find(|c| c.contains(&me))?;
        if scc.len() < 2 {
            return None;
        }
        self.cycle_of(&scc)
    }

    /// Every agent that must give way (see [`ViewGraph::victim_cycle`]), in id order.
    pub fn victims(&self) -> Vec<Cycle> {
        self.graph
            .node_weights()
            .filter_map(|a| self.victim_cycle(a))
            .collect()
    }

    fn cycle_of(&self, scc: &[NodeIndex]) -> Option<Cycle> {
        let members: BTreeSet<NodeIndex> = scc.iter().copied().collect();
        let victim_ix = *scc
            .iter()
            .max_by(|a, b| victim_order(&self.graph[**a], &self.graph[**b]))?;
        let lock = lock_given_up(
            self.graph
                .edges_directed(victim_ix, Direction::Incoming)
                .filter(|e| members.contains(&e.source()))
                .flat_map(|e| e.weight().0.iter()),
        )?
        .clone();
        let mut agents: Vec<AgentId> = scc.iter().map(|i| self.graph[*i].clone()).collect();
        agents.sort();
        Some(Cycle {
            agents,
            victim: self.graph[victim_ix].clone(),
            lock: lock.0,
            node: lock.1,
        })
    }

    /// The graph in Graphviz DOT, vertices labelled with agent ids and edges with the
    /// `lock@node` copies that cause them.
    pub fn to_dot(&self) -> String {
        format!("{}", Dot::with_config(&self.graph, &[]))
    }
}

#[cfg(test)]
mod tests;
