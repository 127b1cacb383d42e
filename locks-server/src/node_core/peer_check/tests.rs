use super::*;
use locks_core::proto::{
    EntryState, IntrospectRequest, LockView, Probe, ProbeEdge, Rejection, ServerRequest,
};
use locks_core::{LockId, MemberId, Mode};
use proptest::prelude::*;
use std::sync::Arc;

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn agent(name: &str, serial: u64) -> AgentId {
    AgentId::new(node(name), 1, serial)
}

fn lock() -> LockId {
    LockId::new(["db", "x"]).unwrap()
}

const NOW: u64 = 1_000_000;

fn admits(v: u64) -> bool {
    v <= NOW
}

fn to_agent(to: AgentId, msg: AgentMessage) -> Message {
    Message::Agent { to, msg }
}

fn notice(server: &str, version: u64) -> AgentMessage {
    AgentMessage::Notice(LockNotice {
        node: node(server),
        lock: lock(),
        version,
        state: EntryState::Granted(Mode::X),
        queue: None,
        note: None,
    })
}

/// A probe round a, b, c (victim c): the edge `i` is `[a, b, c][i]` waiting for the next.
fn probe(next: u32, refuted: bool) -> Probe {
    let names = ["a", "b", "c"];
    let edges = (0..3)
        .map(|i| ProbeEdge {
            waiter: agent(names[i], 1),
            blocker: agent(names[(i + 1) % 3], 1),
            lock: lock(),
            node: node("a"),
            version: 7,
        })
        .collect();
    Probe {
        edges,
        next,
        epoch: 0,
        refuted,
    }
}

#[test]
fn a_lock_server_speaks_only_for_itself() {
    let me = agent("a", 1);
    let from_b = |msg| check(&node("b"), &to_agent(me.clone(), msg), admits);
    assert_eq!(from_b(notice("b", 5)), Ok(()));
    assert_eq!(from_b(notice("c", 5)), Err(PeerFault::ForeignServer));
    let rejected = |server: &str| AgentMessage::Rejected {
        node: node(server),
        lock: lock(),
        reason: Rejection::ModeNotInTable(Mode::X),
    };
    assert_eq!(from_b(rejected("b")), Ok(()));
    assert_eq!(from_b(rejected("a")), Err(PeerFault::ForeignServer));
    let watched = |server: &str| AgentMessage::Watched {
        node: node(server),
        lock: lock(),
        view: Arc::new(LockView::default()),
    };
    assert_eq!(from_b(watched("b")), Ok(()));
    assert_eq!(from_b(watched("c")), Err(PeerFault::ForeignServer));
    let raised = |server: &str, floor| AgentMessage::Raised {
        node: node(server),
        lock: lock(),
        floor,
    };
    assert_eq!(from_b(raised("b", NOW)), Ok(()));
    assert_eq!(from_b(raised("c", NOW)), Err(PeerFault::ForeignServer));
    assert_eq!(from_b(raised("b", NOW + 1)), Err(PeerFault::FutureVersion));
}

#[test]
fn every_notice_of_a_run_must_be_the_senders_own_and_within_the_ceiling() {
    let run = |notices: Vec<AgentMessage>| Message::Notices {
        to: agent("a", 1),
        notices: notices
            .into_iter()
            .map(|n| match n {
                AgentMessage::Notice(n) => n,
                other => panic!("not a notice: {other:?}"),
            })
            .collect(),
    };
    let from_b = |msg: Message| check(&node("b"), &msg, admits);
    assert_eq!(from_b(run(vec![notice("b", 5), notice("b", 6)])), Ok(()));
    assert_eq!(
        from_b(run(vec![notice("b", 5), notice("c", 6)])),
        Err(PeerFault::ForeignServer)
    );
    assert_eq!(
        from_b(run(vec![notice("b", 5), notice("b", NOW + 1)])),
        Err(PeerFault::FutureVersion)
    );
}

