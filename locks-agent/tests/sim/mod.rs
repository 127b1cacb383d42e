//! A deterministic in-memory network of agent cores and lock servers.
//!
//! Every message travels on the FIFO channel of its (sender, receiver) pair, as over an actix
//! mailbox or a TCP connection; which channel delivers next, and when an agent settles after a
//! burst, is chosen by a seeded xorshift generator, so a run is a function of its seed. Lock
//! servers are plain functions from a request to the messages it causes (the real
//! `locks_server::LockTable`, wrapped by the tests).
//!
//! Clients follow scripts: a list of phases, each a set of requests issued at once (like
//! `lock_nowait`) and of conversions down; the next phase starts when the transaction has all
//! its locks (like a blocking `lock`), and a client whose script is done ends its transaction.
//! A conversion is made with the phase's requests or, chosen at random, at a later step of the
//! phase (before the next phase starts): so it reaches the server while the entry it converts
//! is granted, waiting, or converting up for a request of the same phase.
//!
//! Oracles, checked after every step, against what the servers said (the newest notice each
//! server sent about each entry is the server's truth about it):
//! - no lock on any node has two holders in incompatible modes;
//! - a transaction whose status is "have all locks" really holds every request;
//! - on servers whose table the sim can inspect ([`Sim::inspect_table`]), an agent and the
//!   table agree whenever nothing is in flight between them (`oracles.rs`).
#![allow(dead_code)]

mod global;
mod oracles;
mod seeded;
mod table;
#[allow(unused_imports)]
pub use global::table_servers_audited;
pub use seeded::Rng;
use seeded::seeds_from_env;
#[allow(unused_imports)]
pub use table::{Audit, Inspect, table_server, table_server_audited, table_server_inspected};

use locks_agent::internal::{AgentCore, Effect};
use locks_agent::{LockResult, Options, Req, TransactionStatus};
use locks_core::proto::{AgentMessage, EntryState, Note, ServerRequest};
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The seeds of a randomized test: `default` of them, or as many as `AGENT_SIM_SEEDS` says.
pub fn seeds(default: u64) -> std::ops::Range<u64> {
    seeds_from_env("AGENT_SIM_SEEDS", default)
}

/// A lock server: the messages one request causes, in order.
pub type ServerFn = Box<dyn FnMut(ServerRequest) -> Vec<(AgentId, AgentMessage)>>;

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

/// One lock request of a client script.
#[derive(Clone, Debug)]
pub struct Ask {
    pub lock: LockId,
    pub mode: Mode,
    pub nodes: Vec<NodeId>,
    pub req: Req,
}

impl Ask {
    pub fn on(node: &NodeId, lock: LockId, mode: Mode) -> Ask {
        Ask {
            lock,
            mode,
            nodes: vec![node.clone()],
            req: Req::All,
        }
    }
}

/// One step of a client's phase.
#[derive(Clone, Debug)]
pub enum Act {
    /// A lock request.
    Lock(Ask),
    /// Convert the request on the lock down to the mode (it must be weaker then).
    Convert(LockId, Mode),
}

/// A transaction and the client that drives it.
pub struct Client {
    pub core: AgentCore,
    /// Phases not started yet.
    pub script: VecDeque<Vec<Act>>,
    /// Conversions of the current phase not made yet, in order.
    pub deferred: VecDeque<(LockId, Mode)>,
    /// The result of each completed phase.
    pub results: Vec<LockResult>,
    /// Whether a phase was started and is not complete yet.
    pub in_phase: bool,
    /// Set when the transaction ended (after its last phase, killed, or aborted).
    pub done: bool,
    /// Set when the agent aborted on a deadlock.
    pub aborted: Option<(LockId, NodeId)>,
    /// Every status the agent reported, in order.
    pub statuses: Vec<TransactionStatus>,
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
}

/// The simulated network.
pub struct Sim {
    pub modes: ModeTable,
    servers: BTreeMap<NodeId, ServerFn>,
    pub clients: BTreeMap<AgentId, Client>,
    channels: BTreeMap<(End, End), VecDeque<Payload>>,
    unsettled: BTreeSet<AgentId>,
    rng: Rng,
    /// Per (node, lock): every agent's entry as the server last reported it.
    truth: BTreeMap<NodeId, BTreeMap<LockId, BTreeMap<AgentId, EntryState>>>,
    /// The locks whose truth changed in the current step.
    touched: Vec<(NodeId, LockId)>,
    pub stats: Stats,
    /// Clients end their transaction when their script is done.
    pub auto_end: bool,
    /// The order in which clients finished their scripts.
    pub finished: Vec<AgentId>,
    /// A trace of the last deliveries, for failure reports.
    trace: VecDeque<String>,
    /// The tables the agreement oracle looks at.
    inspect: BTreeMap<NodeId, Inspect>,
    /// The agent that received a message or settled in the current step.
    subject: Option<AgentId>,
}

