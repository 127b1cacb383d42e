//! Majority mode over configured nodes where no member of the group runs: the election lock
//! decides. A lone candidate leads once it holds the lock on a majority of the group's nodes,
//! a member started later on one of those nodes follows it, and a later leader's term is above
//! its term although no member remembers it. Several members and real `LockTable`s, one per
//! node, with every message delivered at once (the sync lock is granted at once).

use super::tests::{Rec, T0, member_with, n};
use super::*;
use crate::GroupOptions;
use locks_core::ModeTable;
use locks_core::proto::{AgentMessage, ServerRequest};
use locks_server::state_machine::LockTable;

/// Members and the lock tables of their nodes, on a network that delivers at once.
struct Net {
    tables: BTreeMap<NodeId, LockTable>,
    members: BTreeMap<MemberId, MemberCore<Rec>>,
    /// Every leader change a member published, in order.
    published: Vec<(MemberId, Option<Term>)>,
}

impl Net {
    /// Tables for `nodes`, each with its own version base (its clock).
    fn new(nodes: &[(&str, u64)]) -> Net {
        let tables = nodes
            .iter()
            .map(|(name, base)| {
                let table = LockTable::new(n(name), ModeTable::standard(), *base);
                (n(name), table)
            })
            .collect();
        Net {
            tables,
            members: BTreeMap::new(),
            published: Vec::new(),
        }
    }

    /// Starts a candidate of the group `a`, `b`, `c` on `node`, which sees the other nodes
    /// with a table up, and runs until quiet.
    fn start(&mut self, node: &str, serial: u64) -> MemberId {
        self.start_as(node, serial, Role::Candidate)
    }

    /// [`Net::start`] for a member of role `role`.
    fn start_as(&mut self, node: &str, serial: u64, role: Role) -> MemberId {
        let options = GroupOptions::majority().nodes([n("a"), n("b"), n("c")]);
        let mut m = member_with(node, serial, role, &options);
        let up: Vec<NodeId> = self.tables.keys().cloned().collect();
        let effects = m.start(&up, T0).unwrap();
        let id = m.me().clone();
        self.members.insert(id.clone(), m);
        self.run(effects.into_iter().map(|e| (id.clone(), e)).collect());
        id
    }

    /// Node `node` goes down for good: its table, its members, and, everywhere else, its
    /// agents' locks and the members' view of it.
    fn crash(&mut self, node: &str) {
        let down = n(node);
        self.tables.remove(&down);
        self.members.retain(|m, _| m.node() != &down);
        let mut sends = Vec::new();
        for table in self.tables.values_mut() {
            for agent in table.agents_on(&down) {
                sends.extend(table.handle(ServerRequest::RemoveAgent { agent }));
            }
        }
        let mut queue: VecDeque<_> = self.deliveries(sends).into();
        for (id, m) in &mut self.members {
            queue.extend(m.node_down(&down, T0).into_iter().map(|e| (id.clone(), e)));
        }
        self.run(queue);
    }

    /// What the members addressed by a table's messages make of them.
    fn deliveries(
        &mut self,
        sends: Vec<(AgentId, AgentMessage)>,
    ) -> Vec<(MemberId, MemberEffect<Rec>)> {
        let mut out = Vec::new();
        for (agent, msg) in sends {
            let to = MemberId::of_agent(&agent);
            if let Some(m) = self.members.get_mut(&to) {
                out.extend(m.deliver(msg, T0).into_iter().map(|e| (to.clone(), e)));
            }
        }
        out
    }

    /// Carries out `effects` and everything they lead to, settling every member whenever
    /// nothing is in flight, until nothing changes.
    fn run(&mut self, effects: VecDeque<(MemberId, MemberEffect<Rec>)>) {
        let mut queue = effects;
        loop {
            while let Some((from, effect)) = queue.pop_front() {
                let more = self.carry_out(&from, effect);
                queue.extend(more);
            }
            for (id, m) in &mut self.members {
                queue.extend(m.settle(T0).into_iter().map(|e| (id.clone(), e)));
            }
            if queue.is_empty() {
                return;
            }
        }
    }

