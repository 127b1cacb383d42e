//! Requests and nodes: a node down makes a request unservable (or, with `await_nodes`, waits
//! for it to return), the multi-node requirements with a dead node, and a request to a node
//! already known down.

use super::*;

/// Agent `c` asks for `["l"]` in `X` on n1 and n2 (all of them) and both grant it.
fn held_on_two_nodes(c: &mut AgentCore) -> LockId {
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1(), node("n2")], Req::All)
        .unwrap();
    c.receive(notice(&n1(), &l, 2, EntryState::Granted(X)));
    c.receive(notice(&node("n2"), &l, 2, EntryState::Granted(X)));
    c.settle();
    l
}

#[test]
fn a_node_down_makes_an_all_request_unservable() {
    let mut c = core(1, Options::default());
    let l = held_on_two_nodes(&mut c);
    assert!(c.status().have_all_locks());
    let fx = c.node_down(&node("n2"));
    let cannot = TransactionStatus::CannotServe {
        locks: vec![l.clone()],
        nodes: vec![node("n2")],
    };
    let lost = LostLock {
        lock: l.clone(),
        mode: X,
        nodes: vec![node("n2")],
        cause: LossCause::NodeDown,
    };
    assert_eq!(
        fx,
        vec![AgentEffect::Lost(lost), AgentEffect::StatusChanged(cannot)]
    );
    assert!(c.node_down(&node("n2")).is_empty(), "already down");
    assert_eq!(c.request_on(&l).unwrap().claimed, None, "told it is lost");
}

#[test]
fn await_nodes_waits_and_asks_again_when_the_node_returns() {
    let opts = Options {
        await_nodes: true,
        ..Options::default()
    };
    let mut c = core(1, opts);
    let l = held_on_two_nodes(&mut c);
    c.node_down(&node("n2"));
    assert_eq!(c.status(), TransactionStatus::Waiting);
    // A late notice from the dead server does not count.
    c.receive(notice(&node("n2"), &l, 3, EntryState::Granted(X)));
    c.settle();
    assert_eq!(c.status(), TransactionStatus::Waiting);
    let fx = c.node_up(&node("n2"));
    assert_eq!(to_servers(&fx), vec![(node("n2"), lock_req(1, &l, X))]);
    // The restarted server counts versions anew.
    c.receive(notice(&node("n2"), &l, 1, EntryState::Granted(X)));
    c.settle();
    assert!(c.status().have_all_locks());
}

#[test]
fn erlang_majority_any_and_all_alive_with_a_dead_node() {
    let (n2, n3) = (node("n2"), node("n3"));
    let l = lock_id!["l"];
    for (req, held_after_one_grant) in [
        (Req::Majority, false),
        (Req::Any, true),
        (Req::AllAlive, false),
        (Req::MajorityAlive, false),
    ] {
        let mut c = core(1, Options::default());
        c.node_down(&n3);
        c.request(l.clone(), X, &[n1(), n2.clone(), n3.clone()], req)
            .unwrap_or_else(|e| panic!("{req}: {e}"));
        c.receive(notice(&n1(), &l, 2, EntryState::Granted(X)));
        c.settle();
        assert_eq!(c.status().have_all_locks(), held_after_one_grant, "{req}");
        c.receive(notice(&n2, &l, 2, EntryState::Granted(X)));
        c.settle();
        assert!(c.status().have_all_locks(), "{req}");
        // Losing a second node: a majority of three is lost; `any`, `all_alive` and
        // `majority_alive` (1 of 1 live node) still hold.
        c.node_down(&n2);
        let expected = match req {
            Req::Majority => TransactionStatus::CannotServe {
                locks: vec![l.clone()],
                nodes: vec![n2.clone(), n3.clone()],
            },
            _ => TransactionStatus::HaveAllLocks { deadlocks: vec![] },
        };
        assert_eq!(c.status(), expected, "{req}");
    }
}

#[test]
fn a_request_to_a_node_known_down_fails_at_once_when_it_cannot_be_met() {
    let (n2, l) = (node("n2"), lock_id!["l"]);
    let mut c = core(1, Options::default());
    c.node_down(&n2);
    assert_eq!(
        c.request(l.clone(), X, &[n1(), n2.clone()], Req::All),
        Err(RequestError::NodesDown {
            lock: l.clone(),
            req: Req::All,
            nodes: vec![n2.clone()]
        })
    );
    assert_eq!(c.status(), TransactionStatus::NoLocks);
    // Any can still be met; it is sent to the live node only.
    let fx = c
        .request(l.clone(), X, &[n1(), n2.clone()], Req::Any)
        .unwrap();
    assert_eq!(to_servers(&fx), vec![(n1(), lock_req(1, &l, X))]);
    // With await_nodes the request waits for the node.
    let mut c = core(
        1,
        Options {
            await_nodes: true,
            ..Options::default()
        },
    );
    c.node_down(&n2);
    let fx = c
        .request(l.clone(), X, std::slice::from_ref(&n2), Req::All)
        .unwrap();
    assert!(to_servers(&fx).is_empty());
    assert_eq!(to_servers(&c.node_up(&n2)), vec![(n2, lock_req(1, &l, X))]);
}

#[test]
fn a_lease_not_valid_is_a_node_down_for_its_cause_and_a_valid_one_changes_nothing() {
    use crate::core::agent::Lease;
    let lost_for = |cause| LostLock {
        lock: lock_id!["l"],
        mode: X,
        nodes: vec![node("n2")],
        cause,
    };
    let mut c = core(1, Options::default());
    let l = held_on_two_nodes(&mut c);
    assert!(c.check_leases(&n1(), |_| Lease::Valid).is_empty());
    assert!(c.status().have_all_locks());
    let asked = std::cell::RefCell::new(Vec::new());
    let fx = c.check_leases(&n1(), |n| {
        asked.borrow_mut().push(n.clone());
        Lease::RanOut
    });
    assert_eq!(
        asked.into_inner(),
        vec![node("n2")],
        "its own node needs no lease"
    );
    assert!(matches!(
        fx.as_slice(),
        [AgentEffect::Lost(lost), AgentEffect::StatusChanged(TransactionStatus::CannotServe { .. })]
            if *lost == lost_for(LossCause::LeaseExpired)
    ));
    assert!(
        c.check_leases(&n1(), |_| Lease::Ended).is_empty(),
        "a node already down is not asked about again"
    );
    assert_eq!(c.request_on(&l).unwrap().claimed, None);

    let mut c = core(2, Options::default());
    held_on_two_nodes(&mut c);
    let fx = c.check_leases(&n1(), |_| Lease::Ended);
    assert!(matches!(
        fx.first(),
        Some(AgentEffect::Lost(lost)) if *lost == lost_for(LossCause::NodeDown)
    ));
}
