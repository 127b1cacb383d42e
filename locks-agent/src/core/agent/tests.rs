use super::*;
use crate::core::status::GrantNodes;
use locks_core::Mode::{IX, S, X};
use locks_core::lock_id;
use locks_core::proto::{EntryState, LockNotice, LockView, Note, QueueEntry, Wait};
use std::sync::Arc;

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn n1() -> NodeId {
    node("n1")
}

fn agent(serial: u64) -> AgentId {
    AgentId::new(n1(), 1, serial)
}

fn core(serial: u64, options: Options) -> AgentCore {
    AgentCore::new(agent(serial), ModeTable::standard(), options)
}

fn view(version: u64, holders: &[(u64, Mode)], waiting: &[(u64, Mode)]) -> Arc<LockView> {
    let e = |&(a, m): &(u64, Mode)| QueueEntry {
        agent: agent(a),
        mode: m,
    };
    Arc::new(LockView {
        version,
        group: None,
        granted: holders.iter().map(e).collect(),
        converting: vec![],
        waiting: waiting.iter().map(e).collect(),
    })
}

fn notice(node: &NodeId, lock: &LockId, version: u64, state: EntryState) -> AgentMessage {
    AgentMessage::Notice(LockNotice {
        node: node.clone(),
        lock: lock.clone(),
        version,
        state,
        queue: None,
        note: None,
    })
}

fn waiting_notice(lock: &LockId, mode: Mode, queue: Arc<LockView>) -> AgentMessage {
    AgentMessage::Notice(LockNotice {
        node: n1(),
        lock: lock.clone(),
        version: queue.version,
        state: EntryState::Waiting(mode),
        queue: Some(queue),
        note: None,
    })
}

fn forward(from: u64, lock: &LockId, queue: Arc<LockView>) -> AgentMessage {
    AgentMessage::Forward {
        from: agent(from),
        node: n1(),
        lock: lock.clone(),
        view: queue,
    }
}

fn to_servers(effects: &[AgentEffect]) -> Vec<(NodeId, ServerRequest)> {
    effects
        .iter()
        .filter_map(|e| match e {
            AgentEffect::ToServer { node, request } => Some((node.clone(), request.clone())),
            _ => None,
        })
        .collect()
}

fn to_agents(effects: &[AgentEffect]) -> Vec<(AgentId, AgentMessage)> {
    effects
        .iter()
        .filter_map(|e| match e {
            AgentEffect::ToAgent { to, msg } => Some((to.clone(), msg.clone())),
            _ => None,
        })
        .collect()
}

fn lock_req(a: u64, lock: &LockId, mode: Mode) -> ServerRequest {
    ServerRequest::Lock {
        agent: agent(a),
        lock: lock.clone(),
        mode,
    }
}

/// Agent 1's `Unlock` of `lock`, sent to n1.
fn unlock_on_n1(lock: &LockId) -> AgentEffect {
    AgentEffect::ToServer {
        node: n1(),
        request: ServerRequest::Unlock {
            agent: agent(1),
            lock: lock.clone(),
        },
    }
}

/// Asks for `lock` on n1 and has the server grant it at `version`.
fn hold(c: &mut AgentCore, lock: &LockId, mode: Mode, version: u64) {
    c.request(lock.clone(), mode, &[n1()], Req::All).unwrap();
    c.receive(notice(&n1(), lock, version, EntryState::Granted(mode)));
    c.settle();
}

#[test]
fn a_new_request_goes_to_every_node_and_waits() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    let fx = c
        .request(l.clone(), X, &[node("n2"), n1(), n1()], Req::All)
        .unwrap();
    assert_eq!(
        fx,
        vec![
            AgentEffect::ToServer {
                node: n1(),
                request: lock_req(1, &l, X)
            },
            // The copies after the first are tried: the gate (`gate.rs`).
            AgentEffect::ToServer {
                node: node("n2"),
                request: ServerRequest::TryLock {
                    agent: agent(1),
                    lock: l.clone(),
                    mode: X
                }
            },
            AgentEffect::StatusChanged(TransactionStatus::Waiting),
        ]
    );
    assert_eq!(
        c.request_on(&l).unwrap().nodes.as_slice(),
        [n1(), node("n2")]
    );
}

