//! The member core on its own: given inputs, exactly these effects. Lock-server answers come
//! from a real `LockTable`, so the notices are the ones a server sends. These members run in
//! islands mode (envelopes without the group's nodes, leaders established at once); majority
//! mode has its own tests (`tests_majority`).

use super::*;
use crate::callbacks::{CallReturn, Caller, Elected, Handled};
use locks_core::proto::{AgentMessage, ServerRequest};
use locks_core::{Key, Mode, ModeTable};
use locks_server::state_machine::LockTable;

/// Records what it is told; doubles leader calls.
#[derive(Default)]
pub(super) struct Rec {
    pub(super) surrendered: Vec<String>,
    pub(super) from_leader: Vec<String>,
    pub(super) stepped_down: usize,
}

impl Callbacks for Rec {
    type Call = u32;
    type Reply = u32;
    type Cast = u32;
    type Broadcast = String;
    type Info = ();

    fn elected(&mut self, new: Option<&MemberId>, _ctx: &mut Ctx<'_, Self>) -> Elected<String> {
        match new {
            None => Elected::Broadcast("all".into()),
            Some(m) => Elected::Reply(format!("to {m}")),
        }
    }

    fn surrendered(&mut self, msg: String, _ctx: &mut Ctx<'_, Self>) -> Handled<String> {
        self.surrendered.push(msg);
        Handled::Ok
    }

    fn from_leader(&mut self, msg: String, _ctx: &mut Ctx<'_, Self>) -> Handled<String> {
        self.from_leader.push(msg);
        Handled::Ok
    }

    fn stepped_down(&mut self, _ctx: &mut Ctx<'_, Self>) -> Handled<String> {
        self.stepped_down += 1;
        Handled::Ok
    }

