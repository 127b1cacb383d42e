//! A deterministic in-memory cluster of member cores and lock tables.
//!
//! Each node has a real `locks_server::LockTable`; each member is a pure
//! [`MemberCore`] with the test dictionary as its callbacks. Every message travels on the FIFO
//! channel of its (sender, receiver) pair, as over an actix mailbox or a TCP connection; which
//! channel delivers next, and when a member settles after a burst, is chosen by a seeded
//! generator, so a run is a function of its seed. Members' messages are encoded and decoded with
//! `locks_core::codec`, as on the wire.
//!
//! Connections are between nodes: cutting one drops what is in flight between the two nodes,
//! each lock table releases the other node's agents (as the cluster layer does), and members
//! are told the node went down; joining tells them it came up. The sync lock is modelled as a
//! result that arrives later on the member's own channel (sometimes a failure).
#![allow(dead_code)]

use super::common::dict::{Dict, Rep, Req};
use locks_agent::internal::Effect as AgentEffect;
use locks_core::codec;
use locks_core::proto::{AgentMessage, LockView, QueueEntry, ServerRequest};
use locks_core::{AgentId, LockId, MemberId, ModeTable, NodeId};
use locks_leader::internal::{Effect, MemberCore, Peer, State};
use locks_leader::{CallError, CallId, GroupOptions, Role, Term, election_lock};
use locks_server::LockTable;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

mod leases;
mod oracle;
// The agent simulation's generator and seed ranges, so both simulations explore alike.
#[path = "../../../locks-agent/tests/sim/seeded.rs"]
mod seeded;
pub use seeded::{Rng, seeds_from_env};

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
    pub rng: Rng,
    pub now: Duration,
    modes: ModeTable,
    lock: LockId,
    tables: BTreeMap<NodeId, LockTable>,
    pub members: BTreeMap<MemberId, SimMember>,
    links: BTreeSet<(NodeId, NodeId)>,
    channels: BTreeMap<(End, End), VecDeque<Msg>>,
    unsettled: BTreeSet<MemberId>,
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
    /// The last deliveries, for failure reports (kept only with `SIM_TRACE` set).
    trace: VecDeque<String>,
    tracing: bool,
    /// The options members are started with (majority mode unless a test says otherwise).
    pub options: GroupOptions,
    /// Every term a member led with while its leases proved it (majority mode), in order.
    pub proven_terms: Vec<Term>,
    /// Check after every step that at most one member's leases prove it leads (majority mode).
    pub check_single_leader: bool,
}

fn pair(a: &NodeId, b: &NodeId) -> (NodeId, NodeId) {
    if a <= b {
        (a.clone(), b.clone())
    } else {
        (b.clone(), a.clone())
    }
}

pub fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

impl Sim {
    pub fn new(seed: u64, group: &str) -> Sim {
        Sim {
            rng: Rng::new(seed),
            now: Duration::ZERO,
            modes: ModeTable::standard(),
            lock: election_lock(&group.into()),
            tables: BTreeMap::new(),
            members: BTreeMap::new(),
            links: BTreeSet::new(),
            channels: BTreeMap::new(),
            unsettled: BTreeSet::new(),
            next_serial: 1,
            next_call: 1,
            replies: BTreeMap::new(),
            steps: 0,
            acked: Vec::new(),
            stores: BTreeMap::new(),
            sync_failures: true,
            trace: VecDeque::new(),
            tracing: std::env::var_os("SIM_TRACE").is_some(),
            options: GroupOptions::default(),
            proven_terms: Vec::new(),
            check_single_leader: false,
        }
    }

    /// A node with its own lock table, connected to nobody.
    pub fn add_node(&mut self, name: &str) -> NodeId {
        let n = node(name);
        let base = (self.tables.len() as u64 + 1) << 40;
        self.tables.insert(
            n.clone(),
            LockTable::new(n.clone(), self.modes.clone(), base),
        );
        n
    }

    pub fn nodes(&self) -> Vec<NodeId> {
        self.tables.keys().cloned().collect()
    }

    pub fn connected(&self, a: &NodeId, b: &NodeId) -> bool {
        a == b || self.links.contains(&pair(a, b))
    }

    /// The nodes `n` is connected to, itself included.
    pub fn peers(&self, n: &NodeId) -> Vec<NodeId> {
        self.tables
            .keys()
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
        self.unsettled.insert(id.clone());
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
        self.channels.retain(|(from, to), _| {
            !((from.node() == a && to.node() == b) || (from.node() == b && to.node() == a))
        });
        for (x, y) in [(a, b), (b, a)] {
            let gone = self.tables[x].agents_on(y);
            for agent in gone {
                self.serve(x, ServerRequest::RemoveAgent { agent });
            }
            for m in self.members_on(x) {
                self.push(
                    End::Cluster(x.clone()),
                    End::Member(m),
                    Msg::NodeDown(y.clone()),
                );
            }
        }
    }

