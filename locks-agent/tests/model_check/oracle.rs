//! The properties checked in the explored states, against the truth: the lock tables
//! themselves (their snapshots), not what any agent was told.
//!
//! - [`safety`], in every state: no lock of any table has two holders in incompatible modes
//!   (entries carry the intention modes of their descendants, so a read of `[a]` and a write
//!   of `[a, b]` meet on `[a]`), and, checked directly, no agent holds a descendant of a lock
//!   another holds in a mode that conflicts with what that lock covers; an agent whose status
//!   is "have all locks" holds every request, by its requirement; no agent has decided more than
//!   [`MAX_DECISIONS`] surrenders (more means the agents surrender round in circles: a
//!   livelock, and a state space without end, since versions only grow).
//! - [`quiescent`], when nothing is in flight and every agent has settled: each agent's requests
//!   and modes are exactly its direct entries in the tables (nothing leaked, nothing lost, no
//!   mode the table does not have); an agent with all its locks holds exactly the copies it
//!   reports, and one that waits is not granted everything; an agent that stopped has no entry
//!   left; no deadlock remains (agents that wait for each other only, counting every wait the
//!   tables show, as the agents do); no agent waits on nothing.
//! - [`true_cycle_through`], when an agent decides a surrender or an abort: whether the real
//!   wait-for graph has a cycle through it. With messages in flight this cannot be exact (a
//!   cycle may be forming, or broken already without the agent knowing), so the explorer only
//!   counts these, except in configurations that ask for none.
//!
//! For decisions, the real wait-for graph counts only the copies an agent needs: a waiting entry
//! of an agent whose request is already met elsewhere (`Any`, `Majority`) is no wait.

use super::world::{Model, World};
use locks_agent::state_machine::LockRequest;
use locks_agent::state_machine::ViewGraph;
use locks_core::proto::{EntryState, LockView};
use locks_core::{AgentId, LockId, Mode};
use locks_server::TableSnapshot;
use std::collections::BTreeSet;

/// The most surrenders one agent may decide in a run: far more than the deadlocks a small
/// script can make, so a run past it goes round in circles.
pub const MAX_DECISIONS: u32 = 4;

/// The tables' snapshots, by node index.
pub fn truth(w: &World) -> Vec<TableSnapshot> {
    w.tables.iter().map(|(_, t)| t.snapshot()).collect()
}

fn held_mode(snap: &TableSnapshot, agent: &AgentId, lock: &LockId) -> Option<Mode> {
    snap.state(agent, lock).held()
}

/// Whether the tables grant `agent` `lock` in `mode` on node `n`, ancestors included.
fn held_by_truth(
    m: &Model,
    snaps: &[TableSnapshot],
    agent: &AgentId,
    n: usize,
    lock: &LockId,
    mode: Mode,
) -> bool {
    let covers = |l: &LockId, md: Mode| {
        held_mode(&snaps[n], agent, l).is_some_and(|h| m.modes.covers(h, md))
    };
    let intention = m.modes.intention(mode);
    covers(lock, mode) && lock.ancestors().all(|a| covers(&a, intention))
}

fn node_indexes(m: &Model, r: &LockRequest) -> Vec<usize> {
    r.nodes.iter().map(|n| m.node_index(n)).collect()
}

/// Whether the tables meet `r` of `agent`, by its requirement.
fn met_by_truth(m: &Model, snaps: &[TableSnapshot], agent: &AgentId, r: &LockRequest) -> bool {
    let had = node_indexes(m, r)
        .into_iter()
        .filter(|&n| held_by_truth(m, snaps, agent, n, &r.lock, r.mode))
        .count();
    r.req.is_met(r.nodes.len(), had, 0)
}

/// The mode in which a direct lock in `mode` covers the lock's descendants: reading modes
/// read them, `X` writes them, intention modes cover nothing.
fn subtree_mode(mode: Mode) -> Option<Mode> {
    match mode {
        Mode::S | Mode::SIX | Mode::U => Some(Mode::S),
        Mode::X => Some(Mode::X),
        Mode::IS | Mode::IX => None,
    }
}