impl Sim {
    pub fn new(seed: u64, modes: ModeTable) -> Sim {
        Sim {
            modes,
            servers: BTreeMap::new(),
            clients: BTreeMap::new(),
            channels: BTreeMap::new(),
            unsettled: BTreeSet::new(),
            rng: Rng::new(seed),
            truth: BTreeMap::new(),
            touched: Vec::new(),
            stats: Stats::default(),
            auto_end: true,
            finished: Vec::new(),
            trace: VecDeque::new(),
            inspect: BTreeMap::new(),
            subject: None,
        }
    }

    /// Lets the agreement oracle look at the table of `node`'s server.
    pub fn inspect_table(&mut self, node: NodeId, inspect: Inspect) {
        self.inspect.insert(node, inspect);
    }

    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    pub fn add_server(&mut self, node: NodeId, server: ServerFn) {
        self.servers.insert(node, server);
    }

    pub fn add_client(&mut self, id: AgentId, options: Options, script: Vec<Vec<Ask>>) {
        let script = script
            .into_iter()
            .map(|phase| phase.into_iter().map(Act::Lock).collect())
            .collect();
        self.add_client_acts(id, options, script);
    }

    /// A client whose phases may convert requests down too.
    pub fn add_client_acts(&mut self, id: AgentId, options: Options, script: Vec<Vec<Act>>) {
        let core = AgentCore::new(id.clone(), self.modes.clone(), options);
        self.clients.insert(
            id,
            Client {
                core,
                script: script.into(),
                deferred: VecDeque::new(),
                results: Vec::new(),
                in_phase: false,
                done: false,
                aborted: None,
                statuses: Vec::new(),
            },
        );
    }

    pub fn client(&self, id: &AgentId) -> &Client {
        &self.clients[id]
    }

    pub fn status(&self, id: &AgentId) -> TransactionStatus {
        self.clients[id].core.status()
    }

    /// Starts the next phase of `id`'s script now, whatever its status.
    pub fn start_phase(&mut self, id: &AgentId) {
        let Some(client) = self.clients.get_mut(id) else {
            return;
        };
        let Some(phase) = client.script.pop_front() else {
            return;
        };
        client.in_phase = true;
        for act in phase {
            match act {
                Act::Lock(ask) => self.ask(id, ask).expect("the request is accepted"),
                Act::Convert(lock, mode) => {
                    let later = self.rng.chance(2);
                    let client = self.clients.get_mut(id).expect("a client");
                    if later || !client.deferred.is_empty() {
                        client.deferred.push_back((lock, mode));
                    } else {
                        self.convert(id, &lock, mode);
                    }
                }
            }
        }
    }

    /// Converts `id`'s request on `lock` down to `mode`, now (the script makes sure it is
    /// weaker).
    pub fn convert(&mut self, id: &AgentId, lock: &LockId, mode: Mode) {
        self.with_core(id, |c| {
            c.convert(lock, mode)
                .unwrap_or_else(|e| panic!("{id}: convert {lock} to {mode}: {e}"))
        });
    }

    /// Makes the next deferred conversion of `id`, if its transaction still runs.
    fn convert_deferred(&mut self, id: &AgentId) {
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        let next = c.deferred.pop_front();
        if !c.core.is_running() {
            c.deferred.clear();
            return;
        }
        if let Some((lock, mode)) = next {
            self.trace(format!("{id} converts {lock} to {mode}"));
            self.convert(id, &lock, mode);
        }
    }

    /// One request, now.
    pub fn ask(&mut self, id: &AgentId, ask: Ask) -> Result<(), locks_agent::RequestError> {
        let client = self.clients.get_mut(id).expect("a client");
        let effects = client
            .core
            .request(ask.lock, ask.mode, &ask.nodes, ask.req)?;
        self.unsettled.insert(id.clone());
        self.route(id, effects);
        Ok(())
    }

    /// Calls `f` on a client's core and carries out the effects it returns.
    pub fn with_core(&mut self, id: &AgentId, f: impl FnOnce(&mut AgentCore) -> Vec<Effect>) {
        let effects = f(&mut self.clients.get_mut(id).expect("a client").core);
        // The actor settles after every input, not only after messages.
        self.unsettled.insert(id.clone());
        self.route(id, effects);
    }

