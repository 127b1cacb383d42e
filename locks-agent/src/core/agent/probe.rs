//! Confirming a deadlock before anybody gives way: probes round the cycle (edge chasing, after
//! Chandy, Misra and Haas), on top of the forwarded views of the Wiger/Arts algorithm.
//!
//! **Why.** The views an agent is forwarded describe other agents' queues as they were. A view
//! of a lock the agent is not queued on is replaced only by a newer forward, and nobody sends
//! one when the waits it shows end (a waiter granted, an unlock, an end), so an agent may see a
//! cycle that no longer exists and give up a lock, or abort, for nothing. The server's version
//! check on a surrender covers only the victim's own lock.
//!
//! **How.** The analysis (`resolve.rs`) never gives way itself. When the victim of a cycle
//! (its greatest agent by [`victim_order`], [`crate::core::ViewGraph::victim_cycle`]) sees it, it picks one
//! simple cycle through itself that ends with the edge into it on the lock the graph
//! designates, and sends a [`Probe`] along it. The probe visits the waiter of each edge in turn;
//! each checks its own edge from what it knows first hand ([`AgentCore::check_edge`]): it is
//! queued on that copy for a request that is not met, and its own newest view of the queue
//! shows it waiting for the blocker. A waiter is told of every change ahead of it in a queue
//! (the server's notice contract), so its own view is never stale about whom it waits for,
//! except for notices still on their way and the server's quiet releases: a local holder that
//! ended, after which the view still shows every agent the waiter waits for and, besides, only
//! that gone agent, which confirms no edge of its own. The victim's own edge is checked last,
//! when the probe returns; only then does it surrender (or abort) as before.
//!
//! - An edge that a waiter's view at least as new as the probe's does not show is gone: the
//!   probe is dropped. A real deadlock never loses an edge, and its victim will see it again
//!   with newer views (forwarding goes on as before), and probe again.
//! - A probe with an edge into the agent that checks it, on a copy that agent left in a
//!   retreat (`gate.rs`), stops there: the agent's `Unlock` of that copy is on its way, and
//!   removes the edge when the server applies it (or the node goes down, which removes it
//!   too). The waiter of that edge waits behind this agent there, so the server tells it of
//!   the removal. When that waiter is the victim, the news makes it probe again, and the
//!   probe is dropped; otherwise the probe goes back to the victim with that edge refuted at
//!   the version its waiter confirmed (the victim may hold only a forwarded view of that
//!   copy, which nobody would replace).
//! - An agent that ends or aborts sends every probe it holds back to its victim refuted, and
//!   so does its core for any probe that comes after (the router does the same once the agent
//!   is gone): it waits for nobody, and the victim must not wait for a probe that went with
//!   it.
//! - An edge the waiter cannot judge yet (its view is older than the probe's, or missing while
//!   a surrender of its awaits the server's answer) parks the probe until the waiter's next
//!   notice (at most [`PARKED`] probes; the oldest go first).
//! - The victim sends one probe per cycle it sees: the same edges at the same versions are not
//!   sent twice, until the agent's own entries change.
//! - The surrender carries the cycle's waits on the surrendered lock's node, and that server
//!   applies it only if they all still hold in its queues: a cycle on one node that something
//!   broke while the probe was on its way (another victim's surrender, a release) moves
//!   nothing. When those waits are the whole cycle, the server applies it though the lock's
//!   version moved since the victim's view (a waiter joined behind it, say): the cycle is real
//!   now, and the victim already told its client of the loss (`locks-server`'s table).
//! - The victim gives way only if it has learnt nothing since it sent the probe (no notice of
//!   its own entries, no other agent's surrender, no node event: any of these may have broken
//!   the cycle, and it probes again if not), its entry on the lock it gives up has not changed
//!   since the version at which the waiter confirmed it, nothing of its own is being
//!   surrendered already, and every agent of the probe is no larger than itself.
//!
//! With `abort_on_deadlock`, the victim aborts only when giving up that copy would take away a
//! lock the client was told it holds: a claimed request that holds the copy and would no longer
//! meet its requirement without it. A queued copy of an `Any` or `Majority` request, or one the
//! requirement can spare, is surrendered silently.

use super::{AgentCore, AgentEffect, Phase, asks_for};
use crate::core::graph::{Cycle, ViewGraph, blockers_of};
use crate::core::knowledge::is_pending_in;
use crate::core::requests::LockRequest;
use crate::core::status::Deadlock;
use crate::core::victim::victim_order;
use locks_core::proto::{AgentMessage, LockView, Probe, ProbeEdge, ServerRequest, Wait};
use locks_core::{AgentId, LockId, NodeId};
use std::cmp::Ordering;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

