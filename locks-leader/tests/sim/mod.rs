//! A deterministic in-memory cluster of member cores and lock tables, on the shared harness
//! (`locks_testing::sim`: the seeded network, the real lock tables, the choice of each step).
//!
//! Each node has a real `locks_server::state_machine::LockTable`; each member is a pure
//! [`MemberCore`] with the test dictionary as its callbacks. Every message travels on the FIFO
//! channel of its (sender, receiver) pair, as over an actix mailbox or a TCP connection; which
//! channel delivers next, and when a member settles after a burst, is chosen by the seeded
//! generator, so a run is a function of its seed. Members' messages are encoded and decoded with
//! `locks_core::codec`, as on the wire.
//!
//! Connections are between nodes: cutting one drops what is in flight between the two nodes,
//! each lock table releases the other node's agents (as the cluster layer does), and members
//! are told the node went down; joining tells them it came up. The sync lock is modelled as a
//! result that arrives later on the member's own channel (sometimes a failure).
#![allow(dead_code)]

use super::common::dict::{Dict, Rep, Req};
use locks_agent::state_machine::AgentEffect;
use locks_core::codec;
use locks_core::proto::{AgentMessage, LockView, QueueEntry, ServerRequest};
use locks_core::{AgentId, LockId, MemberId, ModeTable, NodeId};
use locks_leader::state_machine::{MemberCore, MemberEffect, Peer, State};
use locks_leader::{CallError, CallId, GroupOptions, Role, Term, election_lock};
use locks_testing::sim::{Net, Peers, Rounds, Route, Step, World};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

mod faults;
mod leases;
mod oracle;
#[allow(unused_imports)]
pub use locks_testing::{Rng, seeds_from_env};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    Server(NodeId),
    Member(MemberId),
    /// The node's cluster layer, telling its members of node events.
    Cluster(NodeId),
}

impl End {
    fn node(&self) -> &NodeId {
        match self {
            End::Server(n) | End::Cluster(n) => n,
            End::Member(m) => m.node(),
        }
    }
}

#[derive(Clone, Debug)]
enum Msg {
    Server(ServerRequest),
    Agent(AgentMessage),
    Peer(MemberId, Vec<u8>),
    NodeUp(NodeId),
    NodeDown(NodeId),
    Sync(u64, bool),
}

pub struct SimMember {
    pub core: MemberCore<Dict>,
    /// Every leader change it reported, in order.
    pub leaders: Vec<Option<Term>>,
}

pub struct Sim {
    world: World<End, Msg, MemberId>,
    pub now: Duration,
    modes: ModeTable,
    lock: LockId,
    pub members: BTreeMap<MemberId, SimMember>,
    links: BTreeSet<(NodeId, NodeId)>,
    next_serial: u64,
    next_call: u64,
    /// Answers to client calls, by member and call.
    pub replies: BTreeMap<(MemberId, CallId), Result<Rep, CallError>>,
    pub steps: u64,
    /// Stores acknowledged with `Ok`: (key, value).
    pub acked: Vec<(String, i64)>,
    /// Calls to track: call → (member, key, value) of a store.
    stores: BTreeMap<CallId, (String, i64)>,
    pub sync_failures: bool,
    /// The options members are started with (majority mode unless a test says otherwise).
    pub options: GroupOptions,
    /// Every term a member led with while its leases proved it (majority mode), in order.
    pub proven_terms: Vec<Term>,
    /// Check after every step that at most one member's leases prove it leads (majority mode).
    pub check_single_leader: bool,
    /// Give each new node a version base at random (as nodes started at different times, or
    /// with clocks apart, have), instead of bases that grow with the order nodes are added.
    pub random_clocks: bool,
    /// The largest version base a node's table started from.
    top_base: u64,
    /// The messages and rounds of the run (see [`Sim::counts`]).
    rounds: Rounds<End>,
    /// Messages delivered, by kind: counted only when set to `Some` (`sim_scale` does, with
    /// `SIM_KINDS` in the environment).
    pub kinds: Option<BTreeMap<String, u64>>,
}