#[test]
fn a_raise_is_asked_only_for_an_agent_of_the_sender_and_only_up_to_the_ceiling() {
    let raise = |by: AgentId, floor| {
        Message::Server(ServerRequest::RaiseVersions {
            agent: by,
            lock: lock(),
            floor,
        })
    };
    assert_eq!(
        check(&node("b"), &raise(agent("b", 1), NOW), admits),
        Ok(())
    );
    assert_eq!(
        check(&node("b"), &raise(agent("c", 1), NOW), admits),
        Err(PeerFault::ForeignAgent)
    );
    // Versions only grow: one absurd floor would spoil every later version of the node.
    assert_eq!(
        check(&node("b"), &raise(agent("b", 1), u64::MAX), admits),
        Err(PeerFault::FutureVersion)
    );
}

#[test]
fn an_agent_speaks_only_for_agents_of_its_node() {
    let me = agent("a", 1);
    let from_b = |msg| check(&node("b"), &to_agent(me.clone(), msg), admits);
    let forward = |by: AgentId| AgentMessage::Forward {
        from: by,
        node: node("c"),
        lock: lock(),
        view: Arc::new(LockView::default()),
    };
    assert_eq!(from_b(forward(agent("b", 3))), Ok(()));
    assert_eq!(from_b(forward(agent("c", 3))), Err(PeerFault::ForeignAgent));
    let surrendered = |by: AgentId| AgentMessage::Surrendered {
        by,
        node: node("c"),
        lock: lock(),
        version: 3,
    };
    assert_eq!(from_b(surrendered(agent("b", 3))), Ok(()));
    assert_eq!(
        from_b(surrendered(agent("a", 3))),
        Err(PeerFault::ForeignAgent)
    );
    let unlock = |by: AgentId| {
        Message::Server(ServerRequest::Unlock {
            agent: by,
            lock: lock(),
        })
    };
    assert_eq!(check(&node("b"), &unlock(agent("b", 1)), admits), Ok(()));
    assert_eq!(
        check(&node("b"), &unlock(agent("c", 1)), admits),
        Err(PeerFault::ForeignAgent)
    );
    let member = |of: &str| Message::Member {
        to: MemberId::new(node("a"), 1, 1),
        from: MemberId::new(node(of), 1, 2),
        payload: vec![],
    };
    assert_eq!(check(&node("b"), &member("b"), admits), Ok(()));
    assert_eq!(
        check(&node("b"), &member("c"), admits),
        Err(PeerFault::ForeignMember)
    );
    let ask = Message::Introspect(IntrospectRequest {
        id: 1,
        max_locks: 1,
        max_bytes: 1,
    });
    assert_eq!(check(&node("b"), &ask, admits), Ok(()));
}

#[test]
fn a_probe_travels_only_along_its_edges() {
    let at = |from: &str, to: AgentId, p: Probe| {
        check(&node(from), &to_agent(to, AgentMessage::Probe(p)), admits)
    };
    // The victim c starts it: to a, the waiter of edge 0.
    assert_eq!(at("c", agent("a", 1), probe(0, false)), Ok(()));
    // a confirmed edge 0 and passes it to b.
    assert_eq!(at("a", agent("b", 1), probe(1, false)), Ok(()));
    // Anybody else passing it on, or to anybody else, is refused.
    assert_eq!(
        at("b", agent("b", 1), probe(1, false)),
        Err(PeerFault::ForeignEdge)
    );
    assert_eq!(
        at("a", agent("c", 1), probe(1, false)),
        Err(PeerFault::ForeignEdge)
    );
    // b refutes edge 1 and sends it back to the victim c; only b may.
    assert_eq!(at("b", agent("c", 1), probe(1, true)), Ok(()));
    assert_eq!(
        at("a", agent("c", 1), probe(1, true)),
        Err(PeerFault::ForeignEdge)
    );
    assert_eq!(
        at("b", agent("a", 1), probe(1, true)),
        Err(PeerFault::ForeignEdge)
    );
    let mut broken = probe(0, false);
    broken.edges.pop();
    assert_eq!(
        at("c", agent("a", 1), broken),
        Err(PeerFault::MalformedProbe)
    );
    assert_eq!(
        at("c", agent("a", 1), probe(3, false)),
        Err(PeerFault::MalformedProbe)
    );
}