mod bounce;

/// How many probes an agent keeps waiting for news at most.
pub(super) const PARKED: usize = 8;

/// How many probes received in one burst an agent takes in at most (the rest are dropped: a
/// real cycle is probed again).
const INBOX: usize = 64;

/// The longest cycle a probe may describe (agents of one deadlock; longer ones are refused as
/// malformed).
pub(super) const MAX_EDGES: usize = 256;

/// The agent's probes in hand.
#[derive(Clone, Debug, Default)]
pub(in crate::core) struct Probes {
    /// Received since the last settle.
    inbox: Vec<Probe>,
    /// Waiting for news of the edge they stopped at.
    parked: VecDeque<Probe>,
    /// The edges of the last probe this agent started as victim.
    last: Option<Vec<ProbeEdge>>,
    /// Counts [`Probes::news`]: probes sent before the last news are not acted on.
    epoch: u64,
    /// The copies this agent told a victim it does not need, and the victim: when it needs one
    /// again, it tells the victim so (by sending its view), or the victim would go on leaving
    /// its edges out.
    refuted: VecDeque<(AgentId, LockId, NodeId)>,
}

impl Probes {
    /// Takes in a probe from another agent; it is handled at the next settle.
    pub(super) fn receive(&mut self, probe: Probe) {
        if self.inbox.len() < INBOX {
            self.inbox.push(probe);
        }
    }

    /// The agent's own entries changed, or something else that may break a cycle happened:
    /// parked probes can be judged again, probes this agent sent are not acted on when they
    /// return, and the cycle last probed may be probed again. Returns whether a probe of this
    /// agent was out (the caller analyses again, to probe anew).
    pub(super) fn news(&mut self) -> bool {
        let out = self.last.take().is_some();
        self.epoch = self.epoch.wrapping_add(1);
        while let Some(p) = self.parked.pop_front() {
            self.inbox.push(p);
        }
        out
    }

    /// Whether a settle has nothing to do for the probes: none to handle, no refutation to
    /// take back.
    pub(super) fn is_idle(&self) -> bool {
        self.inbox.is_empty() && self.refuted.is_empty()
    }
}

/// What the waiter of an edge knows of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// The edge is there, in the agent's view of this version.
    Holds(u64),
    /// The edge is gone, or the agent does not need the copy.
    Gone,
    /// The agent cannot tell yet.
    Unknown,
}

impl AgentCore {
    /// Sends a probe round `cycle`, of which this agent is the victim, unless the same one went
    /// out already or its own edge does not hold.
    pub(super) fn start_probe(
        &mut self,
        graph: &ViewGraph,
        cycle: &Cycle,
        out: &mut Vec<AgentEffect>,
    ) {
        let Some(edges) = self.cycle_edges(graph, cycle) else {
            return;
        };
        if self.probes.last.as_ref() == Some(&edges) {
            return;
        }
        let own = edges.last().expect("a cycle has edges");
        if !matches!(self.check_edge(own), Check::Holds(_)) {
            return;
        }
        self.probes.last = Some(edges.clone());
        out.push(AgentEffect::ToAgent {
            to: edges[0].waiter.clone(),
            msg: AgentMessage::Probe(Probe {
                edges,
                next: 0,
                refuted: false,
                epoch: self.probes.epoch,
            }),
        });
    }