fn pair(a: &NodeId, b: &NodeId) -> (NodeId, NodeId) {
    if a <= b {
        (a.clone(), b.clone())
    } else {
        (b.clone(), a.clone())
    }
}

/// The nodes `node` has a link to (and itself), as its core is told.
struct LinksOf<'a> {
    node: &'a NodeId,
    links: &'a BTreeSet<(NodeId, NodeId)>,
}

impl Peers for LinksOf<'_> {
    fn connected(&self, other: &NodeId) -> bool {
        self.node == other || self.links.contains(&pair(self.node, other))
    }
}

pub fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

impl Sim {
    pub fn new(seed: u64, group: &str) -> Sim {
        // The last deliveries, for failure reports, are kept only with `SIM_TRACE` set.
        let trace = if std::env::var_os("SIM_TRACE").is_some() {
            3000
        } else {
            0
        };
        Sim {
            world: World::new(seed, trace),
            now: Duration::ZERO,
            modes: ModeTable::standard(),
            lock: election_lock(&group.into()),
            members: BTreeMap::new(),
            links: BTreeSet::new(),
            next_serial: 1,
            next_call: 1,
            replies: BTreeMap::new(),
            steps: 0,
            acked: Vec::new(),
            stores: BTreeMap::new(),
            sync_failures: true,
            options: GroupOptions::default(),
            proven_terms: Vec::new(),
            check_single_leader: false,
            random_clocks: false,
            top_base: 0,
            rounds: Rounds::default(),
            kinds: None,
        }
    }

    /// A node with its own lock table, connected to nobody.
    pub fn add_node(&mut self, name: &str) -> NodeId {
        let n = node(name);
        let base = if self.random_clocks {
            (1 + self.world.rng.below(16) as u64) << 40
        } else {
            (self.world.tables.nodes().count() as u64 + 1) << 40
        };
        self.top_base = self.top_base.max(base);
        self.world.tables.start(n.clone(), &self.modes, base);
        n
    }

    pub fn nodes(&self) -> Vec<NodeId> {
        self.world.tables.nodes().cloned().collect()
    }

    pub fn connected(&self, a: &NodeId, b: &NodeId) -> bool {
        a == b || self.links.contains(&pair(a, b))
    }

    /// The nodes `n` is connected to, itself included.
    pub fn peers(&self, n: &NodeId) -> Vec<NodeId> {
        self.world
            .tables
            .nodes()
            .filter(|m| self.connected(n, m))
            .cloned()
            .collect()
    }

    /// A candidate (or worker) dictionary on node `n`.
    pub fn add_member(&mut self, n: &NodeId, role: Role) -> MemberId {
        let agent = AgentId::new(n.clone(), 1, self.next_serial);
        self.next_serial += 1;
        let mut core = MemberCore::with_options(
            agent,
            role,
            self.lock.clone(),
            self.modes.clone(),
            Dict::default(),
            &self.options,
        );
        let id = core.me().clone();
        let effects = core.start(&self.peers(n), self.now).expect("init");
        self.members.insert(
            id.clone(),
            SimMember {
                core,
                leaders: Vec::new(),
            },
        );
        self.execute(&id, effects);
        self.world.unsettled.insert(id.clone());
        id
    }

    pub fn connect(&mut self, a: &NodeId, b: &NodeId) {
        if a == b || !self.links.insert(pair(a, b)) {
            return;
        }
        for (x, y) in [(a, b), (b, a)] {
            for m in self.members_on(x) {
                self.push(
                    End::Cluster(x.clone()),
                    End::Member(m),
                    Msg::NodeUp(y.clone()),
                );
            }
        }
    }