#[test]
fn versions_beyond_the_ceiling_are_refused_wherever_they_are() {
    let me = agent("a", 1);
    let from_b = |msg| check(&node("b"), &to_agent(me.clone(), msg), admits);
    assert_eq!(from_b(notice("b", NOW)), Ok(()));
    assert_eq!(from_b(notice("b", u64::MAX)), Err(PeerFault::FutureVersion));
    let AgentMessage::Notice(mut n) = notice("b", 5) else {
        unreachable!()
    };
    n.queue = Some(Arc::new(LockView {
        version: NOW + 1,
        ..LockView::default()
    }));
    assert_eq!(
        from_b(AgentMessage::Notice(n.clone())),
        Err(PeerFault::FutureVersion)
    );
    n.queue = None;
    n.note = Some(Box::new(Note::NotSurrendered { version: NOW + 1 }));
    assert_eq!(
        from_b(AgentMessage::Notice(n)),
        Err(PeerFault::FutureVersion)
    );
    let mut p = probe(1, false);
    p.edges[2].version = NOW + 1;
    assert_eq!(
        check(
            &node("a"),
            &to_agent(agent("b", 1), AgentMessage::Probe(p)),
            admits
        ),
        Err(PeerFault::FutureVersion)
    );
}

#[test]
fn the_ceiling_is_above_what_a_node_started_now_hands_out_and_below_absurd_versions() {
    let now = SystemTime::now();
    let base = now.duration_since(UNIX_EPOCH).unwrap().as_micros() as u64 * 1024;
    let ceiling = version_ceiling(now);
    assert!(ceiling > base + 1_000_000_000);
    assert!(ceiling < 1 << 62);
    let c = VersionCeiling::default();
    assert!(c.admits(base));
    assert!(!c.admits(u64::MAX));
    assert!(c.admits(base));
}

fn any_node() -> impl Strategy<Value = NodeId> {
    prop_oneof![Just(node("a")), Just(node("b")), Just(node("c"))]
}

fn any_agent() -> impl Strategy<Value = AgentId> {
    (any_node(), 1u64..4).prop_map(|(n, s)| AgentId::new(n, 1, s))
}

/// A well-formed agent message, with the node it claims to come from.
fn any_agent_message() -> impl Strategy<Value = (AgentMessage, NodeId)> {
    let view = (0u64..NOW).prop_map(|version| {
        Arc::new(LockView {
            version,
            ..LockView::default()
        })
    });
    prop_oneof![
        (any_node(), 0u64..NOW).prop_map(|(n, v)| {
            let AgentMessage::Notice(mut notice) = notice("a", v) else {
                unreachable!()
            };
            notice.node = n.clone();
            (AgentMessage::Notice(notice), n)
        }),
        any_node().prop_map(|n| (
            AgentMessage::Rejected {
                node: n.clone(),
                lock: lock(),
                reason: Rejection::NotHeld
            },
            n
        )),
        (any_node(), view.clone()).prop_map(|(n, view)| (
            AgentMessage::Watched {
                node: n.clone(),
                lock: lock(),
                view
            },
            n
        )),
        (any_agent(), any_node(), view).prop_map(|(by, n, view)| {
            let claimed = by.node().clone();
            (
                AgentMessage::Forward {
                    from: by,
                    node: n,
                    lock: lock(),
                    view,
                },
                claimed,
            )
        }),
        (any_agent(), any_node(), 0u64..NOW).prop_map(|(by, n, version)| {
            let claimed = by.node().clone();
            (
                AgentMessage::Surrendered {
                    by,
                    node: n,
                    lock: lock(),
                    version,
                },
                claimed,
            )
        }),
    ]
}

proptest! {
    /// A message that names a sender on another node than the link's is refused, whatever it
    /// says; one that names the link's own node is admitted.
    #[test]
    fn a_message_is_admitted_exactly_when_it_names_its_own_sender(
        (msg, claimed) in any_agent_message(),
        from in any_node(),
        to in any_agent(),
    ) {
        let verdict = check(&from, &to_agent(to, msg), admits);
        prop_assert_eq!(verdict.is_ok(), claimed == from);
    }
}