#[test]
fn a_grant_settles_into_have_all_locks_and_claims_the_request() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    assert!(
        c.receive(notice(&n1(), &l, 7, EntryState::Granted(X)))
            .is_empty()
    );
    assert_eq!(c.status(), TransactionStatus::Waiting, "settle decides");
    let fx = c.settle();
    let have = TransactionStatus::HaveAllLocks { deadlocks: vec![] };
    let granted = GrantedLock {
        lock: l.clone(),
        mode: X,
        nodes: GrantNodes::one(n1(), 7),
    };
    assert_eq!(
        fx,
        vec![
            AgentEffect::Granted(granted),
            AgentEffect::StatusChanged(have.clone())
        ],
        "the client is told of the grant, with its version"
    );
    assert_eq!(c.request_on(&l).unwrap().claimed, Some(X));
    assert_eq!(
        c.lock_result().unwrap().locks,
        vec![GrantedLock {
            lock: l,
            mode: X,
            nodes: GrantNodes::one(n1(), 7)
        }]
    );
}

#[test]
fn erlang_a_repeated_covered_request_is_a_no_op() {
    // The original never answers a second `lock` of a held lock; here the request changes
    // nothing, so the status stays "have all locks" and the caller is answered at once.
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    hold(&mut c, &l, X, 3);
    assert_eq!(c.request(l.clone(), X, &[n1()], Req::All), Ok(vec![]));
    assert_eq!(c.request(l.clone(), S, &[n1()], Req::All), Ok(vec![]));
    assert!(c.status().have_all_locks());
}

#[test]
fn a_stronger_mode_is_an_up_conversion() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    hold(&mut c, &l, S, 3);
    let fx = c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    assert_eq!(to_servers(&fx), vec![(n1(), lock_req(1, &l, X))]);
    assert_eq!(c.status(), TransactionStatus::Waiting);
    assert!(
        c.request_on(&l).unwrap().claimed.is_some(),
        "the read is still claimed"
    );
    c.receive(notice(&n1(), &l, 4, EntryState::Granted(X)));
    c.settle();
    assert!(c.status().have_all_locks());
}

#[test]
fn new_nodes_extend_a_request_and_conflicting_requirements_are_refused() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1()], Req::Majority).unwrap();
    let fx = c
        .request(l.clone(), X, &[n1(), node("n2")], Req::Majority)
        .unwrap();
    assert_eq!(to_servers(&fx), vec![(node("n2"), lock_req(1, &l, X))]);
    assert_eq!(
        c.request(l.clone(), X, &[n1()], Req::AllAlive),
        Err(RequestError::ConflictingRequirement {
            lock: l.clone(),
            existing: Req::Majority,
            requested: Req::AllAlive
        })
    );
    // A stronger requirement alone changes the request but sends nothing.
    let fx = c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    assert!(to_servers(&fx).is_empty());
    assert_eq!(c.request_on(&l).unwrap().req, Req::All);
    assert_eq!(
        c.request(l.clone(), X, &[], Req::All),
        Err(RequestError::NoNodes { lock: l })
    );
}