    fn handle_leader_call(
        &mut self,
        req: u32,
        _from: Caller,
        _ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<u32, String> {
        CallReturn::ReplyBroadcast(req * 2, format!("did {req}"))
    }

    fn handle_call(
        &mut self,
        req: u32,
        _from: Caller,
        _ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<u32, String> {
        CallReturn::Reply(req)
    }
}

pub(super) fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

pub(super) fn lock() -> LockId {
    crate::handle::election_lock(&Key::from("g"))
}

pub(super) fn member(node: &str, serial: u64, role: Role) -> MemberCore<Rec> {
    member_with(node, serial, role, &crate::GroupOptions::islands())
}

pub(super) fn member_with(
    node: &str,
    serial: u64,
    role: Role,
    options: &crate::GroupOptions,
) -> MemberCore<Rec> {
    let agent = AgentId::new(n(node), 1, serial);
    MemberCore::with_options(
        agent,
        role,
        lock(),
        ModeTable::standard(),
        Rec::default(),
        options,
    )
}

pub(super) fn env(role: Role, known: Option<Term>, msg: PeerMessage<Rec>) -> Peer<Rec> {
    PeerEnvelope {
        role,
        known,
        group: Vec::new(),
        msg,
    }
}

pub(super) fn term(epoch: u64, leader: &MemberId) -> Term {
    Term {
        epoch,
        leader: leader.clone(),
    }
}

pub(super) const T0: Duration = Duration::ZERO;

/// The requests among `effects`, in order, with their nodes.
pub(super) fn requests(effects: &[MemberEffect<Rec>]) -> Vec<(NodeId, ServerRequest)> {
    effects
        .iter()
        .filter_map(|e| match e {
            MemberEffect::ToServer { node, request }
            | MemberEffect::Agent(AgentEffect::ToServer { node, request }) => {
                Some((node.clone(), request.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The member messages among `effects`, in order.
pub(super) fn to_members(effects: &[MemberEffect<Rec>]) -> Vec<(MemberId, Peer<Rec>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            MemberEffect::ToMember { to, msg } => Some((to.clone(), msg.clone())),
            _ => None,
        })
        .collect()
}

/// Feeds the lock requests among `effects` for `node` to its `table`, the resulting messages
/// for `m` back to it, and settles `m`: its effects.
pub(super) fn serve_locks_on(
    m: &mut MemberCore<Rec>,
    node: &NodeId,
    table: &mut LockTable,
    effects: &[MemberEffect<Rec>],
) -> Vec<MemberEffect<Rec>> {
    let mut out = Vec::new();
    for (to_node, request) in requests(effects) {
        if &to_node == node && matches!(request, ServerRequest::Lock { .. }) {
            for (to, msg) in table.handle(request) {
                if &to == m.agent_id() {
                    out.extend(m.deliver(msg, T0));
                }
            }
        }
    }
    out.extend(m.settle(T0));
    out
}

/// Feeds `effects`' requests to `table` and the resulting messages for `m` back to it.
fn serve(
    m: &mut MemberCore<Rec>,
    table: &mut LockTable,
    effects: Vec<MemberEffect<Rec>>,
) -> Vec<MemberEffect<Rec>> {
    let mut out = Vec::new();
    let mut queue = effects;
    while !queue.is_empty() {
        let mut next = Vec::new();
        for e in queue {
            match e {
                MemberEffect::ToServer { request, .. }
                | MemberEffect::Agent(AgentEffect::ToServer { request, .. }) => {
                    for (agent, msg) in table.handle(request) {
                        if &agent == m.agent_id() {
                            next.extend(m.deliver(msg, T0));
                        }
                    }
                }
                other => out.push(other),
            }
        }
        next.extend(m.settle(T0));
        queue = next;
    }
    out
}

/// A worker asks for nothing and watches every node up, those that come up later too: it is
/// on no queue, and finds a leader only by seeing it hold the lock somewhere (a leader that
/// deferred the first node and the worker's node, module `tenure`, is on neither's queue).
#[test]
fn a_worker_only_watches_every_node_up() {
    let mut w = member("c", 1, Role::Worker);
    let effects = w.start(&[n("a"), n("b")], T0).unwrap();
    let watch = ServerRequest::Watch {
        watcher: w.agent_id().clone(),
        lock: lock(),
    };
    let at = |node: &str| (n(node), watch.clone());
    assert_eq!(requests(&effects), vec![at("a"), at("b"), at("c")]);
    assert_eq!(effects.len(), 3);
    assert_eq!(requests(&w.node_up(&n("d"), T0)), vec![at("d")]);
}

#[test]
fn a_lone_candidate_syncs_then_leads_with_its_fencing_version_as_term() {
    let mut c = member("a", 1, Role::Candidate);
    let mut table = LockTable::new(n("a"), ModeTable::standard(), 1000);
    let start = c.start(&[], T0).unwrap();
    let effects = serve(&mut c, &mut table, start);
    assert!(
        matches!(effects.as_slice(), [MemberEffect::StartSync { attempt: 1, nodes }] if nodes == &[n("a")]),
        "{effects:?}"
    );
    assert!(matches!(c.state(), State::Syncing { attempt: 1, .. }));
    let granted = table.view(&lock()).unwrap().version;
    let effects = c.sync_result(1, true, T0);
    let me = c.me().clone();
    assert!(
        matches!(effects.as_slice(), [MemberEffect::LeaderChanged(Some(t)), MemberEffect::EndSync { attempt: 1 }] if t == &term(granted, &me)),
        "{effects:?}"
    );
    assert!(c.is_leader());
    // A stale sync result is released at once.
    let effects = c.sync_result(7, true, T0);
    assert!(
        matches!(effects.as_slice(), [MemberEffect::EndSync { attempt: 7 }]),
        "{effects:?}"
    );
}

#[test]
fn a_leader_announces_itself_to_a_new_member_with_elected_for_it() {
    let mut c = member("a", 1, Role::Candidate);
    let mut table = LockTable::new(n("a"), ModeTable::standard(), 1000);
    let start = c.start(&[], T0).unwrap();
    serve(&mut c, &mut table, start);
    c.sync_result(1, true, T0);
    let t = c.leader().cloned().unwrap();
    let w = MemberId::new(n("a"), 1, 9);
    let effects = c.peer(
        &w,
        env(Role::Worker, None, PeerMsg::Hello { leader: None }),
        T0,
    );
    let grants = vec![(n("a"), t.epoch)];
    // The worker said `Hello`: it knows the leader, which announces itself and says no
    // `Hello` back.
    assert_eq!(
        to_members(&effects),
        vec![(
            w.clone(),
            env(
                Role::Candidate,
                Some(t.clone()),
                PeerMsg::AmLeader {
                    term: t.clone(),
                    grants,
                    msg: format!("to {w}"),
                }
            )
        )]
    );
    assert_eq!(c.workers(), vec![w]);
}

#[test]
fn an_older_term_is_refused_with_a_nack_and_a_newer_one_accepted() {
    let mut w = member("a", 1, Role::Worker);
    w.start(&[n("b")], T0).unwrap();
    let l1 = MemberId::new(n("b"), 1, 2);
    let l2 = MemberId::new(n("b"), 1, 3);
    let am = |t: Term| PeerMsg::AmLeader {
        term: t,
        grants: vec![],
        msg: "hi".to_string(),
    };
    let effects = w.peer(&l2, env(Role::Candidate, None, am(term(20, &l2))), T0);
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, MemberEffect::LeaderChanged(Some(t)) if t == &term(20, &l2))),
        "{effects:?}"
    );
    assert_eq!(w.callbacks().surrendered, vec!["hi".to_string()]);
    let effects = w.peer(&l1, env(Role::Candidate, None, am(term(10, &l1))), T0);
    let known = Some(term(20, &l2));
    assert_eq!(
        to_members(&effects),
        vec![
            (
                l1.clone(),
                env(
                    Role::Worker,
                    known.clone(),
                    PeerMsg::Hello {
                        leader: known.clone()
                    }
                )
            ),
            (l1, env(Role::Worker, known, PeerMsg::Nack)),
        ]
    );
    assert_eq!(w.leader(), Some(&term(20, &l2)));
}

#[test]
fn an_announcement_contradicted_by_a_newer_view_is_ignored() {
    let mut w = member("a", 1, Role::Worker);
    w.start(&[], T0).unwrap();
    let l = MemberId::new(n("a"), 1, 2);
    let other = AgentId::new(n("a"), 1, 3);
    let view = LockView {
        version: 50,
        group: Some(Mode::WRITE),
        granted: vec![locks_core::proto::QueueEntry {
            agent: other,
            mode: Mode::WRITE,
        }],
        ..LockView::default()
    };
    w.deliver(
        AgentMessage::Watched {
            node: n("a"),
            lock: lock(),
            view: Arc::new(view),
        },
        T0,
    );
    let am = PeerMsg::AmLeader {
        term: term(40, &l),
        grants: vec![(n("a"), 40)],
        msg: "hi".to_string(),
    };
    w.peer(&l, env(Role::Candidate, None, am), T0);
    assert_eq!(w.leader(), None);
}

#[test]
fn leader_calls_wait_for_a_leader_then_go_to_it_and_time_out_at_their_deadline() {
    let mut w = member("a", 1, Role::Worker);
    w.start(&[n("b")], T0).unwrap();
    let deadline = Duration::from_secs(5);
    assert!(w.leader_call(CallId(1), 21, deadline, T0).is_empty());
    assert!(
        w.leader_call(CallId(2), 22, Duration::from_secs(1), T0)
            .is_empty()
    );
    assert_eq!(w.next_deadline(), Some(Duration::from_secs(1)));
    let effects = w.tick(Duration::from_secs(1));
    assert!(
        matches!(
            effects.as_slice(),
            [MemberEffect::Reply {
                call: CallId(2),
                result: Err(CallError::Timeout)
            }]
        ),
        "{effects:?}"
    );
    let l = MemberId::new(n("b"), 1, 2);
    let t = term(9, &l);
    let am = PeerMsg::AmLeader {
        term: t.clone(),
        grants: vec![],
        msg: "hi".to_string(),
    };
    let effects = w.peer(&l, env(Role::Candidate, None, am), T0);
    let calls: Vec<_> = to_members(&effects)
        .into_iter()
        .filter(|(_, e)| matches!(e.msg, PeerMsg::LeaderCall { .. }))
        .collect();
    assert_eq!(
        calls,
        vec![(
            l.clone(),
            env(
                Role::Worker,
                Some(t.clone()),
                PeerMsg::LeaderCall {
                    call: CallId(1),
                    req: 21
                }
            )
        )]
    );
    // The leader's broadcast comes before its reply; the reply answers the caller.
    w.peer(
        &l,
        env(
            Role::Candidate,
            Some(t.clone()),
            PeerMsg::FromLeader {
                term: t.clone(),
                msg: "did 21".into(),
                ack: None,
            },
        ),
        T0,
    );
    let effects = w.peer(
        &l,
        env(
            Role::Candidate,
            Some(t),
            PeerMsg::LeaderReply {
                call: CallId(1),
                result: Ok(42),
            },
        ),
        T0,
    );
    assert!(
        matches!(
            effects.as_slice(),
            [MemberEffect::Reply {
                call: CallId(1),
                result: Ok(42)
            }]
        ),
        "{effects:?}"
    );
    assert_eq!(w.callbacks().from_leader, vec!["did 21".to_string()]);
    assert_eq!(w.next_deadline(), None);
}

#[test]
fn a_call_answered_not_leader_is_sent_again_to_the_next_leader() {
    let mut w = member("a", 1, Role::Worker);
    w.start(&[n("b")], T0).unwrap();
    let (l1, l2) = (MemberId::new(n("b"), 1, 2), MemberId::new(n("b"), 1, 3));
    let am = |t: Term| PeerMsg::AmLeader {
        term: t,
        grants: vec![],
        msg: String::new(),
    };
    w.peer(&l1, env(Role::Candidate, None, am(term(1, &l1))), T0);
    w.leader_call(CallId(1), 5, Duration::from_secs(5), T0);
    let effects = w.peer(
        &l1,
        env(
            Role::Candidate,
            None,
            PeerMsg::LeaderReply {
                call: CallId(1),
                result: Err(CallError::NotLeader),
            },
        ),
        T0,
    );
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, MemberEffect::Reply { .. })),
        "{effects:?}"
    );
    assert_eq!(w.leader(), None);
    let effects = w.peer(&l2, env(Role::Candidate, None, am(term(2, &l2))), T0);
    assert!(
        to_members(&effects).iter().any(|(to, e)| to == &l2
            && e.msg
                == PeerMsg::LeaderCall {
                    call: CallId(1),
                    req: 5
                }),
        "{effects:?}"
    );
}

