//! The member core in majority mode: the poll before a term is taken, the acceptance that
//! establishes it, and stepping down when the majority cannot be proven. Lock-server answers
//! come from real `LockTable`s, one per node.

use super::tests::{Rec, T0, env, lock, member_with, n, term, to_members};
use super::*;
use crate::GroupOptions;
use locks_core::proto::ServerRequest;
use locks_core::{Mode, ModeTable};
use locks_server::state_machine::LockTable;

/// Feeds `effects`' requests to the tables of their nodes and the resulting messages for `m`
/// back to it (settling after each round); returns the other effects.
fn serve(
    m: &mut MemberCore<Rec>,
    tables: &mut BTreeMap<NodeId, LockTable>,
    effects: Vec<MemberEffect<Rec>>,
) -> Vec<MemberEffect<Rec>> {
    let mut out = Vec::new();
    let mut queue = effects;
    while !queue.is_empty() {
        let mut next = Vec::new();
        for e in queue {
            match e {
                MemberEffect::ToServer { node, request }
                | MemberEffect::Agent(AgentEffect::ToServer { node, request }) => {
                    let table = tables.get_mut(&node).expect("a table for every node");
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

/// The lock tables of nodes `b` and `c`, whose versions start far below [`old_term`].
fn tables_b_c() -> BTreeMap<NodeId, LockTable> {
    let mut tables = BTreeMap::new();
    tables.insert(n("b"), LockTable::new(n("b"), ModeTable::standard(), 1000));
    tables.insert(n("c"), LockTable::new(n("c"), ModeTable::standard(), 2000));
    tables
}

/// The term of a leader on node `a`, long gone, whose node's clock was far ahead: every
/// version the remaining nodes hand out is below it.
fn old_term() -> Term {
    term(1 << 40, &MemberId::new(n("a"), 1, 7))
}

struct Elected {
    b: MemberCore<Rec>,
    tables: BTreeMap<NodeId, LockTable>,
    /// The candidate on node `c`.
    cm: MemberId,
    term: Term,
}

/// A candidate on `b`, in a group configured on `a`, `b`, `c` with `a` down, that holds the
/// election lock on `b` and `c`, polls the candidate of `c` (which accepted [`old_term`]),
/// syncs, and leads once that candidate accepted its term. Checks each step.
fn elect_b() -> Elected {
    let options = GroupOptions::majority().nodes([n("a"), n("b"), n("c")]);
    let mut b = member_with("b", 1, Role::Candidate, &options);
    // Clocks stepped back: both remaining tables version far below the old term.
    let mut tables = tables_b_c();
    let start = b.start(&[n("c")], T0).unwrap();
    let effects = serve(&mut b, &mut tables, start);
    assert!(
        matches!(
            effects.as_slice(),
            [MemberEffect::StartSync { attempt: 1, .. }]
        ),
        "{effects:?}"
    );
    // The candidate of `c` queues for the lock on its node: the view there lists it, and `b`
    // polls it.
    let cm = MemberId::new(n("c"), 1, 2);
    let queue_c = ServerRequest::Lock {
        agent: cm.agent(),
        lock: lock(),
        mode: Mode::WRITE,
    };
    let effects = serve(
        &mut b,
        &mut tables,
        vec![MemberEffect::ToServer {
            node: n("c"),
            request: queue_c,
        }],
    );
    let sent: Vec<PeerMessage<Rec>> = to_members(&effects)
        .into_iter()
        .filter(|(to, _)| to == &cm)
        .map(|(_, e)| e.msg)
        .collect();
    assert!(sent.contains(&PeerMsg::Poll { attempt: 1 }), "{effects:?}");
    // The sync lock alone does not make it leader while the poll is out.
    let effects = b.sync_result(1, true, T0);
    assert!(effects.is_empty(), "{effects:?}");
    assert!(matches!(b.state(), State::Syncing { attempt: 1, .. }));
    // The answer carries the old term: the new one is above it.
    let polled = env(
        Role::Candidate,
        Some(old_term()),
        PeerMsg::Polled { attempt: 1 },
    );
    let effects = b.peer(&cm, polled, T0);
    let State::Leader { term, .. } = b.state().clone() else {
        panic!("not leading: {:?}", b.state());
    };
    assert!(term > old_term(), "{term} above {}", old_term());
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, MemberEffect::LeaderChanged(Some(_)))),
        "published before a majority accepted: {effects:?}"
    );
    assert!(!b.is_leader());
    assert_eq!(b.leader_proof(), None);
    Elected {
        b,
        tables,
        cm,
        term,
    }
}

/// Makes `e.b` established: the candidate of `c` accepts its term.
fn accept(e: &mut Elected) -> Vec<MemberEffect<Rec>> {
    let accepted = env(
        Role::Candidate,
        Some(e.term.clone()),
        PeerMsg::Accepted {
            term: e.term.clone(),
        },
    );
    e.b.peer(&e.cm, accepted, T0)
}

#[test]
fn a_new_leader_takes_a_term_above_the_ones_its_poll_found_though_clocks_stepped_back() {
    let mut e = elect_b();
    // A leader call waits for the term to be established.
    let effects = e.b.leader_call(CallId(1), 21, Duration::from_secs(5), T0);
    assert!(
        !effects
            .iter()
            .any(|x| matches!(x, MemberEffect::Reply { .. })),
        "{effects:?}"
    );
    let effects = accept(&mut e);
    assert!(
        matches!(effects.first(), Some(MemberEffect::LeaderChanged(Some(t))) if t == &e.term),
        "{effects:?}"
    );
    // Handled now; answered once the candidate of `c` applied the broadcast (`confirm`).
    assert_eq!(e.b.held_replies(), 1);
    let effects = applied(&mut e, 1);
    assert!(
        effects.iter().any(|x| matches!(
            x,
            MemberEffect::Reply {
                call: CallId(1),
                result: Ok(42)
            }
        )),
        "{effects:?}"
    );
    assert!(e.b.is_leader());
    let proof = e.b.leader_proof().expect("a proof");
    assert_eq!(proof.nodes, vec![n("b"), n("c")]);
    assert_eq!(proof.needed, 2);
    assert!(proof.holds(|_| true));
    assert!(!proof.holds(|x| x == &n("b")));
    let _ = &e.tables;
}

#[test]
fn a_leader_whose_leases_prove_no_majority_steps_down_before_answering() {
    let mut e = elect_b();
    accept(&mut e);
    assert!(e.b.is_leader());
    // The lease on `c` expired; the node-down event is not handled yet.
    let effects = e.b.check_leases(|x| x == &n("b"), T0);
    assert!(
        matches!(effects.first(), Some(MemberEffect::LeaderChanged(None))),
        "{effects:?}"
    );
    assert!(
        to_members(&effects)
            .iter()
            .any(|(to, msg)| to == &e.cm && msg.msg == PeerMsg::Uncertain),
        "{effects:?}"
    );
    assert!(!e.b.is_leader());
    assert_eq!(e.b.callbacks().stepped_down, 1);
    assert_eq!(e.b.leader_proof(), None);
    // It does not take over again on the lease it knows has lapsed.
    let effects = e.b.settle(T0);
    assert!(
        !effects
            .iter()
            .any(|x| matches!(x, MemberEffect::StartSync { .. })),
        "{effects:?}"
    );
    assert!(matches!(e.b.state(), State::Candidate));
    // Then the event: with one node of three up, leader calls are refused.
    e.b.node_down(&n("c"), T0);
    let effects = e.b.leader_call(CallId(2), 1, Duration::from_secs(5), T0);
    assert!(
        matches!(
            effects.as_slice(),
            [MemberEffect::Reply {
                call: CallId(2),
                result: Err(CallError::NoMajority { up: 1, group: 3 })
            }]
        ),
        "{effects:?}"
    );
}

#[test]
fn a_leader_cut_off_from_its_majority_steps_down_on_the_node_down() {
    let mut e = elect_b();
    accept(&mut e);
    let effects = e.b.node_down(&n("c"), T0);
    assert!(
        matches!(effects.first(), Some(MemberEffect::LeaderChanged(None))),
        "{effects:?}"
    );
    assert!(!e.b.is_leader());
    assert_eq!(e.b.callbacks().stepped_down, 1);
    // A forwarded call reaching it now is refused as not leader (the follower sends it on).
    let call = PeerMsg::LeaderCall {
        call: CallId(9),
        req: 1,
    };
    let effects = e.b.peer(&e.cm, env(Role::Candidate, None, call), T0);
    assert!(
        to_members(&effects).iter().any(|(to, m)| to == &e.cm
            && m.msg
                == PeerMsg::LeaderReply {
                    call: CallId(9),
                    result: Err(CallError::NotLeader)
                }),
        "{effects:?}"
    );
}

#[test]
fn a_forwarded_call_waits_for_the_term_to_be_established() {
    let mut e = elect_b();
    let call = PeerMsg::LeaderCall {
        call: CallId(5),
        req: 4,
    };
    let effects = e.b.peer(&e.cm, env(Role::Candidate, None, call), T0);
    assert!(
        !to_members(&effects)
            .iter()
            .any(|(_, m)| matches!(m.msg, PeerMsg::LeaderReply { .. })),
        "answered before its term was established: {effects:?}"
    );
    accept(&mut e);
    let effects = applied(&mut e, 1);
    assert!(
        to_members(&effects).iter().any(|(to, m)| to == &e.cm
            && m.msg
                == PeerMsg::LeaderReply {
                    call: CallId(5),
                    result: Ok(8)
                }),
        "{effects:?}"
    );
}

/// `Applied { seq }` from the candidate of `c`, for `e.b`'s current term.
fn applied(e: &mut Elected, seq: u64) -> Vec<MemberEffect<Rec>> {
    let msg = PeerMsg::Applied {
        term: e.term.clone(),
        seq,
    };
    e.b.peer(&e.cm, env(Role::Candidate, Some(e.term.clone()), msg), T0)
}

fn replied(effects: &[MemberEffect<Rec>], call: u64) -> Option<&Result<u32, CallError>> {
    effects.iter().find_map(|x| match x {
        MemberEffect::Reply { call: c, result } if c == &CallId(call) => Some(result),
        _ => None,
    })
}

/// The nemesis suite's `leader-kill` loss: a leader that answered a write as soon as it had
/// sent the broadcast could be killed with the broadcast still in flight. In majority mode the
/// answer waits until members on a majority of the group's nodes applied it: here the
/// candidate of `c` (with `b`, two of three).
#[test]
fn a_leader_answers_a_write_only_once_a_majority_of_the_nodes_applied_it() {
    let mut e = elect_b();
    accept(&mut e);
    let effects = e.b.leader_call(CallId(1), 21, Duration::from_secs(5), T0);
    assert!(
        to_members(&effects).iter().any(|(to, m)| to == &e.cm
            && m.msg
                == PeerMsg::FromLeader {
                    term: e.term.clone(),
                    msg: "did 21".into(),
                    ack: Some(1)
                }),
        "{effects:?}"
    );
    assert_eq!(
        replied(&effects, 1),
        None,
        "answered before a majority applied it"
    );
    let effects = e.b.leader_call(CallId(2), 5, Duration::from_secs(5), T0);
    assert_eq!(replied(&effects, 2), None, "{effects:?}");
    assert_eq!(e.b.held_replies(), 2);
    // Acknowledgements of another leader's term, and from a member of the leader's own node,
    // do not count.
    let other = term(e.term.epoch, &e.cm);
    let foreign = PeerMsg::Applied {
        term: other,
        seq: 2,
    };
    let effects = e.b.peer(&e.cm, env(Role::Candidate, None, foreign), T0);
    assert_eq!(replied(&effects, 1), None, "{effects:?}");
    let local = MemberId::new(n("b"), 1, 9);
    let same_node = PeerMsg::Applied {
        term: e.term.clone(),
        seq: 2,
    };
    let effects = e.b.peer(&local, env(Role::Worker, None, same_node), T0);
    assert_eq!(replied(&effects, 1), None, "{effects:?}");
    // The first applied: only the first is answered; then both, in order.
    let effects = applied(&mut e, 1);
    assert_eq!(replied(&effects, 1), Some(&Ok(42)), "{effects:?}");
    assert_eq!(replied(&effects, 2), None, "{effects:?}");
    let effects = applied(&mut e, 2);
    assert_eq!(replied(&effects, 2), Some(&Ok(10)), "{effects:?}");
    assert_eq!(e.b.held_replies(), 0);
}

#[test]
fn a_held_write_fails_at_its_deadline_and_when_the_leader_steps_down() {
    let mut e = elect_b();
    accept(&mut e);
    let effects = e.b.leader_call(CallId(1), 1, Duration::from_secs(1), T0);
    assert_eq!(replied(&effects, 1), None, "{effects:?}");
    assert_eq!(e.b.next_deadline(), Some(Duration::from_secs(1)));
    let effects = e.b.tick(Duration::from_secs(1));
    assert_eq!(replied(&effects, 1), Some(&Err(CallError::Timeout)));
    // A forwarded write and a client's: stepping down fails both, as `LeaderDied` (the write
    // may or may not survive).
    let call = PeerMsg::LeaderCall {
        call: CallId(7),
        req: 3,
    };
    e.b.peer(&e.cm, env(Role::Candidate, None, call), T0);
    e.b.leader_call(CallId(2), 2, Duration::from_secs(60), T0);
    assert_eq!(e.b.held_replies(), 2);
    let effects = e.b.node_down(&n("c"), Duration::from_secs(2));
    assert_eq!(replied(&effects, 2), Some(&Err(CallError::LeaderDied)));
    assert!(
        to_members(&effects).iter().any(|(to, m)| to == &e.cm
            && m.msg
                == PeerMsg::LeaderReply {
                    call: CallId(7),
                    result: Err(CallError::LeaderDied)
                }),
        "{effects:?}"
    );
    assert_eq!(e.b.held_replies(), 0);
}

#[test]
fn a_follower_acknowledges_a_numbered_broadcast_after_applying_it() {
    let leader = MemberId::new(n("a"), 1, 1);
    let t = term(5, &leader);
    let mut w = member_with("b", 2, Role::Worker, &GroupOptions::majority());
    w.start(&[n("a")], T0).unwrap();
    let am = PeerMsg::AmLeader {
        term: t.clone(),
        grants: Vec::new(),
        msg: "sync".into(),
    };
    w.peer(&leader, env(Role::Candidate, Some(t.clone()), am), T0);
    assert_eq!(w.leader(), Some(&t));
    let from = |ack| PeerMsg::FromLeader {
        term: t.clone(),
        msg: "w".into(),
        ack,
    };
    let effects = w.peer(
        &leader,
        env(Role::Candidate, Some(t.clone()), from(None)),
        T0,
    );
    assert!(
        !to_members(&effects)
            .iter()
            .any(|(_, m)| matches!(m.msg, PeerMsg::Applied { .. })),
        "{effects:?}"
    );
    let effects = w.peer(
        &leader,
        env(Role::Candidate, Some(t.clone()), from(Some(4))),
        T0,
    );
    assert!(
        to_members(&effects).iter().any(|(to, m)| to == &leader
            && m.msg
                == PeerMsg::Applied {
                    term: t.clone(),
                    seq: 4
                }),
        "{effects:?}"
    );
    assert_eq!(w.callbacks().from_leader, vec!["w".to_string(), "w".into()]);
}

#[test]
fn members_learn_the_group_nodes_from_every_envelope() {
    let mut w = member_with("b", 1, Role::Worker, &GroupOptions::majority());
    w.start(&[], T0).unwrap();
    // A worker's own node is one of the group's: its lock server holds the election lock.
    assert_eq!(w.group_nodes(), vec![n("b")]);
    let mut hello = env(Role::Candidate, None, PeerMsg::Hello { leader: None });
    hello.group = vec![n("a"), n("c")];
    w.peer(&MemberId::new(n("a"), 1, 1), hello, T0);
    assert_eq!(w.group_nodes(), vec![n("a"), n("b"), n("c")]);
}

#[test]
fn a_workers_node_counts_and_the_worker_is_polled_and_establishes_the_term() {
    // The group knows `a` (a candidate's node, now down) and `b`; the worker on `c` makes it
    // three, and the lock on `b` and `c` is then a majority.
    let options = GroupOptions::majority().nodes([n("a")]);
    let mut b = member_with("b", 1, Role::Candidate, &options);
    let mut tables = tables_b_c();
    let start = b.start(&[n("c")], T0).unwrap();
    let effects = serve(&mut b, &mut tables, start);
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, MemberEffect::StartSync { .. })),
        "one of two group nodes is no majority: {effects:?}"
    );
    let worker = MemberId::new(n("c"), 1, 5);
    let hello = env(Role::Worker, None, PeerMsg::Hello { leader: None });
    let mut effects = b.peer(&worker, hello, T0);
    effects.extend(b.settle(T0));
    let effects = serve(&mut b, &mut tables, effects);
    assert_eq!(b.group_nodes(), vec![n("a"), n("b"), n("c")]);
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, MemberEffect::StartSync { attempt: 1, .. })),
        "{effects:?}"
    );
    assert!(
        to_members(&effects)
            .iter()
            .any(|(to, e)| to == &worker && e.msg == PeerMsg::Poll { attempt: 1 }),
        "the worker on a node where the lock is held is polled: {effects:?}"
    );
    assert!(b.sync_result(1, true, T0).is_empty());
    let polled = env(
        Role::Worker,
        Some(old_term()),
        PeerMsg::Polled { attempt: 1 },
    );
    b.peer(&worker, polled, T0);
    let State::Leader { term, .. } = b.state().clone() else {
        panic!("not leading: {:?}", b.state());
    };
    assert!(
        term > old_term(),
        "{term} above the worker's {}",
        old_term()
    );
    assert!(!b.is_leader());
    let accepted = env(
        Role::Worker,
        Some(term.clone()),
        PeerMsg::Accepted { term: term.clone() },
    );
    let effects = b.peer(&worker, accepted, T0);
    assert!(
        b.is_leader(),
        "the worker's acceptance establishes the term"
    );
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, MemberEffect::LeaderChanged(Some(t)) if t == &term)),
        "{effects:?}"
    );
}