    /// One simple cycle through this agent within `cycle`'s agents, in probe order: it starts
    /// at the agent this one waits for and ends with this agent's own edge; the edge into this
    /// agent is on the lock `cycle` designates.
    fn cycle_edges(&self, graph: &ViewGraph, cycle: &Cycle) -> Option<Vec<ProbeEdge>> {
        let me = &self.id;
        let member = |a: &AgentId| cycle.agents.binary_search(a).is_ok();
        let designated = (cycle.lock.clone(), cycle.node.clone());
        // The agent whose edge into me carries the designated lock (the smallest, if several).
        let last = graph
            .waited_by_set(me)
            .into_iter()
            .filter(|a| member(a))
            .find(|a| {
                graph
                    .waits_for(a, me)
                    .is_some_and(|l| l.0.contains(&designated))
            })?;
        // Breadth first from me to `last`, through members only, smallest ids first.
        let mut parent: BTreeMap<AgentId, AgentId> = BTreeMap::new();
        let mut queue = VecDeque::from([me.clone()]);
        while let Some(a) = queue.pop_front() {
            if a == last {
                break;
            }
            for b in graph.waits_for_set(&a) {
                if member(&b) && b != *me && !parent.contains_key(&b) {
                    parent.insert(b.clone(), a.clone());
                    queue.push_back(b);
                }
            }
        }
        let mut path = vec![last.clone()];
        while path.last() != Some(me) {
            let prev = parent.get(path.last()?)?.clone();
            path.push(prev);
        }
        path.reverse(); // me, a1, ..., last
        let edge = |waiter: &AgentId, blocker: &AgentId, copy: Option<(LockId, NodeId)>| {
            let (lock, node) =
                copy.or_else(|| graph.waits_for(waiter, blocker)?.0.iter().next().cloned())?;
            let version = self.knowledge.view(&lock, &node)?.version;
            Some(ProbeEdge {
                waiter: waiter.clone(),
                blocker: blocker.clone(),
                lock,
                node,
                version,
            })
        };
        let mut edges = Vec::with_capacity(path.len());
        for pair in path[1..].windows(2) {
            edges.push(edge(&pair[0], &pair[1], None)?);
        }
        edges.push(edge(&last, me, Some(designated))?);
        edges.push(edge(me, &path[1], None)?);
        Some(edges)
    }

    /// Tells the victims this agent refuted a probe of that it now needs a copy it said it did
    /// not: it sends them its view of the copy, in which it waits.
    fn retract_refutations(&mut self, out: &mut Vec<AgentEffect>) {
        if self.probes.refuted.is_empty() {
            return;
        }
        let refuted = std::mem::take(&mut self.probes.refuted);
        for (victim, lock, node) in refuted {
            let view = self.knowledge.view(&lock, &node).cloned();
            match view {
                Some(view) if is_pending_in(&view, &self.id) => {
                    if self.needs_copy(&lock, &node) {
                        if !self.down.contains(victim.node()) {
                            self.show_victim(victim, lock, node, view, out);
                        }
                    } else {
                        self.probes.refuted.push_back((victim, lock, node));
                    }
                }
                // Not queued there any more: nothing to take back.
                _ => {}
            }
        }
    }

    /// Sends a victim this agent's own view of `(lock, node)`, whatever it was sent before.
    fn show_victim(
        &mut self,
        victim: AgentId,
        lock: LockId,
        node: NodeId,
        view: Arc<LockView>,
        out: &mut Vec<AgentEffect>,
    ) {
        self.knowledge.mark_sent(&lock, &node, &victim);
        out.push(AgentEffect::ToAgent {
            to: victim,
            msg: AgentMessage::Forward {
                from: self.id.clone(),
                node,
                lock,
                view,
            },
        });
    }

    /// Takes in a probe from another agent. A refuted one is taken in at once, in the order of
    /// the messages of its sender (a view the refuter sends later takes the excuse back); the
    /// others wait for the settle, which has the status current.
    pub(super) fn take_probe(&mut self, probe: Probe) {
        if !probe.refuted {
            self.probes.receive(probe);
            return;
        }
        if probe.is_cycle() && probe.victim() == Some(&self.id) {
            let e = &probe.edges[probe.next as usize];
            self.knowledge
                .excuse(&e.waiter, &e.lock, &e.node, e.version);
            // Analyse again even if the view that showed the wait is newer than the refutation
            // (nothing was excused): a real cycle may be there beside the refuted one.
            self.probes.last = None;
            self.dirty = true;
        }
    }

