//! One state of the modelled system and the steps that lead out of it.
//!
//! A [`World`] is every lock table (the real `locks_server::state_machine::LockTable`, one per node, on the
//! shared harness's `Tables`), every
//! agent (the real `AgentCore`, wrapped as [`Client`] with the position of its client in its
//! script) and every message in flight. Messages travel on the FIFO channel of their
//! `(sender, receiver)` pair, as over an actix mailbox or a TCP connection; channels of
//! different pairs interleave freely.
//!
//! The steps ([`Action`]) are exactly what the agent actor (`locks-agent/src/actor.rs`) does:
//! - a client call (`request`, `unlock`, `convert`) is fed to the core, its effects are carried
//!   out in order, and a settle round is scheduled; a blocking `lock` leaves the client waiting
//!   until a settle round finds the transaction with all its locks (the actor answers waiting
//!   callers only in `settle`); `end` releases everything (`RemoveAgent` to every server the
//!   agent used) and stops the agent;
//! - a delivered message is fed to `receive`; a settle round is scheduled when the status
//!   changed or the core says it needs one (`needs_settle`);
//! - a settle round (`settle`) may run at any time while one is scheduled;
//! - `AgentEffect::Abort` stops the agent: the effects after it are dropped, callers are failed and
//!   every server it used is told `RemoveAgent`.
//!
//! Invariant: a step is a pure function of the world and the configuration, so a path of
//! actions replays to the same states (the explorer stores paths, not states, for its traces).

use super::show::{show_msg, show_op, show_request, show_status};
use locks_agent::state_machine::{AgentCore, AgentEffect, CallId};
use locks_agent::{Options, Req, TransactionStatus};
use locks_core::proto::{AgentMessage, ServerRequest};
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId};
use locks_testing::sim::{AllConnected, Net, Route, Tables};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One client call of a script.
#[derive(Clone, Debug)]
pub enum Op {
    /// `lock`/`lock_nowait`/`lock_on`: `lock` in `mode` on the nodes (indexes), of which `req`
    /// must grant it. With `wait`, the client's next call waits for "have all locks".
    Lock {
        /// The lock.
        lock: LockId,
        /// The mode.
        mode: Mode,
        /// Node indexes.
        nodes: Vec<usize>,
        /// The requirement.
        req: Req,
        /// Blocking (`lock`) rather than `lock_nowait`.
        wait: bool,
    },
    /// `unlock`.
    Unlock(LockId),
    /// `convert` down to a weaker mode.
    Convert(LockId, Mode),
    /// `end`.
    End,
    /// The client drops the future of its last blocking `lock` (a timeout, a lost `select!`
    /// branch): possible at any moment while the call waits, and after it returned too (then
    /// it withdraws nothing).
    Drop,
}

/// One agent of a configuration.
#[derive(Clone, Debug)]
pub struct AgentSpec {
    /// A short name for traces.
    pub name: String,
    /// The index of the node it lives on (its id orders by node first, then creation).
    pub node: usize,
    /// Transaction options.
    pub options: Options,
    /// The client's calls, in order.
    pub script: Vec<Op>,
}

/// A configuration to explore exhaustively.
#[derive(Clone, Debug)]
pub struct Config {
    /// Its name (`MODEL_CHECK_CONFIG` selects by it).
    pub name: String,
    /// How many nodes (each with its own table).
    pub nodes: usize,
    /// The agents, in creation order.
    pub agents: Vec<AgentSpec>,
    /// A fixed order of the client calls across agents, if any: the agent of each call in
    /// turn. A call is made only once every call before it in this order was made and the
    /// blocking ones returned; deliveries and settle rounds still interleave in every way.
    pub order: Option<Vec<usize>>,
    /// Calls are made only in quiescent states (nothing in flight, every agent settled): the
    /// interleavings explored are those of the messages each call causes. Keeps configurations
    /// with many calls small enough to explore fully.
    pub calm: bool,
}

/// A configuration with its ids resolved.
pub struct Model {
    pub config: Config,
    pub modes: ModeTable,
    pub node_ids: Vec<NodeId>,
    pub agent_ids: Vec<AgentId>,
    pub by_id: BTreeMap<AgentId, usize>,
}