#[test]
fn a_leader_that_hears_of_a_larger_term_takes_a_larger_one_and_announces_it() {
    let mut c = member("a", 1, Role::Candidate);
    let mut table = LockTable::new(n("a"), ModeTable::standard(), 1000);
    let start = c.start(&[], T0).unwrap();
    serve(&mut c, &mut table, start);
    c.sync_result(1, true, T0);
    let w = MemberId::new(n("a"), 1, 9);
    c.peer(
        &w,
        env(Role::Worker, None, PeerMsg::Hello { leader: None }),
        T0,
    );
    let old = c.leader().cloned().unwrap();
    let other = MemberId::new(n("z"), 1, 1);
    let big = term(old.epoch + 100, &other);
    let effects = c.peer(&w, env(Role::Worker, Some(big.clone()), PeerMsg::Nack), T0);
    let new = c.leader().cloned().unwrap();
    assert_eq!(new, term(big.epoch + 1, c.me()));
    assert!(
        matches!(effects.first(), Some(MemberEffect::LeaderChanged(Some(t))) if t == &new),
        "{effects:?}"
    );
    assert!(
        to_members(&effects)
            .iter()
            .any(|(to, e)| to == &w
                && matches!(&e.msg, PeerMsg::AmLeader { term, .. } if term == &new)),
        "{effects:?}"
    );
}