    pub fn disconnect(&mut self, a: &NodeId, b: &NodeId) {
        if !self.links.remove(&pair(a, b)) {
            return;
        }
        // What was in flight between the two nodes is lost with the connection.
        let cut = |from: &End, to: &End| {
            (from.node() == a && to.node() == b) || (from.node() == b && to.node() == a)
        };
        self.world.net.drop_channels(cut);
        self.rounds.dropped(cut);
        for (x, y) in [(a, b), (b, a)] {
            let members = &self.members;
            let links = &self.links;
            let net = &mut self.world.net;
            let rounds = &mut self.rounds;
            self.world
                .tables
                .release_node(x, y, |agent, msg| {
                    route(links, members, net, rounds, x, agent, msg)
                })
                .expect("a table per node");
            for m in self.members_on(x) {
                self.push(
                    End::Cluster(x.clone()),
                    End::Member(m),
                    Msg::NodeDown(y.clone()),
                );
            }
        }
    }

    /// Up to `k` random steps (fewer if everything goes quiet first).
    pub fn run_steps(&mut self, k: usize) {
        for _ in 0..k {
            if !self.step() {
                break;
            }
        }
    }

    /// Every node connected to every other.
    pub fn full_mesh(&mut self) {
        let all = self.nodes();
        self.islands(&[all]);
    }

    pub fn members_on(&self, n: &NodeId) -> Vec<MemberId> {
        self.members
            .keys()
            .filter(|m| m.node() == n)
            .cloned()
            .collect()
    }

    /// A leader call `Store(key, value)` from `m`'s client.
    pub fn store(&mut self, m: &MemberId, key: &str, value: i64) -> CallId {
        let call = CallId(self.next_call);
        self.next_call += 1;
        self.stores.insert(call, (key.to_owned(), value));
        let deadline = self.now + Duration::from_secs(5);
        self.check_leases(m);
        let effects = self.members.get_mut(m).expect("member").core.leader_call(
            call,
            Req::Store(key.into(), value),
            deadline,
            self.now,
        );
        self.execute(m, effects);
        call
    }

    fn push(&mut self, from: End, to: End, msg: Msg) {
        self.rounds.sent(&from, &to);
        self.world.send(from, to, msg);
    }

    /// The messages sent and the rounds (the longest chain of messages each sent in answer to
    /// the one before) since the last [`Sim::reset_counts`] or the start.
    pub fn counts(&self) -> (u64, u64) {
        (self.rounds.messages, self.rounds.rounds)
    }

    /// Starts counting messages and rounds afresh.
    pub fn reset_counts(&mut self) {
        self.rounds.reset();
    }

    /// Applies a request to a node's table and sends the notices (see [`route`]).
    fn admit(&mut self, n: &NodeId, request: ServerRequest) {
        let (members, links, net) = (&self.members, &self.links, &mut self.world.net);
        let rounds = &mut self.rounds;
        let peers = LinksOf { node: n, links };
        self.world
            .tables
            .admit(n, [request], &peers, |agent, msg| {
                route(links, members, net, rounds, n, agent, msg)
            })
            .expect("a table per node");
    }