/// The oracle of every state.
pub fn safety(m: &Model, w: &World, snaps: &[TableSnapshot]) -> Result<(), String> {
    for snap in snaps {
        for l in &snap.locks {
            let holders: Vec<(&AgentId, Mode)> = l
                .entries
                .iter()
                .filter_map(|e| e.state.held().map(|h| (&e.agent, h)))
                .collect();
            for (i, (a, ma)) in holders.iter().enumerate() {
                for (b, mb) in &holders[i + 1..] {
                    if !m.modes.compatible(*ma, *mb) {
                        return Err(format!(
                            "incompatible grants: {}@{}: {} holds {ma} and {} holds {mb}",
                            l.lock,
                            snap.node,
                            m.name(a),
                            m.name(b)
                        ));
                    }
                }
            }
        }
    }
    // The hierarchy, directly: a lock held in a reading or writing mode covers every
    // descendant in that mode, so no other agent may hold a descendant in a mode that
    // conflicts with it.
    for (n, snap) in snaps.iter().enumerate() {
        let direct: Vec<(&LockId, &AgentId, Mode)> = snap
            .locks
            .iter()
            .flat_map(|l| {
                l.entries
                    .iter()
                    .filter_map(move |e| Some((&l.lock, &e.agent, e.direct?)))
            })
            .filter(|(l, a, md)| held_by_truth(m, snaps, a, n, l, *md))
            .collect();
        for (la, a, ma) in &direct {
            let Some(covered) = subtree_mode(*ma) else {
                continue;
            };
            for (lb, b, mb) in &direct {
                if a != b && la.is_ancestor_of(lb) && !m.modes.compatible(*mb, covered) {
                    return Err(format!(
                        "hierarchy: {} holds {la} {ma} and {} holds its descendant {lb} {mb} \
                         on {}",
                        m.name(a),
                        m.name(b),
                        snap.node
                    ));
                }
            }
        }
    }
    for (i, c) in w.clients.iter().enumerate() {
        if c.decisions > MAX_DECISIONS {
            return Err(format!(
                "{} decided {} surrenders: the agents keep surrendering (livelock?)",
                m.config.agents[i].name, c.decisions
            ));
        }
        if c.stop.is_some() {
            continue;
        }
        let id = &m.agent_ids[i];
        // A lock the client was told it holds, and has not been told it lost, is held: the
        // lost-lock signal comes no later than the tables take it away.
        for r in c.core.requests() {
            let Some(claimed) = r.claimed else {
                continue;
            };
            let claim = LockRequest {
                mode: claimed,
                ..r.clone()
            };
            if !met_by_truth(m, snaps, id, &claim) {
                return Err(format!(
                    "{} was told it holds {} {claimed} and was not told it lost it, but the \
                     tables do not grant it",
                    m.config.agents[i].name, r.lock
                ));
            }
        }
        if !c.core.status_ref().have_all_locks() {
            continue;
        }
        for r in c.core.requests() {
            if !met_by_truth(m, snaps, id, r) {
                return Err(format!(
                    "{} has all its locks, but the tables do not grant it {} {}",
                    m.config.agents[i].name, r.lock, r.mode
                ));
            }
        }
    }
    Ok(())
}