    /// Splits the cluster into the given islands (every node in exactly one), cutting every link
    /// between islands and making each island a full mesh.
    pub fn islands(&mut self, islands: &[Vec<NodeId>]) {
        let island_of = |n: &NodeId| islands.iter().position(|i| i.contains(n));
        let nodes = self.nodes();
        for a in &nodes {
            for b in &nodes {
                if a < b {
                    if island_of(a) == island_of(b) && island_of(a).is_some() {
                        self.connect(a, b);
                    } else {
                        self.disconnect(a, b);
                    }
                }
            }
        }
    }

    /// Like [`Sim::islands`], but one link at a time, in random order, with up to `between`
    /// random steps after each change: the cluster passes through the partial meshes a real
    /// rewiring does (a node already cut off from one peer and not yet from another).
    pub fn islands_gradually(&mut self, islands: &[Vec<NodeId>], between: usize) {
        let island_of = |n: &NodeId| islands.iter().position(|i| i.contains(n));
        let nodes = self.nodes();
        let mut changes = Vec::new();
        for a in &nodes {
            for b in &nodes {
                if a < b {
                    let same = island_of(a) == island_of(b) && island_of(a).is_some();
                    if same != self.connected(a, b) {
                        changes.push((a.clone(), b.clone(), same));
                    }
                }
            }
        }
        for i in (1..changes.len()).rev() {
            let j = self.rng.below(i + 1);
            changes.swap(i, j);
        }
        for (a, b, up) in changes {
            if up {
                self.connect(&a, &b);
            } else {
                self.disconnect(&a, &b);
            }
            let k = self.rng.below(between + 1);
            for _ in 0..k {
                if !self.step() {
                    break;
                }
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
        self.channels.entry((from, to)).or_default().push_back(msg);
    }

    /// Applies a request to a node's table and sends the notices; an agent whose member does
    /// not run is removed, as the real server does when a notice cannot be delivered.
    fn serve(&mut self, n: &NodeId, request: ServerRequest) {
        let mut pending = vec![request];
        while let Some(req) = pending.pop() {
            let notices = self.tables.get_mut(n).expect("table").handle(req);
            for (agent, msg) in notices {
                let member = MemberId::of_agent(&agent);
                if !self.connected(n, agent.node()) {
                    continue;
                }
                if self.members.contains_key(&member) {
                    self.push(End::Server(n.clone()), End::Member(member), Msg::Agent(msg));
                } else {
                    pending.push(ServerRequest::RemoveAgent { agent });
                }
            }
        }
    }

    fn execute(&mut self, m: &MemberId, effects: Vec<Effect<Dict>>) {
        let mut queue: VecDeque<Effect<Dict>> = effects.into();
        let here = m.node().clone();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::ToServer { node, request }
                | Effect::Agent(AgentEffect::ToServer { node, request }) => {
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
                Effect::Agent(AgentEffect::ToAgent { to, msg }) => {
                    if self.tracing
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
                Effect::ToMember { to, msg } => {
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
                Effect::Reply { call, result } => {
                    if let (Some((k, v)), Ok(Rep::Ok)) = (self.stores.get(&call), &result) {
                        self.acked.push((k.clone(), *v));
                    }
                    self.replies.insert((m.clone(), call), result);
                }
                Effect::StartSync { attempt, .. } => {
                    let ok = !(self.sync_failures && self.rng.chance(8));
                    self.push(
                        End::Member(m.clone()),
                        End::Member(m.clone()),
                        Msg::Sync(attempt, ok),
                    );
                }
                Effect::EndSync { .. } => {}
                Effect::LeaderChanged(t) => {
                    self.note(format!("[{}] {m} leader -> {t:?}", self.steps));
                    if let Some(sm) = self.members.get_mut(m) {
                        sm.leaders.push(t);
                    }
                }
                Effect::Stopped { .. } => {}
                // The member core passes on only its agent's requests and messages.
                Effect::Agent(_) => {}
            }
        }
    }

    fn note(&mut self, line: String) {
        if self.tracing {
            if self.trace.len() >= 3000 {
                self.trace.pop_front();
            }
            self.trace.push_back(line);
        }
    }

    fn deliver(&mut self, from: End, to: End, msg: Msg) {
        if self.tracing {
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
                    self.serve(&n, req);
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
                self.unsettled.insert(m);
            }
            End::Cluster(_) => {}
        }
    }

    fn settle_one(&mut self, m: &MemberId) {
        self.unsettled.remove(m);
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
            self.unsettled.insert(m);
        }
    }

    /// One step: deliver the head of a random channel, or settle a member that has unsettled
    /// input. Returns false when nothing is in flight and every member is settled.
    pub fn step(&mut self) -> bool {
        self.steps += 1;
        self.now += Duration::from_micros(100);
        self.tick_due();
        let busy: Vec<(End, End)> = self
            .channels
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        let unsettled: Vec<MemberId> = self.unsettled.iter().cloned().collect();
        if busy.is_empty() && unsettled.is_empty() {
            return false;
        }
        let pick = self.rng.below(busy.len() + unsettled.len());
        if pick < busy.len() {
            let key = busy[pick].clone();
            let msg = self
                .channels
                .get_mut(&key)
                .and_then(|q| q.pop_front())
                .expect("busy channel");
            self.deliver(key.0, key.1, msg);
        } else {
            let m = unsettled[pick - busy.len()].clone();
            self.settle_one(&m);
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
