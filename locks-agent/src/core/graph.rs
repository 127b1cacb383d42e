//! The wait-for graph over agents, built from lock views, and the choice of a deadlock's victim.
//!
//! Pure: [`WaitForGraph::build`] takes lock views (a queue of one lock on one node at one
//! version) and the mode table; everything else is a question to the graph. The graph is
//! rebuilt from scratch on every analysis, so a stale edge cannot outlive the view it came from.
//!
//! **Edges.** In a view, a pending entry `X` (converting or waiting, requested mode `m`) waits
//! for — has an edge to — every agent `Y ≠ X` such that:
//! - `Y` holds the lock in a mode incompatible with `m`; or
//! - `Y` is pending ahead of `X` (converters before waiters, FIFO) in a mode incompatible with
//!   `m`: once granted, it will hold what `X` cannot share; or
//! - `Y` holds the lock in a mode incompatible with what some entry `Z ≠ Y` ahead of `X`
//!   requests: `X` is served only after `Z`, and `Z` only after `Y` lets go.
//!
//! A compatible entry ahead is not waited for by itself: it is granted together with `X` as
//! soon as its own blockers leave (two readers queued behind a writer do not wait for each
//! other). An agent never waits for itself: a holder waiting for its own upgrade is not a
//! deadlock. Each edge is labelled with the `(lock, node)` copies that cause it.
//!
//! **Deadlocks.** A cycle of two or more agents is a deadlock, and its largest agent id is its
//! victim (`locks_agent_lib:max_agent/1`): an agent must give way exactly when it lies on a
//! cycle of agents no larger than itself, that is, when it is in a strongly connected component
//! (petgraph's `tarjan_scc`) of two or more agents of the graph restricted to ids up to its own.
//! This is a property of the graph alone, so every agent that knows the same edges names the
//! same victims, whatever order it learnt them in. Deciding by cycle rather than by whole
//! component also keeps the real victim acting when other agents' knowledge is outdated: a
//! stale edge can merge components and make some larger agent look like the victim, but it
//! cannot hide a real cycle from that cycle's largest agent. (A decision taken on a stale edge
//! is harmless: the surrender names the version it saw, and the server ignores a stale one.)
//!
//! The victim gives up the smallest `(lock, node)` labelling an edge into it from its
//! component: a lock it holds (or is queued ahead on) that another agent of the cycle waits
//! for.

use locks_core::proto::LockView;
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId};
use petgraph::Direction;
use petgraph::dot::Dot;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::{EdgeRef, NodeFiltered};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

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
    /// The largest of them: the agent that must give way.
    pub victim: AgentId,
    /// The lock the victim gives up: the smallest `(lock, node)` on an edge into the victim
    /// from inside the component.
    pub lock: LockId,
    /// The node of that lock.
    pub node: NodeId,
}

/// Who waits for whom, according to a set of lock views.
#[derive(Clone, Debug, Default)]
pub struct WaitForGraph {
    graph: DiGraph<AgentId, WaitLabel>,
    index: BTreeMap<AgentId, NodeIndex>,
}

impl WaitForGraph {
    /// Builds the graph from lock views (see the module documentation for the edges).
    ///
    /// Cost: linear in the views and their edges, plus sorting the agents and the edges (which
    /// keeps the result independent of the order of the views). Agents are numbered once and
    /// edges sorted as numbers, so no agent id is cloned or compared per edge.
    pub fn build<'a>(
        modes: &ModeTable,
        views: impl IntoIterator<Item = (&'a LockId, &'a NodeId, &'a LockView)>,
    ) -> WaitForGraph {
        Self::build_excusing(modes, views, |_, _, _| false)
    }