    fn carry_out(
        &mut self,
        from: &MemberId,
        effect: MemberEffect<Rec>,
    ) -> Vec<(MemberId, MemberEffect<Rec>)> {
        let at = |id: &MemberId, effects: Vec<MemberEffect<Rec>>| {
            effects
                .into_iter()
                .map(|e| (id.clone(), e))
                .collect::<Vec<_>>()
        };
        match effect {
            MemberEffect::ToServer { node, request }
            | MemberEffect::Agent(AgentEffect::ToServer { node, request }) => {
                match self.tables.get_mut(&node) {
                    Some(table) => {
                        let sends = table.handle(request);
                        self.deliveries(sends)
                    }
                    None => match self.members.get_mut(from) {
                        Some(m) => at(from, m.server_unreachable(&node, T0)),
                        None => Vec::new(),
                    },
                }
            }
            MemberEffect::Agent(AgentEffect::ToAgent { to, msg }) => {
                self.deliveries(vec![(to, msg)])
            }
            MemberEffect::ToMember { to, msg } => match self.members.get_mut(&to) {
                Some(m) => at(&to, m.peer(from, msg, T0)),
                None => match self.members.get_mut(from) {
                    Some(m) => at(from, m.member_unreachable(&to, T0)),
                    None => Vec::new(),
                },
            },
            MemberEffect::StartSync { attempt, .. } => match self.members.get_mut(from) {
                Some(m) => at(from, m.sync_result(attempt, true, T0)),
                None => Vec::new(),
            },
            MemberEffect::LeaderChanged(t) => {
                self.published.push((from.clone(), t));
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn member(&self, id: &MemberId) -> &MemberCore<Rec> {
        &self.members[id]
    }
}

/// A candidate on `a`, alone in the group `a`, `b`, `c` with `b` up and `c` down, whose node's
/// versions are far ahead of `b`'s (a node started later, or a clock ahead): it leads, and its
/// term is above every version `b` has handed out.
fn lone_leader_on_a() -> (Net, MemberId, Term) {
    let mut net = Net::new(&[("a", 1 << 40), ("b", 1000)]);
    let a = net.start("a", 1);
    let leader = net.member(&a);
    assert!(
        leader.is_leader(),
        "holds the lock on 2 of 3 nodes and leads: {:?}",
        leader.state()
    );
    let term = leader.leader().cloned().expect("a term");
    assert_eq!(&term.leader, &a);
    assert!(
        net.published.contains(&(a.clone(), Some(term.clone()))),
        "{:?}",
        net.published
    );
    let proof = leader.leader_proof().expect("a proof");
    assert_eq!(
        (proof.nodes.clone(), proof.needed),
        (vec![n("a"), n("b")], 2)
    );
    (net, a, term)
}

#[test]
fn a_lone_candidate_leads_once_it_holds_the_lock_on_a_majority_of_nodes_with_no_member() {
    let (net, _, term) = lone_leader_on_a();
    // What `b` hands out from now on is above the term: `b` stands in for the member it lacks.
    assert!(net.tables[&n("b")].version() >= term.epoch);
}

#[test]
fn a_member_started_later_on_such_a_node_follows_the_leader_and_accepts_its_term() {
    let (mut net, a, term) = lone_leader_on_a();
    let b = net.start("b", 2);
    let newcomer = net.member(&b);
    assert_eq!(newcomer.leader(), Some(&term), "{:?}", newcomer.state());
    assert_eq!(newcomer.accepted(), Some(&term));
    // The leader stays, in the same term.
    assert!(net.member(&a).is_leader());
    assert_eq!(net.member(&a).leader(), Some(&term));
}

#[test]
fn the_next_leader_takes_a_larger_term_though_no_member_remembers_the_last_one() {
    let (mut net, _, term) = lone_leader_on_a();
    // `a` is gone with its leader, its term and its versions; `c` comes up, and a candidate
    // on `b` leads over `b` and `c`, whose versions are far below the old term. Nobody it
    // polls accepted that term: the versions of `b` say it.
    net.crash("a");
    net.tables
        .insert(n("c"), LockTable::new(n("c"), ModeTable::standard(), 2000));
    let b = net.start("b", 2);
    let next = net.member(&b);
    assert!(next.is_leader(), "{:?}", next.state());
    let next = next.leader().cloned().expect("a term");
    assert!(next > term, "{next} above {term}");
}

#[test]
fn a_leader_that_takes_a_larger_term_is_established_again_only_once_raised_to_it() {
    let (mut net, a, term) = lone_leader_on_a();
    // A member (of `c`, which is down: it vanishes at once) carries a larger accepted term.
    let larger = Term {
        epoch: term.epoch + (1 << 30),
        leader: MemberId::new(n("c"), 1, 9),
    };
    let hello = super::tests::env(
        Role::Candidate,
        Some(larger.clone()),
        PeerMsg::Hello { leader: None },
    );
    let effects = net
        .members
        .get_mut(&a)
        .unwrap()
        .peer(&larger.leader, hello, T0);
    let leader = net.member(&a);
    let bumped = leader.leader().cloned().expect("still leads");
    assert!(bumped > larger, "{bumped} above {larger}");
    assert!(
        !leader.is_leader(),
        "the raise to the old term does not establish the new one"
    );
    assert!(
        super::tests::requests(&effects).contains(&(
            n("b"),
            ServerRequest::RaiseVersions {
                agent: leader.agent_id().clone(),
                lock: super::tests::lock(),
                floor: bumped.epoch
            }
        )),
        "{effects:?}"
    );
    net.run(effects.into_iter().map(|e| (a.clone(), e)).collect());
    assert!(net.member(&a).is_leader());
    assert_eq!(net.member(&a).leader(), Some(&bumped));
    assert!(net.tables[&n("b")].version() >= bumped.epoch);
}

#[test]
fn a_worker_on_a_node_the_leader_deferred_finds_it() {
    // A lone candidate on `b` leads over `b` and `c`; `a` comes up, and the leader watches it
    // but does not ask for the lock there (module `tenure`): `a`, the first node now, is held by
    // nobody. A worker started on `a` finds the leader where it holds the lock.
    let mut net = Net::new(&[("b", 1000), ("c", 2000)]);
    let b = net.start("b", 1);
    assert!(net.member(&b).is_leader(), "{:?}", net.member(&b).state());
    net.tables
        .insert(n("a"), LockTable::new(n("a"), ModeTable::standard(), 3000));
    let up = net.members.get_mut(&b).unwrap().node_up(&n("a"), T0);
    net.run(up.into_iter().map(|e| (b.clone(), e)).collect());
    assert!(net.member(&b).is_leader());
    assert!(
        net.tables[&n("a")]
            .holds(net.member(&b).agent_id(), &super::tests::lock())
            .is_none()
    );
    let w = net.start_as("a", 2, Role::Worker);
    assert_eq!(net.member(&w).leader(), net.member(&b).leader());
}