#[test]
fn a_follower_drops_a_leader_that_says_uncertain_and_tells_the_candidates() {
    let mut w = member("a", 1, Role::Worker);
    w.start(&[n("b")], T0).unwrap();
    let l = MemberId::new(n("b"), 1, 2);
    let c = MemberId::new(n("b"), 1, 3);
    w.peer(
        &c,
        env(Role::Candidate, None, PeerMsg::Hello { leader: None }),
        T0,
    );
    let t = term(3, &l);
    w.peer(
        &l,
        env(
            Role::Candidate,
            None,
            PeerMsg::AmLeader {
                term: t.clone(),
                grants: vec![],
                msg: String::new(),
            },
        ),
        T0,
    );
    let effects = w.peer(
        &l,
        env(Role::Candidate, Some(t.clone()), PeerMsg::Uncertain),
        T0,
    );
    assert!(
        matches!(effects.first(), Some(MemberEffect::LeaderChanged(None))),
        "{effects:?}"
    );
    let told: Vec<MemberId> = to_members(&effects)
        .into_iter()
        .filter(|(_, e)| e.msg == PeerMsg::Uncertain)
        .map(|(to, _)| to)
        .collect();
    assert_eq!(told, vec![l, c]);
}

#[test]
fn stopping_says_goodbye_releases_everything_and_fails_waiting_calls() {
    let mut w = member("a", 1, Role::Worker);
    w.start(&[n("b")], T0).unwrap();
    let c = MemberId::new(n("b"), 1, 3);
    w.peer(
        &c,
        env(Role::Candidate, None, PeerMsg::Hello { leader: None }),
        T0,
    );
    w.leader_call(CallId(4), 1, Duration::from_secs(5), T0);
    let effects = w.stop("bye");
    assert_eq!(
        to_members(&effects),
        vec![(c, env(Role::Worker, None, PeerMsg::Goodbye))]
    );
    assert!(effects.iter().any(|e| matches!(
        e,
        MemberEffect::Reply {
            call: CallId(4),
            result: Err(CallError::Stopped(_))
        }
    )));
    let removes: Vec<NodeId> = requests(&effects)
        .into_iter()
        .filter(|(_, r)| matches!(r, ServerRequest::RemoveAgent { .. }))
        .map(|(n, _)| n)
        .collect();
    // A worker watches every node up.
    assert_eq!(removes, vec![n("a"), n("b")]);
    assert!(matches!(effects.last(), Some(MemberEffect::Stopped { .. })));
    assert!(w.stop("again").is_empty());
}

#[test]
fn a_candidate_that_recalls_a_term_leads_with_a_larger_one_whatever_the_lock_versions() {
    let mut c = member("a", 1, Role::Candidate);
    let old = term(1 << 40, &MemberId::new(n("b"), 1, 2));
    c.recall(old.clone());
    let mut table = LockTable::new(n("a"), ModeTable::standard(), 1000);
    let start = c.start(&[], T0).unwrap();
    serve(&mut c, &mut table, start);
    c.sync_result(1, true, T0);
    assert!(c.leader().is_some_and(|t| t > &old && t.epoch > old.epoch));
}