/// Whether `effects` ask the lock server of `node` for the election lock.
fn asks_lock_on(effects: &[MemberEffect<Rec>], node: &NodeId) -> bool {
    effects.iter().any(|e| {
        matches!(e, MemberEffect::Agent(AgentEffect::ToServer { node: x, request: ServerRequest::Lock { .. } }) if x == node)
    })
}

#[test]
fn a_leader_defers_a_node_that_comes_up_until_it_steps_down() {
    let mut e = elect_b();
    accept(&mut e);
    assert!(e.b.is_leader());
    // A node comes up: watched, but the leader does not queue there, and stays.
    let effects = e.b.node_up(&n("d"), T0);
    assert!(!asks_lock_on(&effects, &n("d")), "{effects:?}");
    assert!(
        effects.iter().any(|x| matches!(x, MemberEffect::ToServer { node, request: ServerRequest::Watch { .. } } if node == &n("d"))),
        "{effects:?}"
    );
    let effects = e.b.settle(T0);
    assert!(e.b.is_leader(), "{effects:?}");
    // Nor on one that becomes the smallest node up (the first node).
    let mut effects = e.b.node_up(&n("a"), T0);
    effects.extend(e.b.settle(T0));
    assert!(!asks_lock_on(&effects, &n("a")), "{effects:?}");
    assert!(e.b.is_leader(), "{effects:?}");
    // It loses its majority: it steps down, and now asks for the lock on the deferred node.
    let effects = e.b.node_down(&n("c"), T0);
    assert!(!e.b.is_leader());
    assert!(asks_lock_on(&effects, &n("d")), "{effects:?}");
    assert!(asks_lock_on(&effects, &n("a")), "{effects:?}");
}
