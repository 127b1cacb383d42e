//! Core tests of the calls of the Erlang original's API beyond locking: changing the options,
//! watching locks and surrendering a lock to a waiter.

use super::*;
use locks_core::proto::Rejection;

#[test]
fn switching_await_nodes_off_with_a_node_down_makes_the_transaction_unservable() {
    let opts = Options {
        await_nodes: true,
        ..Options::default()
    };
    let (n2, l) = (node("n2"), lock_id!["l"]);
    let mut c = core(1, opts.clone());
    c.request(l.clone(), X, &[n1(), n2.clone()], Req::All)
        .unwrap();
    hold(&mut c, &l, X, 2);
    c.node_down(&n2);
    c.settle();
    assert_eq!(c.status(), TransactionStatus::Waiting, "it waits for n2");
    let cannot = TransactionStatus::CannotServe {
        locks: vec![l.clone()],
        nodes: vec![n2.clone()],
    };
    let fx = c.set_options(Options::default());
    assert_eq!(fx, vec![AgentEffect::StatusChanged(cannot)]);
    assert_eq!(c.options(), &Options::default());
    // Switched back on, it waits again.
    let fx = c.set_options(opts);
    assert_eq!(
        fx,
        vec![AgentEffect::StatusChanged(TransactionStatus::Waiting)]
    );
}

#[test]
fn switching_options_with_nothing_at_stake_changes_no_status() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    hold(&mut c, &l, X, 2);
    let fx = c.set_options(Options {
        abort_on_deadlock: true,
        await_nodes: true,
    });
    assert!(fx.is_empty(), "{fx:?}");
    assert!(c.status().have_all_locks());
    assert!(c.options().abort_on_deadlock);
}

fn watched(node: &NodeId, lock: &LockId, view: Arc<LockView>) -> AgentMessage {
    AgentMessage::Watched {
        node: node.clone(),
        lock: lock.clone(),
        view,
    }
}

fn watch_req(a: u64, lock: &LockId) -> ServerRequest {
    ServerRequest::Watch {
        watcher: agent(a),
        lock: lock.clone(),
    }
}

#[test]
fn a_watch_passes_views_on_in_version_order_each_once() {
    let (n2, l) = (node("n2"), lock_id!["l"]);
    let mut c = core(1, Options::default());
    let fx = c.watch(l.clone(), &[n1(), n2.clone()]).unwrap();
    assert_eq!(
        to_servers(&fx),
        vec![(n1(), watch_req(1, &l)), (n2.clone(), watch_req(1, &l))]
    );
    assert!(
        c.watch(l.clone(), &[n1()]).unwrap().is_empty(),
        "watched already"
    );
    let v3 = view(3, &[(2, X)], &[(3, X)]);
    let fx = c.receive(watched(&n1(), &l, v3.clone()));
    let first = AgentEffect::Watched {
        node: n1(),
        lock: l.clone(),
        view: v3.clone(),
    };
    assert_eq!(fx, vec![first]);
    assert_eq!(c.watched_view(&l, &n1()), Some(&v3));
    // The same version again (a repeated Watch's answer) and an older one are dropped.
    assert!(c.receive(watched(&n1(), &l, v3.clone())).is_empty());
    assert!(c.receive(watched(&n1(), &l, view(2, &[], &[]))).is_empty());
    // Versions of another node are their own.
    assert_eq!(c.receive(watched(&n2, &l, view(1, &[], &[]))).len(), 1);
    // Watching changes nothing of the transaction: 3 waiting for 2 is no knowledge of its.
    assert!(c.settle().is_empty());
    assert_eq!(c.status(), TransactionStatus::NoLocks);
    assert_eq!(c.wait_for_graph().edge_count(), 0);
}