    /// Ends a client's transaction now (its client "is killed").
    pub fn kill(&mut self, id: &AgentId) {
        self.with_core(id, AgentCore::end);
        if let Some(c) = self.clients.get_mut(id) {
            c.done = true;
        }
    }

    /// The server of `node` crashes and restarts at once as `server` (an empty table with a
    /// larger version base): everything in flight to or from it is lost. Agents are not told;
    /// see [`Sim::node_down`].
    pub fn crash_server(&mut self, node: &NodeId, server: ServerFn) {
        let end = End::Server(node.clone());
        self.channels
            .retain(|(from, to), _| *from != end && *to != end);
        self.truth.remove(node);
        self.servers.insert(node.clone(), server);
    }

    /// Every running agent learns that `node` is down.
    pub fn node_down(&mut self, node: &NodeId) {
        let ids: Vec<AgentId> = self.clients.keys().cloned().collect();
        for id in ids {
            self.with_core(&id, |c| c.node_down(node));
        }
    }

    /// Every running agent learns that `node` is up again.
    pub fn node_up(&mut self, node: &NodeId) {
        let ids: Vec<AgentId> = self.clients.keys().cloned().collect();
        for id in ids {
            self.with_core(&id, |c| c.node_up(node));
        }
    }

    fn send(&mut self, from: End, to: End, p: Payload) {
        self.channels.entry((from, to)).or_default().push_back(p);
    }

    fn route(&mut self, from: &AgentId, effects: Vec<Effect>) {
        let mut end_now = false;
        for e in effects {
            match e {
                Effect::ToServer { node, request } => {
                    self.stats.to_server += 1;
                    if matches!(request, ServerRequest::Surrender { .. }) {
                        self.stats.surrenders += 1;
                    }
                    self.send(
                        End::Agent(from.clone()),
                        End::Server(node),
                        Payload::Server(request),
                    );
                }
                Effect::ToAgent { to, msg } => {
                    match msg {
                        AgentMessage::Forward { .. } => self.stats.forwards += 1,
                        AgentMessage::Probe(_) => self.stats.probes += 1,
                        AgentMessage::Surrendered { .. } => self.stats.surrendered_msgs += 1,
                        _ => {}
                    }
                    self.send(
                        End::Agent(from.clone()),
                        End::Agent(to),
                        Payload::Agent(msg),
                    );
                }
                Effect::StatusChanged(s) => {
                    if let Some(c) = self.clients.get_mut(from) {
                        c.statuses.push(s);
                    }
                }
                // What the client is told; the oracles check the status and the tables.
                Effect::Granted(_) | Effect::Lost(_) => {}
                Effect::Abort { lock, node } => {
                    self.stats.aborts += 1;
                    if let Some(c) = self.clients.get_mut(from) {
                        c.aborted = Some((lock, node));
                    }
                    end_now = true;
                }
                Effect::Rejected { node, lock, reason } => {
                    panic!("{from}: {node} rejected {lock}: {reason}");
                }
                Effect::Watched { node, lock, .. } => {
                    panic!("{from}: a view of {lock} on {node}, which no simulated client watches");
                }
                Effect::SurrenderAnswered { node, lock, .. } => {
                    panic!("{from}: no simulated client surrenders {lock} on {node} to a waiter");
                }
                Effect::Reply { call, .. } => {
                    panic!("{from}: a reply to {call:?}, which no simulated client waits as");
                }
            }
        }
        if end_now {
            self.kill(from);
        }
    }

    /// Whether anything is in flight or waiting to settle.
    pub fn busy(&self) -> bool {
        !self.unsettled.is_empty() || self.channels.values().any(|q| !q.is_empty())
    }

    /// Delivers one message or settles one agent, chosen at random. Returns false when quiet.
    pub fn step(&mut self) -> Result<bool, String> {
        let live: Vec<(End, End)> = self
            .channels
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        let unsettled: Vec<AgentId> = self.unsettled.iter().cloned().collect();
        let converting: Vec<AgentId> = self
            .clients
            .iter()
            .filter(|(_, c)| !c.deferred.is_empty())
            .map(|(id, _)| id.clone())
            .collect();
        let n = live.len() + unsettled.len() + converting.len();
        if n == 0 {
            return Ok(false);
        }
        self.stats.steps += 1;
        self.subject = None;
        let pick = self.rng.below(n);
        if pick >= live.len() + unsettled.len() {
            let id = converting[pick - live.len() - unsettled.len()].clone();
            self.convert_deferred(&id);
        } else if pick < live.len() {
            let key = &live[pick];
            let msg = self
                .channels
                .get_mut(key)
                .and_then(VecDeque::pop_front)
                .ok_or("empty channel")?;
            self.deliver(key.1.clone(), msg)?;
        } else {
            let id = unsettled[pick - live.len()].clone();
            self.unsettled.remove(&id);
            if let Some(c) = self.clients.get_mut(&id) {
                let effects = c.core.settle();
                self.route(&id, effects);
            }
            self.subject = Some(id);
        }
        self.check()?;
        self.drive_clients();
        Ok(true)
    }