impl Model {
    pub fn new(config: Config) -> Model {
        let node_ids: Vec<NodeId> = (1..=config.nodes)
            .map(|i| NodeId::new(format!("n{i}")).expect("a node id"))
            .collect();
        let agent_ids: Vec<AgentId> = config
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| AgentId::new(node_ids[a.node].clone(), 1, i as u64 + 1))
            .collect();
        let by_id = agent_ids
            .iter()
            .enumerate()
            .map(|(i, a)| (a.clone(), i))
            .collect();
        Model {
            config,
            modes: ModeTable::standard(),
            node_ids,
            agent_ids,
            by_id,
        }
    }

    /// The name of an agent, for traces.
    pub fn name(&self, id: &AgentId) -> &str {
        self.by_id
            .get(id)
            .map_or("?", |&i| self.config.agents[i].name.as_str())
    }

    pub fn node_index(&self, node: &NodeId) -> usize {
        self.node_ids
            .iter()
            .position(|n| n == node)
            .expect("a known node")
    }

    /// The initial world: empty tables, no message, every client at the start of its script.
    pub fn initial(&self) -> World {
        let mut tables = Tables::new();
        for (i, n) in self.node_ids.iter().enumerate() {
            tables.start(n.clone(), &self.modes, i as u64 * 1000);
        }
        World {
            tables,
            clients: self
                .config
                .agents
                .iter()
                .zip(&self.agent_ids)
                .map(|(spec, id)| Client {
                    core: AgentCore::new(id.clone(), self.modes.clone(), spec.options.clone()),
                    pc: 0,
                    blocked: false,
                    call: None,
                    unsettled: false,
                    stop: None,
                    decisions: 0,
                })
                .collect(),
            chans: Net::new(),
        }
    }
}

/// One end of a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    /// Agent index.
    Agent(usize),
    /// Node index (its lock server).
    Server(usize),
}

/// A message in flight.
#[derive(Clone, Debug)]
pub enum Msg {
    ToServer(ServerRequest),
    ToAgent(AgentMessage),
}

/// Why a client stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    Ended,
    Aborted(String),
}

/// An agent and its client.
#[derive(Clone, Debug)]
pub struct Client {
    pub core: AgentCore,
    /// The next call of the script.
    pub pc: usize,
    /// Waiting for the answer of a blocking `lock`.
    pub blocked: bool,
    /// The last blocking `lock` call, which an [`Op::Drop`] withdraws, with its lock and the
    /// mode of the request on it before the call.
    pub call: Option<(CallId, LockId, Option<Mode>)>,
    /// A settle round is scheduled.
    pub unsettled: bool,
    pub stop: Option<Stop>,
    /// Surrenders and aborts decided so far (bounded by the oracle: versions only grow, so a
    /// run that keeps surrendering never revisits a state).
    pub decisions: u32,
}

/// The whole system (see the module documentation).
#[derive(Clone, Debug)]
pub struct World {
    /// The tables, by node (node ids order as their indexes).
    pub tables: Tables,
    pub clients: Vec<Client>,
    /// The messages in flight (no empty channel: the same state has one rendering).
    pub chans: Net<Endpoint, Msg>,
}

/// A step out of a world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The client of agent `i` makes its next call.
    Call(usize),
    /// Agent `i` runs its scheduled settle round.
    Settle(usize),
    /// The first message of a channel is delivered.
    Deliver(Endpoint, Endpoint),
}

/// A surrender or abort an agent decided during a step.
#[derive(Clone, Debug)]
pub struct Decision {
    pub agent: usize,
    /// "surrender" or "abort", with the lock and node.
    pub what: String,
}

/// What a step did, for the oracles and the traces.
#[derive(Default)]
pub struct Outcome {
    /// The decisions, each with the world as it was when it was decided.
    pub decisions: Vec<(Decision, World)>,
    /// A readable line, when asked for.
    pub line: Option<String>,
}

impl World {
    /// The steps possible now.
    pub fn enabled(&self, m: &Model) -> Vec<Action> {
        let mut out = Vec::new();
        let calm = !m.config.calm || self.quiescent();
        let turn = m.config.order.as_ref().map(|order| {
            let made: usize = self.clients.iter().map(|c| c.pc).sum();
            let waiting = self.clients.iter().any(|c| c.blocked);
            order.get(made).filter(|_| !waiting).copied()
        });
        for (i, c) in self.clients.iter().enumerate() {
            let my_turn = turn.is_none_or(|t| t == Some(i));
            let next = m.config.agents[i].script.get(c.pc);
            // A drop comes while the call waits, in any state.
            let dropping = c.blocked && matches!(next, Some(Op::Drop));
            if (dropping || calm && my_turn && !c.blocked) && c.stop.is_none() && next.is_some() {
                out.push(Action::Call(i));
            }
            if c.stop.is_none() && c.unsettled {
                out.push(Action::Settle(i));
            }
        }
        for (from, to, _) in self.chans.channels() {
            out.push(Action::Deliver(*from, *to));
        }
        out
    }

    /// Nothing in flight and no settle round scheduled.
    pub fn quiescent(&self) -> bool {
        !self.chans.busy()
            && self
                .clients
                .iter()
                .all(|c| c.stop.is_some() || !c.unsettled)
    }