/// The real wait-for graph of the running agents, from the tables: `(waiter, holder)` pairs.
/// With `needed_only`, a wait counts only on a copy the waiter needs for a pending request.
pub fn true_edges(
    m: &Model,
    w: &World,
    snaps: &[TableSnapshot],
    needed_only: bool,
) -> Vec<(usize, usize)> {
    let views: Vec<(LockId, usize, LockView)> = snaps
        .iter()
        .enumerate()
        .flat_map(|(n, s)| s.locks.iter().map(move |l| (l.lock.clone(), n, l.view())))
        .collect();
    let graph = ViewGraph::build(
        &m.modes,
        views.iter().map(|(l, n, v)| (l, &m.node_ids[*n], v)),
    );
    let mut edges = Vec::new();
    for (a, c) in w.clients.iter().enumerate() {
        if c.stop.is_some() {
            continue;
        }
        let id = &m.agent_ids[a];
        let pending: Vec<&LockRequest> = c
            .core
            .requests()
            .filter(|r| !met_by_truth(m, snaps, id, r))
            .collect();
        for (b, hid) in m.agent_ids.iter().enumerate() {
            if a == b {
                continue;
            }
            let Some(label) = graph.waits_for(id, hid) else {
                continue;
            };
            if !needed_only
                || label
                    .0
                    .iter()
                    .any(|(l, n)| pending.iter().any(|r| r.is_under(l, n)))
            {
                edges.push((a, b));
            }
        }
    }
    edges
}

/// The agents on some cycle of `edges`.
fn on_cycles(count: usize, edges: &[(usize, usize)]) -> BTreeSet<usize> {
    // a is on a cycle when a reaches itself.
    let mut out = BTreeSet::new();
    for start in 0..count {
        let mut seen = vec![false; count];
        let mut stack: Vec<usize> = edges
            .iter()
            .filter(|(f, _)| *f == start)
            .map(|(_, t)| *t)
            .collect();
        while let Some(x) = stack.pop() {
            if x == start {
                out.insert(start);
                break;
            }
            if std::mem::replace(&mut seen[x], true) {
                continue;
            }
            stack.extend(edges.iter().filter(|(f, _)| *f == x).map(|(_, t)| *t));
        }
    }
    out
}

/// A deadlock of `edges`: a strongly connected component of two or more agents with no edge
/// leaving it (they wait for each other only), with its edges. A cycle that also waits for an
/// agent outside it is not one yet: that agent may still release, and the agents resolve a
/// cycle once it is closed (`locks-agent/src/core/agent/resolve.rs`).
type Deadlocked = (Vec<usize>, Vec<(usize, usize)>);

fn deadlock(count: usize, edges: &[(usize, usize)]) -> Option<Deadlocked> {
    let mut reach = vec![vec![false; count]; count];
    for &(a, b) in edges {
        reach[a][b] = true;
    }
    for k in 0..count {
        for i in 0..count {
            for j in 0..count {
                if reach[i][k] && reach[k][j] {
                    reach[i][j] = true;
                }
            }
        }
    }
    (0..count).find_map(|a| {
        let scc: Vec<usize> = (0..count)
            .filter(|&b| b == a || (reach[a][b] && reach[b][a]))
            .collect();
        let closed = edges
            .iter()
            .all(|(x, y)| !scc.contains(x) || scc.contains(y));
        (scc.len() >= 2 && closed).then(|| {
            let inner = edges
                .iter()
                .filter(|(x, _)| scc.contains(x))
                .copied()
                .collect();
            (scc, inner)
        })
    })
}

/// Whether the real wait-for graph has a cycle through agent `a`.
pub fn true_cycle_through(m: &Model, w: &World, a: usize) -> bool {
    let snaps = truth(w);
    on_cycles(w.clients.len(), &true_edges(m, w, &snaps, true)).contains(&a)
}

