//! The gate (`gate.rs`): an `All` request over several nodes that waits on its first node
//! leaves the others until it holds it; an uncontended one, or one that holds its gate, never
//! leaves anything.

use super::*;

fn n2() -> NodeId {
    node("n2")
}

/// The requests of `effects` to `node`, by kind (`Lock`, `Unlock`, anything else).
fn sent_to(effects: &[AgentEffect], node: &NodeId) -> Vec<&'static str> {
    to_servers(effects)
        .into_iter()
        .filter(|(n, _)| n == node)
        .map(|(_, r)| match r {
            ServerRequest::Lock { .. } => "lock",
            ServerRequest::TryLock { .. } => "try",
            ServerRequest::Unlock { .. } => "unlock",
            _ => "other",
        })
        .collect()
}

fn on(node: &NodeId, lock: &LockId, version: u64, state: EntryState) -> AgentMessage {
    notice(node, lock, version, state)
}

fn queued(node: &NodeId, lock: &LockId, version: u64, holder: u64, me: u64) -> AgentMessage {
    AgentMessage::Notice(LockNotice {
        node: node.clone(),
        lock: lock.clone(),
        version,
        state: EntryState::Waiting(X),
        queue: Some(view(version, &[(holder, X)], &[(me, X)])),
        note: None,
    })
}

#[test]
fn an_uncontended_request_is_sent_everywhere_at_once_and_never_leaves() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    let out = c.request(l.clone(), X, &[n1(), n2()], Req::All).unwrap();
    assert_eq!(sent_to(&out, &n1()), ["lock"]);
    assert_eq!(sent_to(&out, &n2()), ["try"]);
    c.receive(on(&n2(), &l, 5, EntryState::Granted(X)));
    c.receive(on(&n1(), &l, 3, EntryState::Granted(X)));
    let out = c.settle();
    assert!(to_servers(&out).is_empty());
    assert!(c.status().have_all_locks());
}

#[test]
fn a_request_that_holds_its_gate_keeps_its_other_copies() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1(), n2()], Req::All).unwrap();
    c.receive(on(&n1(), &l, 3, EntryState::Granted(X)));
    c.receive(queued(&n2(), &l, 5, 2, 1));
    let out = c.settle();
    assert!(to_servers(&out).is_empty(), "{out:?}");
    assert_eq!(c.status(), TransactionStatus::Waiting);
}

#[test]
fn a_request_waiting_on_its_gate_leaves_the_others_and_asks_again_once_it_holds_it() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1(), n2()], Req::All).unwrap();
    // Granted on n2 first: nothing happens until the gate answers.
    c.receive(on(&n2(), &l, 5, EntryState::Granted(X)));
    let out = c.settle();
    assert!(
        to_servers(&out).is_empty() && to_agents(&out).is_empty(),
        "{out:?}"
    );
    // Queued on the gate behind agent 2: the copy on n2 is given up.
    c.receive(queued(&n1(), &l, 3, 2, 1));
    let out = c.settle();
    assert_eq!(sent_to(&out, &n2()), ["unlock"]);
    assert!(sent_to(&out, &n1()).is_empty());
    c.receive(AgentMessage::Notice(LockNotice {
        node: n2(),
        lock: l.clone(),
        version: 6,
        state: EntryState::Absent,
        queue: None,
        note: Some(Box::new(Note::Unlocked)),
    }));
    let out = c.settle();
    assert!(to_servers(&out).is_empty(), "{out:?}");
    gate_granted_then_n2(&mut c, &l, 4);
}

/// The gate (n1) grants `l` at `version`: the lock is asked for again on n2, where the agent
/// has no entry until then, and held once n2 grants it.
fn gate_granted_then_n2(c: &mut AgentCore, l: &LockId, version: u64) {
    c.receive(on(&n1(), l, version, EntryState::Granted(X)));
    let out = c.settle();
    assert_eq!(sent_to(&out, &n2()), ["lock"]);
    assert!(!c.left_copy(l, &n2()));
    assert_eq!(c.status(), TransactionStatus::Waiting);
    c.receive(on(&n2(), l, 7, EntryState::Granted(X)));
    c.settle();
    assert!(c.status().have_all_locks());
}

#[test]
fn unlocking_a_request_that_left_copies_unlocks_only_the_others() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1(), n2()], Req::All).unwrap();
    c.receive(queued(&n2(), &l, 5, 3, 1));
    c.receive(queued(&n1(), &l, 3, 2, 1));
    let out = c.settle();
    assert_eq!(sent_to(&out, &n2()), ["unlock"]);
    let out = c.unlock(&l).unwrap();
    assert_eq!(sent_to(&out, &n1()), ["unlock"]);
    assert!(sent_to(&out, &n2()).is_empty(), "{out:?}");
}