    /// Takes one step. With `verbose`, the outcome carries a readable line.
    pub fn step(&mut self, m: &Model, action: Action, verbose: bool) -> Outcome {
        let mut o = Outcome::default();
        let mut line = String::new();
        match action {
            Action::Call(i) => {
                let op = m.config.agents[i].script[self.clients[i].pc].clone();
                self.clients[i].pc += 1;
                if verbose {
                    let _ = write!(line, "{}: {}", m.config.agents[i].name, show_op(m, &op));
                }
                self.call(m, i, op, &mut o, &mut line, verbose);
            }
            Action::Settle(i) => {
                if verbose {
                    let _ = write!(line, "{}: settle", m.config.agents[i].name);
                }
                self.clients[i].unsettled = false;
                let effects = self.clients[i].core.settle();
                self.execute(m, i, effects, &mut o, &mut line, verbose);
                let c = &mut self.clients[i];
                if c.stop.is_none() && c.blocked {
                    match c.core.status_ref() {
                        TransactionStatus::HaveAllLocks { .. } => {
                            c.blocked = false;
                            if verbose {
                                line.push_str(" [lock returns]");
                            }
                        }
                        TransactionStatus::CannotServe { .. } => {
                            c.blocked = false;
                            if verbose {
                                line.push_str(" [lock fails: cannot serve]");
                            }
                        }
                        _ => {}
                    }
                }
            }
            Action::Deliver(from, to) => {
                let msg = self.chans.pop(&from, &to).expect("an enabled channel");
                self.deliver(m, from, to, msg, &mut o, &mut line, verbose);
            }
        }
        if verbose {
            o.line = Some(line);
        }
        o
    }