    fn execute(&mut self, m: &MemberId, effects: Vec<MemberEffect<Dict>>) {
        // What the member sends now answers everything it has received.
        self.rounds.acting(&End::Member(m.clone()));
        let mut queue: VecDeque<MemberEffect<Dict>> = effects.into();
        let here = m.node().clone();
        while let Some(effect) = queue.pop_front() {
            match effect {
                MemberEffect::ToServer { node, request }
                | MemberEffect::Agent(AgentEffect::ToServer { node, request }) => {
                    if self.connected(&here, &node) {
                        self.push(
                            End::Member(m.clone()),
                            End::Server(node),
                            Msg::Server(request),
                        );
                    } else if let Some(sm) = self.members.get_mut(m) {
                        queue.extend(sm.core.server_unreachable(&node, self.now));
                    }
                }
                MemberEffect::Agent(AgentEffect::ToAgent { to, msg }) => {
                    if self.world.trace.on()
                        && let AgentMessage::Forward { node, view, .. } = &msg
                    {
                        let line = format!(
                            "[{}] {m} sends Forward of {node} v{} to {to} (connected: {})",
                            self.steps,
                            view.version,
                            self.connected(&here, to.node())
                        );
                        self.note(line);
                    }
                    if self.connected(&here, to.node()) {
                        let to = MemberId::of_agent(&to);
                        self.push(End::Member(m.clone()), End::Member(to), Msg::Agent(msg));
                    }
                }
                MemberEffect::ToMember { to, msg } => {
                    let payload = codec::encode::<Peer<Dict>>(&msg, codec::DEFAULT_MAX_FRAME)
                        .expect("encodable");
                    if !self.connected(&here, to.node()) {
                        continue;
                    }
                    if to.node() == &here && !self.members.contains_key(&to) {
                        if let Some(sm) = self.members.get_mut(m) {
                            queue.extend(sm.core.member_unreachable(&to, self.now));
                        }
                        continue;
                    }
                    self.push(
                        End::Member(m.clone()),
                        End::Member(to),
                        Msg::Peer(m.clone(), payload),
                    );
                }
                MemberEffect::Reply { call, result } => {
                    if let (Some((k, v)), Ok(Rep::Ok)) = (self.stores.get(&call), &result) {
                        self.acked.push((k.clone(), *v));
                    }
                    self.replies.insert((m.clone(), call), result);
                }
                MemberEffect::StartSync { attempt, .. } => {
                    let ok = !(self.sync_failures && self.world.rng.chance(8));
                    self.push(
                        End::Member(m.clone()),
                        End::Member(m.clone()),
                        Msg::Sync(attempt, ok),
                    );
                }
                MemberEffect::EndSync { .. } => {}
                MemberEffect::LeaderChanged(t) => {
                    self.note(format!("[{}] {m} leader -> {t:?}", self.steps));
                    if let Some(sm) = self.members.get_mut(m) {
                        sm.leaders.push(t);
                    }
                }
                MemberEffect::Stopped { .. } => {}
                // The member core passes on only its agent's requests and messages.
                MemberEffect::Agent(_) => {}
            }
        }
    }

    fn note(&mut self, line: String) {
        self.world.trace.push(line);
    }

    fn deliver(&mut self, from: End, to: End, msg: Msg) {
        if let Some(kinds) = &mut self.kinds {
            let (tag, body) = match &msg {
                Msg::Peer(_, payload) => {
                    let env: Peer<Dict> =
                        codec::decode(payload, codec::DEFAULT_MAX_FRAME).expect("decodable");
                    ("peer", format!("{:?}", env.msg))
                }
                Msg::Agent(m) => ("agent", format!("{m:?}")),
                Msg::Server(r) => ("server", format!("{r:?}")),
                other => ("", format!("{other:?}")),
            };
            let name = body.split([' ', '(', '{']).next().unwrap_or_default();
            *kinds
                .entry(format!("{tag} {name}").trim().to_string())
                .or_default() += 1;
        }
        if self.world.trace.on() {
            let what = match &msg {
                Msg::Peer(_, payload) => {
                    let env: Peer<Dict> =
                        codec::decode(payload, codec::DEFAULT_MAX_FRAME).expect("decodable");
                    format!("{:?}", env)
                }
                Msg::Agent(AgentMessage::Watched { node, view, .. }) => {
                    format!("Watched {node} {}", queue(view))
                }
                Msg::Agent(AgentMessage::Forward {
                    from, node, view, ..
                }) => format!("Forward from {from} of {node} {}", queue(view)),
                Msg::Agent(AgentMessage::Notice(n)) => format!(
                    "Notice {} v{} {:?} queue {}",
                    n.node,
                    n.version,
                    n.state,
                    n.queue.as_ref().map_or("-".to_string(), |q| queue(q))
                ),
                Msg::Agent(other) => format!("{other:?}"),
                other => format!("{other:?}"),
            };
            let line = format!("[{}] {:?} -> {:?}: {what}", self.steps, from, to);
            self.note(line);
        }
        match to {
            End::Server(n) => {
                if let Msg::Server(req) = msg {
                    self.admit(&n, req);
                }
            }
            End::Member(m) => {
                self.check_leases(&m);
                let now = self.now;
                let Some(sm) = self.members.get_mut(&m) else {
                    return;
                };
                let effects = match msg {
                    Msg::Agent(msg) => sm.core.deliver(msg, now),
                    Msg::Peer(sender, payload) => {
                        let env: Peer<Dict> =
                            codec::decode(&payload, codec::DEFAULT_MAX_FRAME).expect("decodable");
                        sm.core.peer(&sender, env, now)
                    }
                    Msg::NodeUp(n) => sm.core.node_up(&n, now),
                    Msg::NodeDown(n) => sm.core.node_down(&n, now),
                    Msg::Sync(attempt, ok) => sm.core.sync_result(attempt, ok, now),
                    Msg::Server(_) => Vec::new(),
                };
                let _ = from;
                self.execute(&m, effects);
                self.world.unsettled.insert(m);
            }
            End::Cluster(_) => {}
        }
    }