    /// Handles the probes received and those parked, now that the status is current.
    pub(super) fn run_probes(&mut self, out: &mut Vec<AgentEffect>) {
        self.retract_refutations(out);
        let mut inbox = std::mem::take(&mut self.probes.inbox).into_iter();
        while let Some(mut probe) = inbox.next() {
            if self.phase != Phase::Running {
                // An earlier probe of this burst made it abort: it waits for nobody now.
                for probe in std::iter::once(probe).chain(inbox) {
                    self.bounce(probe, out);
                }
                return;
            }
            let next = probe.next as usize;
            if !probe.is_cycle() || probe.edges.len() > MAX_EDGES {
                continue;
            }
            if probe.refuted || probe.edges[next].waiter != self.id {
                continue;
            }
            // An edge into this agent on a copy it left in a retreat (`gate.rs`) ends with the
            // unlock it sent there: the cycle breaks without anyone giving way.
            if let Some(into) = probe
                .edges
                .iter()
                .position(|e| e.blocker == self.id && self.left_copy(&e.lock, &e.node))
            {
                self.refute_left(probe, into, out);
                continue;
            }
            match self.check_edge(&probe.edges[next]) {
                Check::Gone => self.refute(probe, out),
                Check::Unknown => {
                    if self.probes.parked.len() >= PARKED {
                        self.probes.parked.pop_front();
                    }
                    self.probes.parked.push_back(probe);
                }
                Check::Holds(version) => {
                    let e = &mut probe.edges[next];
                    e.version = e.version.max(version);
                    if next + 1 == probe.edges.len() {
                        self.give_way(&probe, out);
                    } else {
                        probe.next += 1;
                        let to = probe.edges[next + 1].waiter.clone();
                        out.push(AgentEffect::ToAgent {
                            to,
                            msg: AgentMessage::Probe(probe),
                        });
                    }
                }
            }
        }
    }

    /// Sends `probe` back to its victim, its next edge refuted as of the newest version this
    /// agent knows of that copy; a newer view of the copy goes with it, so that the victim
    /// analyses with what this agent sees.
    fn refute(&mut self, mut probe: Probe, out: &mut Vec<AgentEffect>) {
        let Some(victim) = probe.victim().cloned() else {
            return;
        };
        // The victim's own edges are its first-hand knowledge already.
        if victim == self.id || self.down.contains(victim.node()) {
            return;
        }
        let next = probe.next as usize;
        let e = &mut probe.edges[next];
        let (lock, node, seen) = (e.lock.clone(), e.node.clone(), e.version);
        let mine = self.knowledge.view(&lock, &node).cloned();
        if let Some(view) = mine.as_ref().filter(|v| {
            v.version > seen && is_pending_in(v, &self.id) && self.needs_copy(&lock, &node)
        }) {
            // This agent still waits there, for others: its newer view says for whom.
            let view = view.clone();
            self.show_victim(victim, lock, node, view, out);
            return;
        }
        // This agent does not wait on that copy at all, as of the newest version it knows.
        let told = (victim.clone(), lock.clone(), node.clone());
        if !self.probes.refuted.contains(&told) {
            if self.probes.refuted.len() >= PARKED {
                self.probes.refuted.pop_front();
            }
            self.probes.refuted.push_back(told);
        }
        let entry = self.knowledge.entry_version(&lock, &node);
        let newest = mine
            .iter()
            .map(|v| v.version)
            .chain(entry)
            .max()
            .unwrap_or(0);
        e.version = seen.max(newest);
        probe.refuted = true;
        out.push(AgentEffect::ToAgent {
            to: victim,
            msg: AgentMessage::Probe(probe),
        });
    }

    /// The graph the deadlock analysis reads, when it differs from the one forwarding reads:
    /// without the edges of waiters that refuted a probe, and without this agent's own edges
    /// from copies none of its pending requests needs (an `Any` request granted elsewhere).
    /// Forwarding still follows those: agents behind this one count on it (`knowledge.rs`).
    pub(super) fn analysis_graph(&self) -> Option<ViewGraph> {
        let unneeded = |l: &LockId, n: &NodeId| !self.needs_copy(l, n);
        let mine_unneeded = self
            .knowledge
            .views()
            .any(|(l, n, v)| is_pending_in(v, &self.id) && unneeded(l, n));
        if !mine_unneeded && !self.knowledge.has_excuses() {
            return None;
        }
        Some(ViewGraph::build_excusing(
            &self.modes,
            self.knowledge.views().map(|(l, n, v)| (l, n, &**v)),
            |l, n, a| (*a == self.id && unneeded(l, n)) || self.knowledge.is_excused(l, n, a),
        ))
    }

    /// What this agent, the waiter of `e`, knows of it first hand.
    fn check_edge(&self, e: &ProbeEdge) -> Check {
        if self.down.contains(&e.node) || !self.needs_copy(&e.lock, &e.node) {
            return Check::Gone;
        }
        match self.knowledge.view(&e.lock, &e.node) {
            Some(v) if blockers_of(&self.modes, v, &self.id).contains(&&e.blocker) => {
                Check::Holds(v.version)
            }
            Some(v) if v.version >= e.version => Check::Gone,
            _ => match self.knowledge.entry_version(&e.lock, &e.node) {
                Some(v) if v >= e.version && !self.knowledge.is_suspended(&e.lock, &e.node) => {
                    Check::Gone
                }
                _ => Check::Unknown,
            },
        }
    }