#[test]
fn unwatch_stops_the_views_and_tells_the_servers() {
    let (n2, l) = (node("n2"), lock_id!["l"]);
    let mut c = core(1, Options::default());
    c.watch(l.clone(), &[n1(), n2.clone()]).unwrap();
    let fx = c.unwatch(&l, &[n2.clone(), node("never")]).unwrap();
    let unwatch = ServerRequest::Unwatch {
        watcher: agent(1),
        lock: l.clone(),
    };
    assert_eq!(to_servers(&fx), vec![(n2.clone(), unwatch)]);
    assert!(c.receive(watched(&n2, &l, view(5, &[], &[]))).is_empty());
    assert!(c.is_watching(&l, &n1()));
    assert!(!c.is_watching(&l, &n2));
    assert_eq!(c.receive(watched(&n1(), &l, view(5, &[], &[]))).len(), 1);
}

#[test]
fn a_watch_on_a_node_that_comes_back_is_sent_again() {
    let (n2, l) = (node("n2"), lock_id!["l"]);
    let mut c = core(1, Options::default());
    c.node_down(&n2);
    let fx = c.watch(l.clone(), std::slice::from_ref(&n2)).unwrap();
    assert!(to_servers(&fx).is_empty(), "n2 is down");
    let fx = c.node_up(&n2);
    assert_eq!(to_servers(&fx), vec![(n2.clone(), watch_req(1, &l))]);
    assert_eq!(c.receive(watched(&n2, &l, view(7, &[], &[]))).len(), 1);
    // Down again: its late views are dropped; back again: watched again.
    c.node_down(&n2);
    assert!(c.receive(watched(&n2, &l, view(8, &[], &[]))).is_empty());
    let fx = c.node_up(&n2);
    assert_eq!(to_servers(&fx), vec![(n2.clone(), watch_req(1, &l))]);
    assert_eq!(c.receive(watched(&n2, &l, view(9, &[], &[]))).len(), 1);
}

#[test]
fn a_watch_needs_a_node_and_a_running_agent() {
    let l = lock_id!["l"];
    let mut c = core(1, Options::default());
    assert_eq!(
        c.watch(l.clone(), &[]),
        Err(RequestError::NoNodes { lock: l.clone() })
    );
    c.end();
    assert_eq!(c.watch(l.clone(), &[n1()]), Err(RequestError::Ended));
}

fn surrender_to_req(a: u64, lock: &LockId, to: u64) -> ServerRequest {
    ServerRequest::SurrenderTo {
        agent: agent(a),
        lock: lock.clone(),
        to: agent(to),
    }
}

fn refused(lock: &LockId, to: u64, node: &NodeId, why: SurrenderRefusal) -> RequestError {
    RequestError::CannotSurrender {
        lock: lock.clone(),
        to: agent(to),
        node: node.clone(),
        why,
    }
}

#[test]
fn a_surrender_to_a_waiter_goes_to_the_servers_and_the_request_waits_again() {
    let l = lock_id!["l"];
    let mut c = core(1, Options::default());
    hold(&mut c, &l, X, 2);
    let fx = c.surrender_to(&l, &agent(2), &[n1()]).unwrap();
    assert_eq!(to_servers(&fx), vec![(n1(), surrender_to_req(1, &l, 2))]);
    assert_eq!(
        c.surrender_to(&l, &agent(2), &[n1()]),
        Err(refused(&l, 2, &n1(), SurrenderRefusal::Pending))
    );
    // The server applied it: the entry waits behind agent 2.
    let mut n = LockNotice {
        node: n1(),
        lock: l.clone(),
        version: 3,
        state: EntryState::Waiting(X),
        queue: Some(view(3, &[(2, X)], &[(1, X)])),
        note: Some(Box::new(Note::SurrenderedTo {
            agent: agent(1),
            to: agent(2),
            version: 2,
        })),
    };
    let fx = c.receive(AgentMessage::Notice(n.clone()));
    let done = AgentEffect::SurrenderAnswered {
        lock: l.clone(),
        node: n1(),
        to: agent(2),
        refused: None,
    };
    assert_eq!(fx, vec![done]);
    c.settle();
    assert_eq!(c.status(), TransactionStatus::Waiting);
    assert!(c.deadlocks().is_empty(), "no deadlock");
    // Granted back: held again, and answered only once.
    n.version = 4;
    n.state = EntryState::Granted(X);
    n.queue = None;
    n.note = None;
    assert!(c.receive(AgentMessage::Notice(n)).is_empty());
    c.settle();
    assert!(c.status().have_all_locks());
}