    /// Builds the graph from lock views, leaving out the edges of waiters that `excused` says
    /// do not wait on that copy (they told the builder so: see `core/agent/probe.rs`).
    pub fn build_excusing<'a>(
        modes: &ModeTable,
        views: impl IntoIterator<Item = (&'a LockId, &'a NodeId, &'a LockView)>,
        excused: impl Fn(&LockId, &NodeId, &AgentId) -> bool,
    ) -> WaitForGraph {
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
        let mut index = BTreeMap::new();
        let mut number: HashMap<&AgentId, NodeIndex> = HashMap::with_capacity(agents.len());
        for a in agents {
            let i = graph.add_node(a.clone());
            index.insert(a.clone(), i);
            number.insert(a, i);
        }
        // Node indices follow the id order, so sorting `(waiter, blocker, view)` by number sorts
        // the edges by id, with all the views of one edge together.
        let mut edges: Vec<(NodeIndex, NodeIndex, usize)> = Vec::new();
        for (k, (_, _, view)) in views.iter().enumerate() {
            edges.extend(
                view_edges(modes, view)
                    .into_iter()
                    .filter(|(w, _)| !excused(views[k].0, views[k].1, w))
                    .map(|(w, b)| (number[w], number[b], k)),
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
        WaitForGraph { graph, index }
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
        let (w, h) = (self.index.get(waiter)?, self.index.get(holder)?);
        let e = self.graph.find_edge(*w, *h)?;
        self.graph.edge_weight(e)
    }

    /// The agents `agent` waits for directly, in increasing id order.
    pub fn waits_for_set(&self, agent: &AgentId) -> Vec<AgentId> {
        self.neighbours(agent, Direction::Outgoing)
    }

    /// The agents from which a path of waits leads to `agent`, `agent` included.
    pub fn reaching(&self, agent: &AgentId) -> BTreeSet<AgentId> {
        let mut out = BTreeSet::new();
        let Some(&start) = self.index.get(agent) else {
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
        let Some(&i) = self.index.get(agent) else {
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

    /// Every strongly connected component of two or more agents, with its largest agent as
    /// victim, ordered by victim. (With several cycles in one component, more than one agent may
    /// have to give way: see [`WaitForGraph::victims`].)
    pub fn cycles(&self) -> Vec<Cycle> {
        let mut out: Vec<Cycle> = petgraph::algo::tarjan_scc(&self.graph)
            .into_iter()
            .filter(|scc| scc.len() >= 2)
            .filter_map(|scc| self.cycle_of(&scc))
            .collect();
        out.sort_by(|a, b| a.victim.cmp(&b.victim));
        out
    }

    /// The deadlock `agent` must break, if any: its strongly connected component in the graph
    /// restricted to agents no larger than itself, when that has two or more agents.
    pub fn victim_cycle(&self, agent: &AgentId) -> Option<Cycle> {
        let &me = self.index.get(agent)?;
        let sub = NodeFiltered::from_fn(&self.graph, |n| self.graph[n] <= *agent);
        let scc = petgraph::algo::tarjan_scc(&sub)
            .into_iter()
            .find(|c| c.contains(&me))?;
        if scc.len() < 2 {
            return None;
        }
        self.cycle_of(&scc)
    }

    /// Every agent that must give way (see [`WaitForGraph::victim_cycle`]), in id order.
    pub fn victims(&self) -> Vec<Cycle> {
        self.index
            .keys()
            .filter_map(|a| self.victim_cycle(a))
            .collect()
    }

    fn cycle_of(&self, scc: &[NodeIndex]) -> Option<Cycle> {
        let members: BTreeSet<NodeIndex> = scc.iter().copied().collect();
        let victim_ix = *scc
            .iter()
            .max_by(|a, b| self.graph[**a].cmp(&self.graph[**b]))?;
        let lock = self
            .graph
            .edges_directed(victim_ix, Direction::Incoming)
            .filter(|e| members.contains(&e.source()))
            .filter_map(|e| e.weight().0.iter().next())
            .min()?
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

/// The pending entries of `view` in the order they are served: converters (with the mode they
/// ask for) before waiters, each FIFO.
fn pending_of(view: &LockView) -> impl Iterator<Item = (&AgentId, Mode)> {
    view.converting
        .iter()
        .map(|c| (&c.agent, c.requested))
        .chain(view.waiting.iter().map(|w| (&w.agent, w.mode)))
}

/// Who asks for one mode among some pending entries.
#[derive(Clone, Copy)]
enum Asked<'v> {
    Nobody,
    One(&'v AgentId),
    Several,
}

/// The agents `agent` waits for in one view (the blockers of its edges in [`view_edges`]),
/// sorted, each once; empty when it does not convert or wait there.
///
/// Linear in the view, plus sorting the answer: a holder blocks `agent` through an entry ahead
/// exactly when some mode asked for ahead, by an entry other than the holder itself, is
/// incompatible with what it holds, and which modes are asked for ahead (and by whom, when by
/// one entry only) is a table of [`Mode::COUNT`] slots.
pub fn blockers_of<'v>(modes: &ModeTable, view: &'v LockView, agent: &AgentId) -> Vec<&'v AgentId> {
    let Some((place, mode)) = pending_of(view)
        .enumerate()
        .find(|(_, (x, _))| *x == agent)
        .map(|(i, (_, m))| (i, m))
    else {
        return Vec::new();
    };
    let mut out: Vec<&AgentId> = Vec::new();
    let mut asked = [Asked::Nobody; Mode::COUNT];
    for (y, my) in pending_of(view).take(place) {
        if y != agent && !modes.compatible(mode, my) {
            out.push(y);
        }
        let slot = &mut asked[my.index()];
        *slot = match *slot {
            Asked::Nobody => Asked::One(y),
            _ => Asked::Several,
        };
    }
    for h in view.granted.iter().filter(|h| h.agent != *agent) {
        let blocks_ahead = Mode::ALL.iter().any(|&mz| {
            let by_other = match asked[mz.index()] {
                Asked::Nobody => false,
                Asked::One(z) => *z != h.agent,
                Asked::Several => true,
            };
            by_other && !modes.compatible(mz, h.mode)
        });
        if blocks_ahead || !modes.compatible(mode, h.mode) {
            out.push(&h.agent);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The first agent converting or waiting in `view` that waits for `holder`, a holder that does
/// not convert: the first pending entry whose mode is incompatible with the mode `holder`
/// holds. Every pending entry from there on waits for `holder` ([`view_edges`]), none before it
/// does. `None` when `holder` holds nothing there, converts, or blocks nobody. (For many
/// holders of one view, [`ViewIndex::first_blocked_by`] answers each without a pass.)
pub fn first_blocked_by<'v>(
    modes: &ModeTable,
    view: &'v LockView,
    holder: &AgentId,
) -> Option<&'v AgentId> {
    if view.converting.iter().any(|c| c.agent == *holder) {
        return None;
    }
    let held = view.granted.iter().find(|h| h.agent == *holder)?.mode;
    pending_of(view)
        .find(|(_, m)| !modes.compatible(*m, held))
        .map(|(a, _)| a)
}

/// Questions about one view asked for many agents (a forwarding agent asks them for every agent
/// it waits for): built in one pass over the view, after which each answer is a hash look-up,
/// so asking for all of a hot lock's holders costs what the view holds, not its square.
#[derive(Debug)]
pub struct ViewIndex<'v> {
    pending: HashSet<&'v AgentId>,
    converting: HashSet<&'v AgentId>,
    /// The mode each holder holds (its first entry, as [`first_blocked_by`] reads it).
    held: HashMap<&'v AgentId, Mode>,
    /// Per held mode, the first pending entry whose mode is incompatible with it.
    first_blocked: [Option<&'v AgentId>; Mode::COUNT],
}

impl<'v> ViewIndex<'v> {
    /// Indexes `view`.
    pub fn new(modes: &ModeTable, view: &'v LockView) -> ViewIndex<'v> {
        let mut held = HashMap::with_capacity(view.granted.len());
        for h in &view.granted {
            held.entry(&h.agent).or_insert(h.mode);
        }
        let mut first_blocked = [None; Mode::COUNT];
        for (x, m) in pending_of(view) {
            for mh in Mode::ALL {
                let slot = &mut first_blocked[mh.index()];
                if slot.is_none() && !modes.compatible(m, mh) {
                    *slot = Some(x);
                }
            }
        }
        ViewIndex {
            pending: pending_of(view).map(|(x, _)| x).collect(),
            converting: view.converting.iter().map(|c| &c.agent).collect(),
            held,
            first_blocked,
        }
    }

    /// Whether `agent` converts or waits in the view.
    pub fn is_pending(&self, agent: &AgentId) -> bool {
        self.pending.contains(agent)
    }

    /// [`first_blocked_by`] of the indexed view.
    pub fn first_blocked_by(&self, holder: &AgentId) -> Option<&'v AgentId> {
        if self.converting.contains(holder) {
            return None;
        }
        self.first_blocked[self.held.get(holder)?.index()]
    }
}

/// Whether some agent waits for `agent` in one view (an edge of [`view_edges`] ends at it).
/// Linear in the view: an edge to a holder comes from a pending entry incompatible with what it
/// holds (one blocked through an entry ahead has such an entry ahead of it), and an edge to a
/// pending entry from an entry behind it incompatible with what it asks for.
pub fn is_waited_for(modes: &ModeTable, view: &LockView, agent: &AgentId) -> bool {
    let held = view
        .granted
        .iter()
        .find(|h| h.agent == *agent)
        .map(|h| h.mode);
    let mut asked = None;
    for (x, m) in pending_of(view) {
        if x == agent {
            asked = Some(m);
            continue;
        }
        if held.is_some_and(|h| !modes.compatible(m, h))
            || asked.is_some_and(|a| !modes.compatible(m, a))
        {
            return true;
        }
    }
    false
}

/// The wait-for edges `(waiter, blocker)` one view implies (module documentation), each once
/// (for a view that keeps [`LockView`]'s invariant of one pending entry per agent), grouped by
/// waiter in queue order, in an order fixed by the view.
///
/// Linear in the view and the edges: holders and entries ahead are grouped by mode, so a waiter
/// looks only at the groups that block it, and every agent of the view gets a number, so that
/// "already a blocker of this waiter" and "already blocking an entry ahead" are array look-ups.
/// A waiter's blockers come from three groups of distinct agents (holders incompatible with it,
/// entries ahead incompatible with it, holders blocking an entry ahead), so it makes at most
/// three pushes per edge it gets.
pub fn view_edges<'v>(modes: &ModeTable, view: &'v LockView) -> Vec<(&'v AgentId, &'v AgentId)> {
    let mut number: HashMap<&AgentId, usize> = HashMap::new();
    for a in view
        .granted
        .iter()
        .map(|e| &e.agent)
        .chain(pending_of(view).map(|(a, _)| a))
    {
        let next = number.len();
        number.entry(a).or_insert(next);
    }
    type Group<'v> = Vec<(usize, &'v AgentId)>;
    let mut holding: [Group<'v>; Mode::COUNT] = Default::default();
    for h in &view.granted {
        holding[h.mode.index()].push((number[&h.agent], &h.agent));
    }
    let mut ahead: [Group<'v>; Mode::COUNT] = Default::default();
    // Holders that block some entry ahead of the current one, and whether every holder of a
    // mode does (then its group need not be looked at again).
    let mut blocking_ahead: Group<'v> = Vec::new();
    let mut is_blocking_ahead = vec![false; number.len()];
    let mut group_blocking_ahead = [false; Mode::COUNT];
    // The waiter each agent was last made a blocker of.
    let mut blocker_of = vec![usize::MAX; number.len()];
    let mut out = Vec::new();
    for (x, m) in pending_of(view) {
        let xn = number[x];
        let mut push = |(yn, y): (usize, &'v AgentId)| {
            if yn != xn && blocker_of[yn] != xn {
                blocker_of[yn] = xn;
                out.push((x, y));
            }
        };
        for mode in Mode::ALL {
            if !modes.compatible(m, mode) {
                holding[mode.index()].iter().copied().for_each(&mut push);
                ahead[mode.index()].iter().copied().for_each(&mut push);
            }
        }
        blocking_ahead.iter().copied().for_each(&mut push);
        for mode in Mode::ALL {
            let i = mode.index();
            if group_blocking_ahead[i] || modes.compatible(m, mode) {
                continue;
            }
            // A holder does not block itself: a group holding `x` is looked at again later.
            let mut all = true;
            for &(hn, h) in &holding[i] {
                if hn == xn {
                    all = false;
                } else if !is_blocking_ahead[hn] {
                    is_blocking_ahead[hn] = true;
                    blocking_ahead.push((hn, h));
                }
            }
            group_blocking_ahead[i] = all;
        }
        ahead[m.index()].push((xn, x));
    }
    out
}

#[cfg(test)]
mod tests;