    /// Whether a request that is not met waits on `(lock, node)`: its lock is `lock` or a
    /// descendant (which needs the intention mode on `lock`) and it names `node` (and did not
    /// leave that copy in a retreat: `gate.rs`).
    pub(super) fn needs_copy(&self, lock: &LockId, node: &NodeId) -> bool {
        self.pending
            .range::<LockId, _>((Bound::Included(lock), Bound::Unbounded))
            .take_while(|l| *l == lock || lock.is_ancestor_of(l))
            .any(|l| {
                self.requests
                    .get(l)
                    .is_some_and(|r| r.nodes.contains(node) && !self.left_copy(l, node))
            })
    }

    /// Every edge of `probe` is confirmed and this agent is its victim: give up the lock of the
    /// edge into it (surrender, or abort with `abort_on_deadlock` when the client would lose a
    /// lock it was told it holds).
    fn give_way(&mut self, probe: &Probe, out: &mut Vec<AgentEffect>) {
        let n = probe.edges.len();
        let into = &probe.edges[n - 2];
        let (lock, node) = (into.lock.clone(), into.node.clone());
        if self.knowledge.surrender_outstanding()
            || probe.epoch != self.probes.epoch
            || probe
                .edges
                .iter()
                .any(|e| victim_order(&e.waiter, &self.id) == Ordering::Greater)
            || self.knowledge.is_suspended(&lock, &node)
            || self
                .knowledge
                .entry_version(&lock, &node)
                .is_none_or(|v| v > into.version)
        {
            return;
        }
        if self.options.abort_on_deadlock
            && self.requests.values().any(|r| {
                r.claimed.is_some() && r.is_under(&lock, &node) && self.would_lose(r, &node)
            })
        {
            self.phase = Phase::Aborted;
            self.report_abort_losses(out);
            self.abort_callers(&lock, &node, out);
            out.push(AgentEffect::Abort { lock, node });
            return;
        }
        let view = self.knowledge.view(&lock, &node).map_or(0, |v| v.version);
        let version = view.max(into.version);
        // The server checks the cycle's waits on its own locks again as it applies the
        // surrender: all of them, for a cycle on one node.
        let waits = probe
            .edges
            .iter()
            .filter(|e| e.node == node)
            .map(|e| Wait {
                waiter: e.waiter.clone(),
                blocker: e.blocker.clone(),
                lock: e.lock.clone(),
            })
            .collect();
        let msg = ServerRequest::Surrender {
            agent: self.id.clone(),
            lock: lock.clone(),
            version,
            waits,
        };
        self.send(out, node.clone(), msg);
        let mut told: Vec<&AgentId> = probe.edges.iter().map(|e| &e.waiter).collect();
        told.sort();
        told.dedup();
        for agent in told.into_iter().filter(|a| **a != self.id) {
            out.push(AgentEffect::ToAgent {
                to: agent.clone(),
                msg: AgentMessage::Surrendered {
                    by: self.id.clone(),
                    node: node.clone(),
                    lock: lock.clone(),
                    version,
                },
            });
        }
        self.knowledge.record_deadlock(Deadlock {
            victim: self.id.clone(),
            lock: lock.clone(),
            node: node.clone(),
        });
        let requests = &self.requests;
        self.knowledge
            .surrendered(&lock, &node, version, |l, n| asks_for(requests, l, n));
        self.mark_tree(&lock);
        self.refresh_status(out);
        // What is left is forwarded again in this settle.
        self.dirty = true;
    }

    /// How many of this agent's surrenders the servers ignored (the lock had changed: the cycle
    /// was already broken) since the last call: for the node's metrics.
    pub(crate) fn take_ignored_surrenders(&mut self) -> u64 {
        std::mem::take(&mut self.knowledge.ignored_surrenders)
    }

    /// Whether giving up the copy on `node` would take from `r` a grant its requirement needs.
    fn would_lose(&self, r: &LockRequest, node: &NodeId) -> bool {
        if !r.held_on(&self.modes, &self.knowledge, node) {
            return false;
        }
        let had = r
            .held_nodes(&self.modes, &self.knowledge, &self.down)
            .count();
        let down = r.nodes.iter().filter(|n| self.down.contains(*n)).count();
        !r.req.is_met(r.nodes.len(), had.saturating_sub(1), down)
    }
}