    fn call(
        &mut self,
        m: &Model,
        i: usize,
        op: Op,
        o: &mut Outcome,
        line: &mut String,
        verbose: bool,
    ) {
        let pc = self.clients[i].pc;
        let core = &mut self.clients[i].core;
        let result = match op {
            Op::Lock {
                lock,
                mode,
                nodes,
                req,
                wait,
            } => {
                let nodes: Vec<NodeId> = nodes.iter().map(|&n| m.node_ids[n].clone()).collect();
                if wait {
                    let call = CallId(pc as u64);
                    let before = core.request_on(&lock).map(|r| r.mode);
                    let r = core.lock_and_wait(call, lock.clone(), mode, &nodes, req);
                    if r.is_ok() {
                        self.clients[i].blocked = true;
                        self.clients[i].call = Some((call, lock, before));
                    }
                    r
                } else {
                    core.request(lock, mode, &nodes, req)
                }
            }
            Op::Drop => {
                let c = &mut self.clients[i];
                let waited = std::mem::take(&mut c.blocked);
                match c.call.take() {
                    Some((call, lock, before)) => {
                        let effects = c.core.withdraw(call).1;
                        // Dropped while it waited: the request is as it was before the call
                        // (the agreement oracle checks the tables at quiescence).
                        let now = c.core.request_on(&lock).map(|r| r.mode);
                        assert!(
                            !waited || now == before,
                            "{}: a dropped call on {lock} left {now:?}, not {before:?}",
                            m.config.name
                        );
                        Ok(effects)
                    }
                    None => Ok(Vec::new()),
                }
            }
            Op::Unlock(lock) => core.unlock(&lock),
            Op::Convert(lock, mode) => core.convert(&lock, mode),
            Op::End => {
                let effects = core.end();
                self.clients[i].stop = Some(Stop::Ended);
                self.clients[i].blocked = false;
                self.execute(m, i, effects, o, line, verbose);
                return;
            }
        };
        match result {
            Ok(effects) => {
                self.execute(m, i, effects, o, line, verbose);
                self.clients[i].unsettled = true;
            }
            Err(e) => {
                if verbose {
                    let _ = write!(line, " -> error: {e}");
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &mut self,
        m: &Model,
        from: Endpoint,
        to: Endpoint,
        msg: Msg,
        o: &mut Outcome,
        line: &mut String,
        verbose: bool,
    ) {
        match (to, msg) {
            (Endpoint::Server(n), Msg::ToServer(req)) => {
                if verbose {
                    let _ = write!(line, "{} <- {}", m.node_ids[n], show_request(m, &req));
                }
                let chans = &mut self.chans;
                let served =
                    self.tables
                        .admit(&m.node_ids[n], [req], &AllConnected, |agent, msg| {
                            let a = m.by_id[&agent];
                            if verbose {
                                let _ = write!(
                                    line,
                                    "\n      => {}: {}",
                                    m.name(&agent),
                                    show_msg(m, &msg)
                                );
                            }
                            chans.send(Endpoint::Server(n), Endpoint::Agent(a), Msg::ToAgent(msg));
                            Route::Sent
                        });
                served.expect("a table per node");
            }
            (Endpoint::Agent(a), Msg::ToAgent(msg)) => {
                if verbose {
                    let sender = match from {
                        Endpoint::Agent(f) => m.config.agents[f].name.clone(),
                        Endpoint::Server(n) => m.node_ids[n].to_string(),
                    };
                    let _ = write!(
                        line,
                        "{} <- {}: {}",
                        m.config.agents[a].name,
                        sender,
                        show_msg(m, &msg)
                    );
                }
                if self.clients[a].stop.is_some() || !self.clients[a].core.is_running() {
                    if verbose {
                        line.push_str(" (agent stopped: dropped)");
                    }
                    return;
                }
                let effects = self.clients[a].core.receive(msg);
                let changed = effects
                    .iter()
                    .any(|e| matches!(e, AgentEffect::StatusChanged(_)));
                self.execute(m, a, effects, o, line, verbose);
                let c = &mut self.clients[a];
                if c.stop.is_none() && (changed || c.core.needs_settle()) {
                    c.unsettled = true;
                }
            }
            (to, _) => panic!("misrouted message to {to:?}"),
        }
    }

    fn send(&mut self, from: Endpoint, to: Endpoint, msg: Msg) {
        self.chans.send(from, to, msg);
    }

    /// Carries out agent `i`'s effects in order, as the actor's `execute` does.
    fn execute(
        &mut self,
        m: &Model,
        i: usize,
        effects: Vec<AgentEffect>,
        o: &mut Outcome,
        line: &mut String,
        verbose: bool,
    ) {
        // The decision is judged against the tables as they are before anything of this
        // batch is sent.
        for e in &effects {
            let what = match e {
                AgentEffect::ToServer {
                    node,
                    request: ServerRequest::Surrender { lock, .. },
                } => format!("surrender {lock}@{node}"),
                AgentEffect::Abort { lock, node } => format!("abort on {lock}@{node}"),
                _ => continue,
            };
            o.decisions
                .push((Decision { agent: i, what }, self.clone()));
            self.clients[i].decisions += 1;
        }
        for e in effects {
            match e {
                AgentEffect::ToServer { node, request } => {
                    if verbose {
                        let _ = write!(line, "\n      -> {node}: {}", show_request(m, &request));
                    }
                    let n = m.node_index(&node);
                    self.send(
                        Endpoint::Agent(i),
                        Endpoint::Server(n),
                        Msg::ToServer(request),
                    );
                }
                AgentEffect::ToAgent { to, msg } => {
                    if verbose {
                        let _ = write!(line, "\n      -> {}: {}", m.name(&to), show_msg(m, &msg));
                    }
                    let t = m.by_id[&to];
                    self.send(Endpoint::Agent(i), Endpoint::Agent(t), Msg::ToAgent(msg));
                }
                AgentEffect::StatusChanged(s) => {
                    if verbose {
                        let _ = write!(line, " [status {}]", show_status(&s));
                    }
                }
                AgentEffect::Granted(g) => {
                    if verbose {
                        let _ = write!(line, " [granted {} {}]", g.lock, g.mode);
                    }
                }
                AgentEffect::Lost(l) => {
                    if verbose {
                        let _ = write!(line, " [lost {} {}: {}]", l.lock, l.mode, l.cause);
                    }
                }
                AgentEffect::Abort { lock, node } => {
                    if verbose {
                        let _ = write!(line, "\n      ABORT on {lock}@{node}: stop, release");
                    }
                    // The actor stops: the rest of the batch is dropped, every server used is
                    // told to drop the agent's entries.
                    let release = self.clients[i].core.end();
                    self.clients[i].stop = Some(Stop::Aborted(format!("{lock}@{node}")));
                    self.clients[i].blocked = false;
                    self.clients[i].unsettled = false;
                    for e in release {
                        if let AgentEffect::ToServer { node, request } = e {
                            let n = m.node_index(&node);
                            self.send(
                                Endpoint::Agent(i),
                                Endpoint::Server(n),
                                Msg::ToServer(request),
                            );
                        }
                    }
                    return;
                }
                AgentEffect::Rejected { node, lock, reason } => {
                    // The actor only logs a refusal.
                    if verbose {
                        let _ = write!(line, " [rejected by {node}: {lock} {reason}]");
                    }
                }
                // Watches, surrenders to a waiter and replies to waiting callers answer client
                // calls the model never makes.
                AgentEffect::Watched { .. }
                | AgentEffect::SurrenderAnswered { .. }
                | AgentEffect::Reply { .. } => {}
            }
        }
    }
}