#[test]
fn majority_and_requests_with_related_locks_never_leave() {
    let l = lock_id!["l"];
    let mut majority = core(1, Options::default());
    majority
        .request(l.clone(), X, &[n1(), n2(), node("n3")], Req::Majority)
        .unwrap();
    majority.receive(queued(&n1(), &l, 3, 2, 1));
    majority.receive(on(&n2(), &l, 5, EntryState::Granted(X)));
    assert!(to_servers(&majority.settle()).is_empty());

    let mut related = core(1, Options::default());
    related
        .request(lock_id!["l", 1], X, &[n2()], Req::All)
        .unwrap();
    related
        .request(l.clone(), X, &[n1(), n2()], Req::All)
        .unwrap();
    related.receive(queued(&n1(), &l, 3, 2, 1));
    related.receive(on(&n2(), &l, 5, EntryState::Granted(X)));
    let out = related.settle();
    assert!(!sent_to(&out, &n2()).contains(&"unlock"), "{out:?}");
}

fn busy(node: &NodeId, lock: &LockId) -> AgentMessage {
    AgentMessage::Rejected {
        node: node.clone(),
        lock: lock.clone(),
        reason: Rejection::Busy,
    }
}

fn not_held(node: &NodeId, lock: &LockId) -> AgentMessage {
    AgentMessage::Rejected {
        node: node.clone(),
        lock: lock.clone(),
        reason: Rejection::NotHeld,
    }
}

fn client_rejections(effects: &[AgentEffect]) -> usize {
    effects
        .iter()
        .filter(|e| matches!(e, AgentEffect::Rejected { .. }))
        .count()
}

#[test]
fn a_busy_copy_is_asked_for_plainly_once_the_gate_is_held() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1(), n2()], Req::All).unwrap();
    let out = c.receive(busy(&n2(), &l));
    assert_eq!(client_rejections(&out), 0, "{out:?}");
    assert!(c.left_copy(&l, &n2()));
    gate_granted_then_n2(&mut c, &l, 3);
}

#[test]
fn a_request_waiting_on_its_gate_unlocks_no_busy_copy() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    let n3 = node("n3");
    c.request(l.clone(), X, &[n1(), n2(), n3.clone()], Req::All)
        .unwrap();
    c.receive(busy(&n2(), &l));
    c.receive(on(&n3, &l, 4, EntryState::Granted(X)));
    c.receive(queued(&n1(), &l, 3, 2, 1));
    let out = c.settle();
    assert!(sent_to(&out, &n2()).is_empty(), "{out:?}");
    assert_eq!(sent_to(&out, &n3), ["unlock"]);
    c.receive(on(&n1(), &l, 5, EntryState::Granted(X)));
    let out = c.settle();
    assert_eq!(sent_to(&out, &n2()), ["lock"]);
    assert_eq!(sent_to(&out, &n3), ["lock"]);
}

#[test]
fn a_copy_left_before_its_try_was_answered_tells_the_client_nothing() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1(), n2()], Req::All).unwrap();
    // Queued on the gate before n2 answered: n2 is unlocked, then answers the try and the
    // unlock, in that order.
    c.receive(queued(&n1(), &l, 3, 2, 1));
    let out = c.settle();
    assert_eq!(sent_to(&out, &n2()), ["unlock"]);
    let mut out = c.receive(busy(&n2(), &l));
    out.extend(c.receive(not_held(&n2(), &l)));
    out.extend(c.settle());
    assert_eq!(client_rejections(&out), 0, "{out:?}");
    c.receive(on(&n1(), &l, 5, EntryState::Granted(X)));
    let out = c.settle();
    assert_eq!(sent_to(&out, &n2()), ["lock"]);
}

#[test]
fn the_answer_to_an_overtaken_try_makes_no_copy_busy() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1(), n2()], Req::All).unwrap();
    // Withdrawn and asked for again before n2 answered the first try.
    c.unlock(&l).unwrap();
    c.request(l.clone(), X, &[n1(), n2()], Req::All).unwrap();
    c.receive(busy(&n2(), &l));
    assert!(!c.left_copy(&l, &n2()), "the first try's answer");
    c.receive(not_held(&n2(), &l));
    c.receive(busy(&n2(), &l));
    assert!(c.left_copy(&l, &n2()), "the second try's answer");

    // Made stronger before n2 answered: the plain `Lock` overtakes the try.
    let mut c = core(1, Options::default());
    c.request(l.clone(), S, &[n1(), n2()], Req::All).unwrap();
    let out = c.request(l.clone(), X, &[n1(), n2()], Req::All).unwrap();
    assert_eq!(sent_to(&out, &n2()), ["lock"]);
    c.receive(busy(&n2(), &l));
    assert!(!c.left_copy(&l, &n2()));
}

#[test]
fn a_gate_that_moves_onto_a_busy_copy_is_asked_plainly() {
    let options = Options {
        await_nodes: true,
        ..Options::default()
    };
    let mut c = core(1, options);
    let l = lock_id!["l"];
    let n3 = node("n3");
    c.request(l.clone(), X, &[n1(), n2(), n3.clone()], Req::All)
        .unwrap();
    c.receive(busy(&n2(), &l));
    c.receive(on(&n3, &l, 4, EntryState::Granted(X)));
    c.settle();
    // The gate goes down before it answered: n2, the next, has no entry of this agent.
    let mut out = c.node_down(&n1());
    out.extend(c.settle());
    assert_eq!(sent_to(&out, &n2()), ["lock"]);
    assert!(!c.left_copy(&l, &n2()));
}
