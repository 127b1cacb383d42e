//! The router's side of the cluster: a message (or a run of notices) from a peer to an agent
//! that does not run here is answered with `RemoveAgent` to the peer's lock server, once; a cluster link whose connection
//! queue is full keeps every envelope, in order; a deadlock probe for an agent that is gone goes
//! back to its victim, refuted; a peer speaks only for its own agents and members; a link's
//! lease says whether it ran out or its link ended.

mod common;

use common::net::{Captured, id};
use locks_core::proto::{AgentMessage, Envelope, Message, Rejection, ServerRequest};
use locks_core::{AgentId, LockId, NodeId};
use locks_server::RouteError;
use locks_server::embed::{LeaseCell, RemoteLink, Router};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn to_agent(to: AgentId) -> Envelope {
    Envelope::new(Message::Agent {
        to,
        msg: AgentMessage::Rejected {
            node: id("a"),
            lock: LockId::from(["l"]),
            reason: Rejection::NotHeld,
        },
    })
}

#[test]
fn a_message_for_an_unknown_local_agent_makes_the_sender_remove_it() {
    let router = Router::new(id("b"));
    let link = Arc::new(Captured::default());
    router.add_remote(id("a"), link.clone());
    let gone = AgentId::new(id("b"), 7, 3);
    let result = router.deliver_from(&id("a"), to_agent(gone.clone()));
    assert_eq!(result, Err(RouteError::UnknownAgent(gone.clone())));
    assert_eq!(
        *link.0.lock().unwrap(),
        [Envelope::new(Message::Server(ServerRequest::RemoveAgent {
            agent: gone
        }))]
    );
}

#[test]
fn a_run_of_notices_for_an_unknown_local_agent_makes_the_sender_remove_it_once() {
    use locks_core::Mode;
    use locks_core::proto::{EntryState, LockNotice};
    let router = Router::new(id("b"));
    let link = Arc::new(Captured::default());
    router.add_remote(id("a"), link.clone());
    let gone = AgentId::new(id("b"), 7, 3);
    let notice = |keys: &[&str]| LockNotice {
        node: id("a"),
        lock: LockId::new(keys.iter().copied()).unwrap(),
        version: 2,
        state: EntryState::Granted(Mode::IX),
        queue: None,
        note: None,
    };
    let run = Envelope::new(Message::Notices {
        to: gone.clone(),
        notices: vec![notice(&["l"]), notice(&["l", "m"])],
    });
    let result = router.deliver_from(&id("a"), run);
    assert_eq!(result, Err(RouteError::UnknownAgent(gone.clone())));
    assert_eq!(
        *link.0.lock().unwrap(),
        [Envelope::new(Message::Server(ServerRequest::RemoveAgent {
            agent: gone
        }))]
    );
}

#[test]
fn a_message_for_an_agent_of_another_node_is_not_answered() {
    // Misrouted: the agent lives on a third node, which this node must not speak for.
    let router = Router::new(id("b"));
    let link = Arc::new(Captured::default());
    router.add_remote(id("a"), link.clone());
    let elsewhere = AgentId::new(id("c"), 1, 1);
    let result = router.deliver_from(&id("a"), to_agent(elsewhere.clone()));
    assert_eq!(result, Err(RouteError::UnknownAgent(elsewhere)));
    assert!(link.0.lock().unwrap().is_empty());
}

/// A connection whose queue holds a single frame: everything sent through the cluster link
/// arrives, in order, by way of the overflow queue.
#[tokio::test]
async fn a_full_connection_queue_neither_drops_nor_reorders() {
    use locks_server::transport::ClusterLink;
    use locks_server::transport::net::{Listener, NetConfig, connect};

    let mut tiny = NetConfig::new(id("a"), "cookie");
    tiny.outgoing_capacity = 1;
    let mut listener = Listener::bind(
        "127.0.0.1:0".parse().unwrap(),
        NetConfig::new(id("b"), "cookie"),
        Arc::new(|_: &NodeId| false),
    )
    .await
    .unwrap();
    let conn = connect(listener.local_addr(), &tiny, |_: &NodeId| false)
        .await
        .unwrap();
    let mut receiver = listener.accept().await.unwrap().start();
    let link = ClusterLink::new(id("b"), conn.start().sender);
    tokio::spawn(link.clone().flush());

    const N: u64 = 2_000;
    let envelope = |i: u64| {
        Envelope::new(Message::Server(ServerRequest::RemoveAgent {
            agent: AgentId::new(id("a"), 1, i),
        }))
    };
    for i in 0..N {
        RemoteLink::send(&*link, envelope(i)).unwrap();
    }
    for i in 0..N {
        let got =
            tokio::time::timeout(std::time::Duration::from_secs(20), receiver.incoming.recv())
                .await
                .expect("bounded")
                .expect("connection up");
        assert_eq!(got, envelope(i));
    }
    link.close();
    assert!(RemoteLink::send(&*link, envelope(N)).is_err(), "closed");
}