#[test]
fn a_child_lock_is_held_only_with_the_intention_mode_on_its_ancestors() {
    let mut c = core(1, Options::default());
    let (a, a1) = (lock_id!["a"], lock_id!["a", 1]);
    c.request(a1.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(notice(&n1(), &a1, 5, EntryState::Granted(X)));
    c.receive(waiting_notice(&a, IX, view(5, &[(2, S)], &[(1, IX)])));
    c.settle();
    assert_eq!(c.status(), TransactionStatus::Waiting);
    c.receive(notice(&n1(), &a, 6, EntryState::Granted(IX)));
    c.settle();
    assert!(c.status().have_all_locks());
}

/// The probe among `effects`, as it comes back to its victim once every other agent of the
/// cycle has confirmed its edge; the victim's settle after it.
fn probe_returns(c: &mut AgentCore, effects: &[AgentEffect]) -> Vec<AgentEffect> {
    let mut probe = to_agents(effects)
        .into_iter()
        .find_map(|(_, m)| match m {
            AgentMessage::Probe(p) => Some(p),
            _ => None,
        })
        .expect("the victim sends a probe round the cycle");
    assert_eq!(probe.victim(), Some(c.id()));
    probe.next = probe.edges.len() as u32 - 1;
    c.receive(AgentMessage::Probe(probe));
    c.settle()
}

/// Agent `me` holds `[x]` (claimed) and waits for `[y]`, held by agent `other`, which waits for
/// `[x]`: a 2-cycle. Returns the core after the forward that closes the cycle has arrived.
fn two_cycle(me: u64, other: u64, options: Options) -> AgentCore {
    let (x, y) = (lock_id!["x"], lock_id!["y"]);
    let mut c = core(me, options);
    hold(&mut c, &x, X, 2);
    assert!(c.request_on(&x).unwrap().claimed.is_some());
    c.request(y.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(waiting_notice(&y, X, view(4, &[(other, X)], &[(me, X)])));
    c.receive(forward(other, &x, view(5, &[(me, X)], &[(other, X)])));
    c
}

#[test]
fn erlang_a_surrendered_granted_request_is_pending_again() {
    let (x, y) = (lock_id!["x"], lock_id!["y"]);
    let mut c = two_cycle(3, 1, Options::default());
    let fx = c.settle();
    assert!(
        to_servers(&fx).is_empty(),
        "nobody gives way before the probe returns"
    );
    let fx = probe_returns(&mut c, &fx);
    assert_eq!(
        to_servers(&fx),
        vec![(
            n1(),
            ServerRequest::Surrender {
                agent: agent(3),
                lock: x.clone(),
                version: 5,
                // Both waits of the cycle are on n1: its server checks them again.
                waits: vec![
                    Wait {
                        waiter: agent(1),
                        blocker: agent(3),
                        lock: x.clone()
                    },
                    Wait {
                        waiter: agent(3),
                        blocker: agent(1),
                        lock: y.clone()
                    },
                ]
            }
        )]
    );
    assert_eq!(
        to_agents(&fx)[0],
        (
            agent(1),
            AgentMessage::Surrendered {
                by: agent(3),
                node: n1(),
                lock: x.clone(),
                version: 5
            }
        )
    );
    // The server re-queues [x] behind 1; until it is granted again, no "have all locks".
    let mut n = LockNotice {
        node: n1(),
        lock: x.clone(),
        version: 6,
        state: EntryState::Waiting(X),
        queue: Some(view(6, &[(1, X)], &[(3, X)])),
        note: Some(Box::new(Note::Surrendered {
            agent: agent(3),
            version: 5,
        })),
    };
    c.receive(AgentMessage::Notice(n.clone()));
    c.receive(notice(&n1(), &y, 7, EntryState::Granted(X)));
    c.settle();
    assert_eq!(c.status(), TransactionStatus::Waiting);
    n.version = 8;
    n.state = EntryState::Granted(X);
    n.queue = None;
    n.note = None;
    c.receive(AgentMessage::Notice(n));
    c.settle();
    assert_eq!(
        c.status(),
        TransactionStatus::HaveAllLocks {
            deadlocks: vec![Deadlock {
                victim: agent(3),
                lock: x,
                node: n1()
            }]
        }
    );
}

#[test]
fn erlang_abort_on_deadlock_when_the_lock_was_claimed() {
    let opts = Options {
        abort_on_deadlock: true,
        ..Options::default()
    };
    let mut c = two_cycle(2, 1, opts);
    let fx = c.settle();
    let fx = probe_returns(&mut c, &fx);
    let lost = LostLock {
        lock: lock_id!["x"],
        mode: X,
        nodes: vec![n1()],
        cause: LossCause::Aborted,
    };
    assert_eq!(
        fx,
        vec![
            AgentEffect::Lost(lost),
            AgentEffect::Abort {
                lock: lock_id!["x"],
                node: n1()
            }
        ]
    );
    assert!(!c.is_running());
    assert_eq!(
        c.request(lock_id!["z"], X, &[n1()], Req::All),
        Err(RequestError::Aborted)
    );
    assert_eq!(
        c.end(),
        vec![AgentEffect::ToServer {
            node: n1(),
            request: ServerRequest::RemoveAgent { agent: agent(2) }
        }]
    );
}

#[test]
fn abort_on_deadlock_still_surrenders_a_lock_never_reported() {
    // The victim's lock on [x] was granted but the transaction never had all its locks while
    // it held it, so the client was not told: surrender silently.
    let (x, y) = (lock_id!["x"], lock_id!["y"]);
    let opts = Options {
        abort_on_deadlock: true,
        ..Options::default()
    };
    let mut c = core(2, opts);
    c.request(x.clone(), X, &[n1()], Req::All).unwrap();
    c.request(y.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(notice(&n1(), &x, 2, EntryState::Granted(X)));
    c.receive(waiting_notice(&y, X, view(4, &[(1, X)], &[(2, X)])));
    c.receive(forward(1, &x, view(5, &[(2, X)], &[(1, X)])));
    let fx = c.settle();
    let fx = probe_returns(&mut c, &fx);
    assert!(matches!(
        to_servers(&fx)[..],
        [(_, ServerRequest::Surrender { .. })]
    ));
    assert!(c.is_running());
}

#[test]
fn unlock_withdraws_and_takes_the_agent_out_of_its_views() {
    let (l, k) = (lock_id!["l"], lock_id!["k"]);
    let mut c = core(1, Options::default());
    c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(waiting_notice(&l, X, view(4, &[(3, X)], &[(1, X)])));
    c.settle();
    assert_eq!(c.wait_for_graph().waits_for_set(&agent(1)), vec![agent(3)]);
    let fx = c.unlock(&l).unwrap();
    assert_eq!(
        fx,
        vec![
            unlock_on_n1(&l),
            AgentEffect::StatusChanged(TransactionStatus::NoLocks),
        ]
    );
    // The others' places are kept (others may count on this agent having the view).
    assert_eq!(
        c.wait_for_graph().waits_for_set(&agent(1)),
        Vec::<AgentId>::new()
    );
    assert!(c.knowledge.view(&l, &n1()).is_some());
    assert_eq!(c.unlock(&k), Err(RequestError::NoSuchRequest(k)));
}

#[test]
fn convert_down_needs_a_weaker_mode() {
    let l = lock_id!["l"];
    let mut c = core(1, Options::default());
    c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(notice(&n1(), &l, 3, EntryState::Granted(X)));
    c.settle();
    assert_eq!(
        c.convert(&l, X),
        Err(RequestError::NotWeaker {
            lock: l.clone(),
            held: X,
            requested: X
        })
    );
    let fx = c.convert(&l, S).unwrap();
    assert_eq!(
        to_servers(&fx),
        vec![(
            n1(),
            ServerRequest::Convert {
                agent: agent(1),
                lock: l.clone(),
                mode: S
            }
        )]
    );
    assert!(c.status().have_all_locks());
    assert_eq!(c.request_on(&l).unwrap().mode, S);
}

#[test]
fn a_refused_lock_request_cannot_be_served() {
    let l = lock_id!["l"];
    let mut c = core(1, Options::default());
    c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    let reason = Rejection::LockIdTooLarge("deep".into());
    let fx = c.receive(AgentMessage::Rejected {
        node: n1(),
        lock: l.clone(),
        reason: reason.clone(),
    });
    assert_eq!(
        fx,
        vec![AgentEffect::Rejected {
            node: n1(),
            lock: l.clone(),
            reason
        }]
    );
    c.settle();
    assert_eq!(
        c.status(),
        TransactionStatus::CannotServe {
            locks: vec![l],
            nodes: vec![n1()]
        }
    );
}

#[test]
fn end_removes_the_agent_from_every_node_it_used() {
    let mut c = core(1, Options::default());
    c.request(lock_id!["a"], X, &[n1(), node("n2")], Req::Any)
        .unwrap();
    c.request(lock_id!["b"], S, &[node("n3")], Req::All)
        .unwrap();
    let nodes: Vec<NodeId> = to_servers(&c.end())
        .into_iter()
        .map(|(n, r)| {
            assert_eq!(r, ServerRequest::RemoveAgent { agent: agent(1) });
            n
        })
        .collect();
    assert_eq!(nodes, vec![n1(), node("n2"), node("n3")]);
    assert!(c.end().is_empty());
    assert_eq!(c.unlock(&lock_id!["a"]), Err(RequestError::Ended));
    assert!(
        c.receive(notice(&n1(), &lock_id!["a"], 9, EntryState::Absent))
            .is_empty()
    );
}

#[test]
fn surrendered_messages_are_recorded_once() {
    let mut c = core(1, Options::default());
    hold(&mut c, &lock_id!["a"], X, 2);
    let msg = AgentMessage::Surrendered {
        by: agent(4),
        node: n1(),
        lock: lock_id!["q"],
        version: 3,
    };
    c.receive(msg.clone());
    c.receive(msg);
    c.settle();
    assert_eq!(
        c.status(),
        TransactionStatus::HaveAllLocks {
            deadlocks: vec![Deadlock {
                victim: agent(4),
                lock: lock_id!["q"],
                node: n1()
            }]
        }
    );
}

#[test]
fn the_wait_for_graph_exports_as_dot() {
    let c = two_cycle(3, 1, Options::default());
    let dot = c.wait_for_graph_dot();
    assert!(dot.contains("<n1.1.3>") && dot.contains("[x]@n1") && dot.contains("[y]@n1"));
}

mod api;
mod claims;
mod convert;
mod forwarding;
mod gate;
mod left;
mod nodes;
mod probe;

#[path = "tests_callers.rs"]
mod callers;