    fn deliver(&mut self, to: End, msg: Payload) -> Result<(), String> {
        match (to, msg) {
            (End::Server(node), Payload::Server(req)) => {
                self.trace(format!("{node} <- {req:?}"));
                if let ServerRequest::RemoveAgent { agent } = &req {
                    for entries in self.truth.entry(node.clone()).or_default().values_mut() {
                        entries.remove(agent);
                    }
                }
                let server = self
                    .servers
                    .get_mut(&node)
                    .ok_or_else(|| format!("no server {node}"))?;
                let surrender = matches!(req, ServerRequest::Surrender { .. });
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
                let out = server(req);
                if surrender
                    && !out
                        .iter()
                        .any(|(_, m)| matches!(m, AgentMessage::Notice(n) if matches!(n.note, Some(Note::Surrendered { .. }))))
                {
                    self.stats.stale_surrenders += 1;
                }
                for (agent, msg) in out {
                    if let AgentMessage::Notice(n) = &msg {
                        let entries = self
                            .truth
                            .entry(n.node.clone())
                            .or_default()
                            .entry(n.lock.clone())
                            .or_default();
                        self.touched.push((n.node.clone(), n.lock.clone()));
                        if n.state == EntryState::Absent {
                            entries.remove(&agent);
                        } else {
                            entries.insert(agent.clone(), n.state);
                        }
                    }
                    self.send(
                        End::Server(node.clone()),
                        End::Agent(agent),
                        Payload::Agent(msg),
                    );
                }
            }
            (End::Agent(id), Payload::Agent(msg)) => {
                self.trace(format!("{id} <- {msg:?}"));
                if matches!(msg, AgentMessage::Notice(_)) {
                    self.stats.notices += 1;
                }
                if let Some(c) = self.clients.get_mut(&id)
                    && c.core.is_running()
                {
                    let effects = c.core.receive(msg);
                    self.unsettled.insert(id.clone());
                    self.route(&id, effects);
                } else if let AgentMessage::Probe(mut probe) = msg
                    && !probe.refuted
                    && let Some(victim) = probe.victim().cloned()
                {
                    // The router sends a probe for an agent that is gone back to its victim,
                    // refuted.
                    probe.refuted = true;
                    self.stats.probes += 1;
                    self.send(
                        End::Agent(id.clone()),
                        End::Agent(victim),
                        Payload::Agent(AgentMessage::Probe(probe)),
                    );
                }
                self.subject = Some(id);
            }
            (to, _) => return Err(format!("misrouted message to {to:?}")),
        }
        Ok(())
    }

    fn trace(&mut self, line: String) {
        if self.trace.len() >= 40 {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }

    /// The last deliveries, oldest first.
    pub fn last_trace(&self) -> String {
        self.trace.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// Starts next phases and ends finished transactions, until none is ready (a phase that
    /// asks only for what is held is complete at once).
    fn drive_clients(&mut self) {
        loop {
            let ready: Vec<AgentId> = self
                .clients
                .iter()
                .filter(|(_, c)| {
                    !c.done
                        && c.core.is_running()
                        && c.core.status().have_all_locks()
                        && (c.in_phase || !c.script.is_empty() || self.auto_end)
                })
                .map(|(id, _)| id.clone())
                .collect();
            if ready.is_empty() {
                return;
            }
            for id in ready {
                // The phase's conversions are made before it counts as complete.
                while !self.clients[&id].deferred.is_empty() {
                    self.convert_deferred(&id);
                }
                let c = self.clients.get_mut(&id).expect("a client");
                if c.in_phase {
                    c.in_phase = false;
                    if let Some(r) = c.core.lock_result() {
                        c.results.push(r);
                    }
                }
                if !c.script.is_empty() {
                    self.start_phase(&id);
                } else if self.auto_end {
                    self.finished.push(id.clone());
                    self.kill(&id);
                }
            }
        }
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

    /// Clients that have not finished their scripts.
    pub fn unfinished(&self) -> Vec<AgentId> {
        self.clients
            .iter()
            .filter(|(_, c)| !c.done)
            .map(|(id, _)| id.clone())
            .collect()
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
        s
    }
}
