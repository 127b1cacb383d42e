//! A deterministic in-memory network of agent cores and lock servers, on the shared harness
//! (`locks_testing::sim`: the seeded network, the real lock tables, the choice of each step).
//!
//! Every message travels on the FIFO channel of its (sender, receiver) pair; which channel
//! delivers next, and when an agent settles after a burst, is chosen by the seeded generator,
//! so a run is a function of its seed. What is specific to the agent simulation lives here:
//! the clients and their scripts (`client.rs`), what a delivery does to an agent core, the
//! audit of applied surrenders (`audit.rs`) and the oracles (`oracles.rs`).
//!
//! Oracles, checked after every step, against what the servers said (the newest notice each
//! server sent about each entry is the server's truth about it):
//! - no lock on any node has two holders in incompatible modes;
//! - a transaction whose status is "have all locks" really holds every request;
//! - on servers whose table the sim inspects ([`Sim::inspect_table`]), an agent and the table
//!   agree whenever nothing is in flight between them (`oracles.rs`).
#![allow(dead_code)]

mod audit;
mod client;
mod drops;
mod fast;
mod oracles;
pub use audit::Audit;
#[allow(unused_imports)]
pub use client::{Act, Ask, Client};
pub use locks_testing::Rng;

use locks_agent::state_machine::{AgentCore, AgentEffect};
use locks_core::proto::{AgentMessage, EntryState, ServerRequest};
use locks_core::{AgentId, LockId, ModeTable, NodeId};
use locks_testing::sim::{AllConnected, Rounds, Route, Step, World};
use std::collections::{BTreeMap, BTreeSet};

/// The seeds of a randomized test: `default` of them, or as many as `AGENT_SIM_SEEDS` says.
pub fn seeds(default: u64) -> std::ops::Range<u64> {
    locks_testing::seeds_from_env("AGENT_SIM_SEEDS", default)
}

/// An end of a channel. (Agents order before servers: the order channels are offered in.)
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    Agent(AgentId),
    Server(NodeId),
}

#[derive(Clone, Debug)]
enum Payload {
    Server(ServerRequest),
    Agent(AgentMessage),
}

/// Message counts of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub steps: u64,
    pub to_server: u64,
    pub notices: u64,
    pub forwards: u64,
    /// Probe messages (a cycle on its way round its waiters, or a refutation back).
    pub probes: u64,
    pub surrenders: u64,
    /// Surrenders the server ignored because the lock had changed since the victim's view.
    pub stale_surrenders: u64,
    pub surrendered_msgs: u64,
    pub aborts: u64,
    /// Conversions the servers took in, by the state of the entry they found (granted,
    /// converting up, waiting) as last told to the agent.
    pub converts_granted: u64,
    pub converts_converting: u64,
    pub converts_waiting: u64,
    /// Times an agent and an inspected table were checked to agree.
    pub agreements: u64,
    /// Requests applied on the fast path (`fast.rs`).
    pub fast: u64,
    /// Calls dropped (`drops.rs`).
    pub drops: u64,
}

/// The simulated network.
pub struct Sim {
    pub modes: ModeTable,
    world: World<End, Payload, AgentId>,
    pub clients: BTreeMap<AgentId, Client>,
    /// Per (node, lock): every agent's entry as the server last reported it.
    truth: BTreeMap<NodeId, BTreeMap<LockId, BTreeMap<AgentId, EntryState>>>,
    /// The locks whose truth changed in the current step.
    changed: Vec<(NodeId, LockId)>,
    pub stats: Stats,
    /// Clients end their transaction when their script is done.
    pub auto_end: bool,
    /// The order in which clients finished their scripts.
    pub finished: Vec<AgentId>,
    /// The tables the agreement oracle looks at.
    inspect: BTreeSet<NodeId>,

    /// The agent that received a message or settled in the current step.
    subject: Option<AgentId>,
    audit: Audit,
    /// Clients with an odd serial take their first locks on the fast path (`fast.rs`).
    pub fast_path: bool,
    /// Clients ask as `lock` calls, and a step may drop one (`drops.rs`).
    pub drops: bool,
    /// The running agent the last delivery handed a probe to, which it has not handled yet:
    /// a test may end it right then, the probe in hand.
    pub probed: Option<AgentId>,
    /// The last call id handed out (`drops.rs`).
    next_call: u64,
    /// Every message sent and the rounds of the run (see [`Sim::counts`]).
    rounds: Rounds<End>,
}