/// The oracle of quiescent states.
pub fn quiescent(m: &Model, w: &World, snaps: &[TableSnapshot]) -> Result<(), String> {
    for (i, c) in w.clients.iter().enumerate() {
        let name = &m.config.agents[i].name;
        let id = &m.agent_ids[i];
        // Direct entries in the tables against the requests.
        for (n, snap) in snaps.iter().enumerate() {
            for l in &snap.locks {
                let Some(e) = l.entry(id) else { continue };
                if c.stop.is_some() {
                    return Err(format!(
                        "{name} stopped but {}@{} still has its entry {:?}",
                        l.lock, snap.node, e.state
                    ));
                }
                let Some(direct) = e.direct else { continue };
                let asked = c
                    .core
                    .request_on(&l.lock)
                    .filter(|r| r.nodes.contains(&m.node_ids[n]));
                match asked {
                    None => {
                        return Err(format!(
                            "{}@{} has a direct {direct} entry of {name}, which has no such \
                             request",
                            l.lock, snap.node
                        ));
                    }
                    Some(r) if r.mode != direct => {
                        return Err(format!(
                            "{name} believes its request on {}@{} is {}, the table has {direct} \
                             ({:?})",
                            l.lock, snap.node, r.mode, e.state
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        if c.stop.is_some() {
            continue;
        }
        for r in c.core.requests() {
            for n in node_indexes(m, r) {
                // A request waiting on its gate left its other copies (the agent's `gate.rs`).
                if c.core.left_copy(&r.lock, &m.node_ids[n]) {
                    continue;
                }
                let entry = snaps[n].lock(&r.lock).and_then(|l| l.entry(id));
                if entry.and_then(|e| e.direct).is_none() {
                    return Err(format!(
                        "{name} requests {} {} on {}, the table has no such request",
                        r.lock, r.mode, m.node_ids[n]
                    ));
                }
            }
        }
        match c.core.lock_result() {
            Some(result) => {
                for g in &result.locks {
                    let r = c.core.request_on(&g.lock).expect("a request per lock");
                    for n in node_indexes(m, r) {
                        let believed = g.nodes.iter().any(|(node, _)| *node == m.node_ids[n]);
                        let real = held_by_truth(m, snaps, id, n, &g.lock, g.mode);
                        if believed != real {
                            return Err(format!(
                                "{name} believes it {} {} {} on {}; the table says otherwise",
                                if believed { "holds" } else { "does not hold" },
                                g.lock,
                                g.mode,
                                m.node_ids[n]
                            ));
                        }
                    }
                }
            }
            None => {
                if c.core.requests().next().is_some()
                    && c.core.requests().all(|r| met_by_truth(m, snaps, id, r))
                {
                    return Err(format!(
                        "{name} is {:?} although the tables grant every request",
                        c.core.status_ref()
                    ));
                }
            }
        }
    }
    // Only waits on copies their waiter needs count, as for the decisions: a transaction
    // whose `Any` request is granted on one node and still queued on another is not blocked,
    // and its client may go on to `end`. Counting its queued copy made a cycle of a waiter `B`
    // and a holder `A` that is not one (`free-10032`: `B` waits for the copy `A`'s request is
    // granted on, and nothing but taking that grant away could serve `B`); the agents'
    // analysis leaves such copies out too (`probe.rs`, `check_edge`).
    if let Some((agents, edges)) = deadlock(w.clients.len(), &true_edges(m, w, snaps, true)) {
        let names: Vec<&str> = agents
            .iter()
            .map(|&a| m.config.agents[a].name.as_str())
            .collect();
        let shown: Vec<String> = edges
            .iter()
            .map(|(a, b)| format!("{}->{}", m.config.agents[*a].name, m.config.agents[*b].name))
            .collect();
        return Err(format!(
            "unresolved deadlock at quiescence: {} wait for each other only ({})",
            names.join(", "),
            shown.join(" ")
        ));
    }
    for (i, c) in w.clients.iter().enumerate() {
        if c.stop.is_some()
            || !matches!(c.core.status_ref(), locks_agent::TransactionStatus::Waiting)
        {
            continue;
        }
        let id = &m.agent_ids[i];
        let queued = c
            .core
            .requests()
            .filter(|r| !met_by_truth(m, snaps, id, r))
            .any(|r| {
                node_indexes(m, r).into_iter().any(|n| {
                    std::iter::once(r.lock.clone())
                        .chain(r.lock.ancestors())
                        .any(|l| {
                            matches!(
                                snaps[n].state(id, &l),
                                EntryState::Waiting(_) | EntryState::Converting { .. }
                            )
                        })
                })
            });
        if !queued {
            return Err(format!(
                "{} waits, but is queued nowhere it needs",
                m.config.agents[i].name
            ));
        }
    }
    Ok(())
}