#[test]
fn a_probe_for_an_agent_that_is_gone_goes_back_to_its_victim_refuted() {
    use locks_core::proto::{Probe, ProbeEdge};
    let router = Router::new(id("b"));
    let link = Arc::new(Captured::default());
    router.add_remote(id("a"), link.clone());
    let gone = AgentId::new(id("b"), 7, 3);
    let victim = AgentId::new(id("a"), 1, 9);
    let edge = |waiter: &AgentId, blocker: &AgentId| ProbeEdge {
        waiter: waiter.clone(),
        blocker: blocker.clone(),
        lock: LockId::from(["l"]),
        node: id("a"),
        version: 4,
    };
    let probe = Probe {
        edges: vec![edge(&gone, &victim), edge(&victim, &gone)],
        next: 0,
        refuted: false,
        epoch: 1,
    };
    let envelope = Envelope::new(Message::Agent {
        to: gone.clone(),
        msg: AgentMessage::Probe(probe.clone()),
    });
    let result = router.deliver_from(&id("a"), envelope);
    assert_eq!(result, Err(RouteError::UnknownAgent(gone.clone())));
    let refuted = Probe {
        refuted: true,
        ..probe
    };
    assert_eq!(
        *link.0.lock().unwrap(),
        [
            Envelope::new(Message::Agent {
                to: victim,
                msg: AgentMessage::Probe(refuted),
            }),
            Envelope::new(Message::Server(ServerRequest::RemoveAgent { agent: gone })),
        ]
    );
}

#[test]
fn a_peer_speaks_only_for_its_own_agents_and_members() {
    use locks_core::MemberId;
    let router = Router::new(id("b"));
    let unlock = |agent: AgentId| {
        Envelope::new(Message::Server(ServerRequest::Unlock {
            agent,
            lock: LockId::from(["l"]),
        }))
    };
    // An Unlock for an agent of node c, sent by node a, would release c's lock here.
    let forged = router.deliver_from(&id("a"), unlock(AgentId::new(id("c"), 1, 1)));
    assert!(
        matches!(&forged, Err(RouteError::Refused { from, .. }) if *from == id("a")),
        "{forged:?}"
    );
    // a's own agent goes on to the lock server (which this bare router does not have).
    let own = router.deliver_from(&id("a"), unlock(AgentId::new(id("a"), 1, 1)));
    assert_eq!(own, Err(RouteError::ServerStopped));
    // A member message must come from a member of the sending node.
    let member = Envelope::new(Message::Member {
        to: MemberId::new(id("b"), 1, 1),
        from: MemberId::new(id("c"), 1, 1),
        payload: vec![],
    });
    assert!(matches!(
        router.deliver_from(&id("a"), member),
        Err(RouteError::Refused { .. })
    ));
}

#[test]
fn every_lock_server_request_for_an_agent_of_another_node_is_refused() {
    use locks_core::Mode;
    let router = Router::new(id("b"));
    let (lock, c) = (LockId::from(["l"]), AgentId::new(id("c"), 1, 1));
    let requests = [
        ServerRequest::Lock {
            agent: c.clone(),
            lock: lock.clone(),
            mode: Mode::X,
        },
        ServerRequest::Convert {
            agent: c.clone(),
            lock: lock.clone(),
            mode: Mode::S,
        },
        ServerRequest::Unlock {
            agent: c.clone(),
            lock: lock.clone(),
        },
        ServerRequest::Surrender {
            agent: c.clone(),
            lock: lock.clone(),
            version: 1,
            waits: vec![],
        },
        ServerRequest::SurrenderTo {
            agent: c.clone(),
            lock: lock.clone(),
            to: AgentId::new(id("a"), 1, 1),
        },
        ServerRequest::RemoveAgent { agent: c.clone() },
        ServerRequest::Watch {
            watcher: c.clone(),
            lock: lock.clone(),
        },
        ServerRequest::Unwatch {
            watcher: c.clone(),
            lock: lock.clone(),
        },
    ];
    for request in requests {
        let what = format!("{request:?}");
        let result = router.deliver_from(&id("a"), Envelope::new(Message::Server(request)));
        assert!(
            matches!(&result, Err(RouteError::Refused { from, .. }) if *from == id("a")),
            "{what}: {result:?}"
        );
    }
}

/// An agent that finds a lease gone reports its locks there lost with the router's answer:
/// a lease that ran out, or a link that ended (then the node down is on its way). The link ends
/// its lease before the router forgets the node, so "still reachable" is not the question: it
/// made a disconnected holder report an expired lease (a flaky end-to-end test,
/// `locks-agent/tests/lost_locks.rs`, caught it).
#[test]
fn a_lease_ended_with_its_link_did_not_run_out_and_one_past_its_time_did() {
    let router = Router::new(id("b"));
    let ended = Arc::new(LeaseCell::new(Instant::now() + Duration::from_secs(60)));
    router.add_remote(id("a"), Arc::new(Captured::default()));
    router.set_lease(id("a"), ended.clone());
    assert!(router.lease_valid(&id("a")));
    // The link to a ends; the router has not forgotten a yet.
    ended.end();
    assert!(router.is_reachable(&id("a")));
    assert!(!router.lease_valid(&id("a")));
    assert!(!router.lease_ran_out(&id("a")));

    let past = Arc::new(LeaseCell::new(Instant::now()));
    router.add_remote(id("c"), Arc::new(Captured::default()));
    router.set_lease(id("c"), past.clone());
    assert!(!router.lease_valid(&id("c")), "its time has passed");
    assert!(router.lease_ran_out(&id("c")));
    // Its link ending afterwards does not change how it ended.
    past.end();
    assert!(router.lease_ran_out(&id("c")));
    // Forgotten: no lease, and no lease that ran out.
    router.remove_remote(&id("a"));
    assert!(!router.lease_valid(&id("a")) && !router.lease_ran_out(&id("a")));
}