#[test]
fn a_refused_surrender_leaves_the_lock_held_and_the_request_servable() {
    let l = lock_id!["l"];
    let mut c = core(1, Options::default());
    hold(&mut c, &l, X, 2);
    c.surrender_to(&l, &agent(2), &[n1()]).unwrap();
    let fx = c.receive(AgentMessage::Rejected {
        node: n1(),
        lock: l.clone(),
        reason: Rejection::NotWaiting { to: agent(2) },
    });
    let no = AgentEffect::SurrenderAnswered {
        lock: l.clone(),
        node: n1(),
        to: agent(2),
        refused: Some(SurrenderRefusal::NotWaiting),
    };
    assert_eq!(fx, vec![no]);
    c.settle();
    assert!(c.status().have_all_locks(), "{:?}", c.status());
    // A new surrender may go out now. Once applied, the request waits to get the lock back:
    // the refusal did not count as a refusal of the lock, which would make it unservable.
    assert!(c.surrender_to(&l, &agent(2), &[n1()]).is_ok());
    c.receive(AgentMessage::Notice(LockNotice {
        node: n1(),
        lock: l.clone(),
        version: 3,
        state: EntryState::Waiting(X),
        queue: Some(view(3, &[(2, X)], &[(1, X)])),
        note: Some(Box::new(Note::SurrenderedTo {
            agent: agent(1),
            to: agent(2),
            version: 2,
        })),
    }));
    c.settle();
    assert_eq!(c.status(), TransactionStatus::Waiting);
}

#[test]
fn a_surrender_is_refused_at_once_where_the_lock_is_not_held() {
    let (n2, l) = (node("n2"), lock_id!["l"]);
    let mut c = core(1, Options::default());
    assert_eq!(
        c.surrender_to(&l, &agent(2), &[n1()]),
        Err(RequestError::NoSuchRequest(l.clone()))
    );
    c.request(l.clone(), X, &[n1(), n2.clone()], Req::Any)
        .unwrap();
    c.receive(notice(&n1(), &l, 2, EntryState::Granted(X)));
    c.receive(notice(&n2, &l, 2, EntryState::Waiting(X)));
    c.settle();
    // Held on n1 only; a node not in the request is not held either.
    assert_eq!(
        c.surrender_to(&l, &agent(2), &[n1(), n2.clone()]),
        Err(refused(&l, 2, &n2, SurrenderRefusal::NotHeld))
    );
    assert_eq!(
        c.surrender_to(&l, &agent(2), &[node("n3")]),
        Err(refused(&l, 2, &node("n3"), SurrenderRefusal::NotHeld))
    );
    assert!(c.surrender_to(&l, &agent(2), &[n1()]).is_ok());
}

#[test]
fn a_surrender_on_a_node_that_goes_down_is_answered() {
    let (n2, l) = (node("n2"), lock_id!["l"]);
    let mut c = core(1, Options::default());
    c.request(l.clone(), X, &[n1(), n2.clone()], Req::Any)
        .unwrap();
    c.receive(notice(&n2, &l, 2, EntryState::Granted(X)));
    c.settle();
    c.surrender_to(&l, &agent(2), std::slice::from_ref(&n2))
        .unwrap();
    let fx = c.node_down(&n2);
    assert!(fx.contains(&AgentEffect::SurrenderAnswered {
        lock: l.clone(),
        node: n2.clone(),
        to: agent(2),
        refused: Some(SurrenderRefusal::NodeDown),
    }));
}