impl Sim {
    /// An empty network run by `seed`.
    pub fn new(seed: u64, modes: ModeTable) -> Sim {
        /// How many deliveries a failure report shows: `SIM_TRACE` (to follow a whole run of
        /// one seed), or 40.
        fn trace_lines() -> usize {
            std::env::var("SIM_TRACE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(40)
        }
        Sim {
            modes,
            world: World::new(seed, trace_lines()),
            clients: BTreeMap::new(),
            truth: BTreeMap::new(),
            changed: Vec::new(),
            stats: Stats::default(),
            auto_end: true,
            finished: Vec::new(),
            inspect: BTreeSet::new(),
            subject: None,
            audit: Audit::default(),
            fast_path: false,
            drops: false,
            probed: None,
            next_call: 0,
            rounds: Rounds::default(),
        }
    }

    /// Lets the agreement oracle look at the table of `node`'s server.
    pub fn inspect_table(&mut self, node: NodeId) {
        self.inspect.insert(node);
    }

    pub fn rng(&mut self) -> &mut Rng {
        self.world.rng()
    }

    /// A lock server on `node`, with the real lock table, counting versions from
    /// `version_base`. Every surrender it applies is audited ([`Sim::audit`]).
    pub fn add_server(&mut self, node: NodeId, version_base: u64) {
        self.world.tables.start(node, &self.modes, version_base);
    }

    /// Calls `f` on a client's core and carries out the effects it returns.
    pub fn with_core(&mut self, id: &AgentId, f: impl FnOnce(&mut AgentCore) -> Vec<AgentEffect>) {
        let effects = f(&mut self.clients.get_mut(id).expect("a client").core);
        // The actor settles after every input, not only after messages.
        self.world.unsettled.insert(id.clone());
        self.route(id, effects);
    }

    /// The server of `node` crashes and restarts at once with an empty table counting versions
    /// from `version_base` (larger than before): everything in flight to or from it is lost.
    /// Agents are not told; see [`Sim::node_down`].
    pub fn crash_server(&mut self, node: &NodeId, version_base: u64) {
        self.world.trace.push(format!("{node} crashes"));
        let end = End::Server(node.clone());
        let lost = |from: &End, to: &End| *from == end || *to == end;
        self.world.net.drop_channels(lost);
        self.rounds.dropped(lost);
        self.truth.remove(node);
        self.world
            .tables
            .start(node.clone(), &self.modes, version_base);
    }

    /// The clients with an agent: an idle one is not told of nodes (its locks are on its own
    /// node, as the router does).
    fn with_agents(&self) -> Vec<AgentId> {
        self.clients
            .iter()
            .filter(|(_, c)| c.idle.is_none())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Every running agent learns that `node` is down.
    pub fn node_down(&mut self, node: &NodeId) {
        let ids = self.with_agents();
        self.world
            .trace
            .push(format!("{node} down, told to {ids:?}"));
        for id in ids {
            self.with_core(&id, |c| c.node_down(node));
        }
    }

    /// Every running agent learns that `node` is up again.
    pub fn node_up(&mut self, node: &NodeId) {
        let ids = self.with_agents();
        self.world.trace.push(format!("{node} up, told to {ids:?}"));
        for id in ids {
            self.with_core(&id, |c| c.node_up(node));
        }
    }

    /// Carries out an agent's effects, as the actor does (the one place effects are read).
    fn route(&mut self, from: &AgentId, effects: Vec<AgentEffect>) {
        let mut end_now = false;
        self.rounds.acting(&End::Agent(from.clone()));
        for e in effects {
            match e {
                AgentEffect::ToServer { node, request } => {
                    self.stats.to_server += 1;
                    if matches!(request, ServerRequest::Surrender { .. }) {
                        self.stats.surrenders += 1;
                    }
                    let (from, to) = (End::Agent(from.clone()), End::Server(node));
                    self.rounds.sent(&from, &to);
                    self.world.send(from, to, Payload::Server(request));
                }
                AgentEffect::ToAgent { to, msg } => {
                    match msg {
                        AgentMessage::Forward { .. } => self.stats.forwards += 1,
                        AgentMessage::Probe(_) => self.stats.probes += 1,
                        AgentMessage::Surrendered { .. } => self.stats.surrendered_msgs += 1,
                        _ => {}
                    }
                    let (from, to) = (End::Agent(from.clone()), End::Agent(to));
                    self.rounds.sent(&from, &to);
                    self.world.send(from, to, Payload::Agent(msg));
                }
                AgentEffect::StatusChanged(s) => {
                    if let Some(c) = self.clients.get_mut(from) {
                        c.statuses.push(s);
                    }
                }
                // What the client is told; the oracles check the status and the tables.
                AgentEffect::Granted(_) | AgentEffect::Lost(_) => {}
                AgentEffect::Abort { lock, node } => {
                    self.stats.aborts += 1;
                    if let Some(c) = self.clients.get_mut(from) {
                        c.aborted = Some((lock, node));
                    }
                    end_now = true;
                }
                AgentEffect::Rejected { node, lock, reason } => {
                    let trace = &self.world.trace;
                    panic!("{from}: {node} rejected {lock}: {reason}\nthe trace's end:\n{trace}");
                }
                AgentEffect::Watched { node, lock, .. } => {
                    panic!("{from}: a view of {lock} on {node}, which no simulated client watches");
                }
                AgentEffect::SurrenderAnswered { node, lock, .. } => {
                    panic!("{from}: no simulated client surrenders {lock} on {node} to a waiter");
                }
                // A dropped call's answer goes nowhere; an answered one may still be dropped.
                AgentEffect::Reply { call, .. } => {
                    assert!(
                        self.drops,
                        "{from}: a reply to {call:?}, but no call was made"
                    );
                }
            }
        }
        if end_now {
            self.kill(from);
        }
    }

    /// Whether anything is in flight or waiting to settle.
    pub fn busy(&self) -> bool {
        self.world.busy()
    }

    /// Delivers one message, settles one agent, makes one deferred conversion or lets one
    /// paused idle client go on (`Client::paused`), chosen at random. Returns false when quiet.
    pub fn step(&mut self) -> Result<bool, String> {
        let converting = self.converting();
        let paused = self.paused();
        let droppable = self.droppable();
        // One choice drops a call, of a client picked at random; offered one step in eight, so
        // that calls also live long enough to deadlock.
        let drop = usize::from(!droppable.is_empty() && self.world.rng.chance(8));
        let Some(step) = self.world.next(converting.len() + paused.len() + drop) else {
            return Ok(false);
        };
        self.stats.steps += 1;
        self.subject = None;
        match step {
            Step::Deliver { from, to, msg } => {
                self.rounds.delivered(&from, &to);
                self.deliver(to, msg)?
            }
            Step::Settle(id) => {
                if let Some(c) = self.clients.get_mut(&id) {
                    let effects = c.core.settle();
                    self.route(&id, effects);
                }
                self.subject = Some(id);
            }
            Step::Extra(i) if i < converting.len() => self.convert_deferred(&converting[i]),
            Step::Extra(i) if i == converting.len() + paused.len() => {
                let who = self.world.rng.below(droppable.len());
                self.drop_call(&droppable[who]);
            }
            Step::Extra(i) => {
                let id = &paused[i - converting.len()];
                self.world.trace.push(format!("{id} goes on"));
                if let Some(c) = self.clients.get_mut(id) {
                    c.paused = false;
                }
            }
        }
        self.check()?;
        self.drive_clients();
        Ok(true)
    }

    fn deliver(&mut self, to: End, msg: Payload) -> Result<(), String> {
        match (to, msg) {
            (End::Server(node), Payload::Server(req)) => self.admit(node, req)?,
            (End::Agent(id), Payload::Agent(msg)) => {
                self.world.trace.push(format!("{id} <- {msg:?}"));
                self.probed = None;
                if matches!(msg, AgentMessage::Notice(_)) {
                    self.stats.notices += 1;
                }
                if self.is_idle(&id) {
                    self.deliver_idle(&id, msg);
                } else if let Some(c) = self.clients.get_mut(&id)
                    && c.core.is_running()
                {
                    if matches!(msg, AgentMessage::Probe(_)) {
                        self.probed = Some(id.clone());
                    }
                    let effects = c.core.receive(msg);
                    self.world.unsettled.insert(id.clone());
                    self.route(&id, effects);
                } else if let AgentMessage::Probe(probe) = msg
                    && let Some((victim, probe)) = probe.refuted_back()
                {
                    // The router sends a probe for an agent that is gone back to its victim,
                    // refuted.
                    self.stats.probes += 1;
                    let (from, to) = (End::Agent(id.clone()), End::Agent(victim));
                    self.world
                        .send(from, to, Payload::Agent(AgentMessage::Probe(probe)));
                }
                self.subject = Some(id);
            }
            (to, _) => return Err(format!("misrouted message to {to:?}")),
        }
        Ok(())
    }

    /// A request reaches `node`'s server: the table applies it, its notices update the truth
    /// and go out to the agents.
    fn admit(&mut self, node: NodeId, req: ServerRequest) -> Result<(), String> {
        self.admit_as(node, req, None)
    }

    /// [`Sim::admit`], for a request of `own`'s fast path: the table's answers to `own` update
    /// the truth but are not sent (the caller reads the table).
    fn admit_as(
        &mut self,
        node: NodeId,
        req: ServerRequest,
        own: Option<&AgentId>,
    ) -> Result<(), String> {
        self.world.trace.push(format!("{node} <- {req:?}"));
        if let ServerRequest::RemoveAgent { agent } = &req {
            for entries in self.truth.entry(node.clone()).or_default().values_mut() {
                entries.remove(agent);
            }
        }
        if !self.world.tables.contains(&node) {
            return Err(format!("no server {node}"));
        }
        let surrender = match &req {
            ServerRequest::Surrender { lock, .. } => Some(lock.clone()),
            _ => None,
        };
        if let ServerRequest::Convert { agent, lock, .. } = &req {
            let found = self
                .truth
                .get(&node)
                .and_then(|t| t.get(lock))
                .and_then(|e| e.get(agent));
            match found {
                Some(EntryState::Granted(_)) => self.stats.converts_granted += 1,
                Some(EntryState::Converting { .. }) => self.stats.converts_converting += 1,
                Some(EntryState::Waiting(_)) => self.stats.converts_waiting += 1,
                _ => {}
            }
        }
        let on_cycle = self.victim_on_cycle(&req);
        // Whether any notice says a surrender was applied, and whether one says so of the
        // surrendered lock (the audit's test).
        let (mut any_surrendered, mut applied) = (false, false);
        let (truth, changed, net) = (&mut self.truth, &mut self.changed, &mut self.world.net);
        let rounds = &mut self.rounds;
        let server = End::Server(node.clone());
        let served = self
            .world
            .tables
            .admit(&node, [req], &AllConnected, |agent, msg| {
                if let AgentMessage::Notice(n) = &msg {
                    if audit::surrendered(&msg) {
                        any_surrendered = true;
                        applied |= surrender.as_ref() == Some(&n.lock);
                    }
                    let entries = truth
                        .entry(n.node.clone())
                        .or_default()
                        .entry(n.lock.clone())
                        .or_default();
                    changed.push((n.node.clone(), n.lock.clone()));
                    if n.state == EntryState::Absent {
                        entries.remove(&agent);
                    } else {
                        entries.insert(agent.clone(), n.state);
                    }
                }
                if own != Some(&agent) {
                    let to = End::Agent(agent);
                    rounds.sent(&server, &to);
                    net.send(server.clone(), to, Payload::Agent(msg));
                }
                Route::Sent
            });
        served.map_err(|e| e.to_string())?;
        if surrender.is_some() && !any_surrendered {
            self.stats.stale_surrenders += 1;
        }
        if let Some(on_cycle) = on_cycle {
            self.record_surrender(applied, on_cycle);
        }
        Ok(())
    }

    /// The messages sent (agents' and servers') and the rounds (the longest chain of messages
    /// each sent in answer to the one before) so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.rounds.messages, self.rounds.rounds)
    }

    /// The last deliveries, oldest first.
    pub fn last_trace(&self) -> String {
        self.world.trace.to_string()
    }

    /// Runs until nothing is in flight, at most `max_steps` steps.
    pub fn run(&mut self, max_steps: u64) -> Result<(), String> {
        self.drive_clients();
        let start = self.stats.steps;
        while self.step()? {
            if self.stats.steps - start > max_steps {
                return Err(format!(
                    "still busy after {max_steps} steps\n{}",
                    self.last_trace()
                ));
            }
        }
        Ok(())
    }

    /// The wait-for graphs of the unfinished clients, for failure reports.
    pub fn dump(&self) -> String {
        let mut s = String::from("server truth:\n");
        for (node, locks) in &self.truth {
            for (lock, entries) in locks {
                if !entries.is_empty() {
                    s.push_str(&format!("  {lock}@{node}: {entries:?}\n"));
                }
            }
        }
        s.push_str(&format!("the tables' cycles: {:?}\n", self.real_cycles()));
        for (id, c) in self.clients.iter().filter(|(_, c)| !c.done) {
            s.push_str(&format!(
                "{id}: {:?} requests {:?}\n{}\n",
                c.core.status(),
                c.core
                    .requests()
                    .map(|r| (r.lock.to_string(), r.mode))
                    .collect::<Vec<_>>(),
                c.core.wait_for_graph_dot()
            ));
        }
        if self.world.trace.on() {
            s.push_str(&format!("last deliveries:\n{}\n", self.world.trace));
        }
        s
    }
}