    fn settle_one(&mut self, m: &MemberId) {
        self.check_leases(m);
        let now = self.now;
        if let Some(sm) = self.members.get_mut(m) {
            let effects = sm.core.settle(now);
            self.execute(m, effects);
        }
    }

    fn tick_due(&mut self) {
        let now = self.now;
        let due: Vec<MemberId> = self
            .members
            .iter()
            .filter(|(_, sm)| sm.core.next_deadline().is_some_and(|d| d <= now))
            .map(|(m, _)| m.clone())
            .collect();
        for m in due {
            let effects = self.members.get_mut(&m).expect("member").core.tick(now);
            self.execute(&m, effects);
            self.world.unsettled.insert(m);
        }
    }

    /// One step: deliver the head of a random channel, or settle a member that has unsettled
    /// input. Returns false when nothing is in flight and every member is settled.
    pub fn step(&mut self) -> bool {
        self.steps += 1;
        self.now += Duration::from_micros(100);
        self.tick_due();
        match self.world.next(0) {
            None => return false,
            Some(Step::Deliver { from, to, msg }) => {
                self.rounds.delivered(&from, &to);
                self.deliver(from, to, msg)
            }
            Some(Step::Settle(m)) => self.settle_one(&m),
            Some(Step::Extra(_)) => unreachable!("no extra choice offered"),
        }
        if self.check_single_leader {
            self.check_leaders_now();
        }
        true
    }

    /// Runs until nothing is in flight and no timer is due within `horizon` of simulated time
    /// (jumping the clock to the next timer when idle), or `max_steps`. Returns whether it went
    /// quiet.
    pub fn run_quiet(&mut self, max_steps: u64) -> bool {
        let start = self.steps;
        while self.steps - start < max_steps {
            if self.step() {
                continue;
            }
            let next = self
                .members
                .values()
                .filter_map(|sm| sm.core.next_deadline())
                .min();
            match next {
                Some(at) if at <= self.now + Duration::from_secs(10) => {
                    self.now = self.now.max(at);
                }
                _ => return true,
            }
        }
        false
    }
}

/// What becomes of a notice node `n`'s table sends: it goes to the agent's member if the two
/// nodes are connected; an agent whose member does not run is removed, as the real server does
/// when a notice cannot be delivered.
fn route(
    links: &BTreeSet<(NodeId, NodeId)>,
    members: &BTreeMap<MemberId, SimMember>,
    net: &mut Net<End, Msg>,
    rounds: &mut Rounds<End>,
    n: &NodeId,
    agent: AgentId,
    msg: AgentMessage,
) -> Route {
    if n != agent.node() && !links.contains(&pair(n, agent.node())) {
        return Route::Sent;
    }
    let member = MemberId::of_agent(&agent);
    if !members.contains_key(&member) {
        return Route::RemoveAgent;
    }
    let (from, to) = (End::Server(n.clone()), End::Member(member));
    rounds.sent(&from, &to);
    net.send(from, to, Msg::Agent(msg));
    Route::Sent
}

/// A view in a trace line: its version, who holds and who waits.
fn queue(view: &LockView) -> String {
    let names =
        |es: &[QueueEntry]| -> Vec<String> { es.iter().map(|e| e.agent.to_string()).collect() };
    format!(
        "v{} held {:?} waiting {:?}",
        view.version,
        names(&view.granted),
        names(&view.waiting)
    )
}
