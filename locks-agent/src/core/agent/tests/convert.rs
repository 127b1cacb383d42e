//! `convert` on requests in every state, and what a refused conversion does.

use super::*;

fn convert_req(lock: &LockId, mode: Mode) -> ServerRequest {
    ServerRequest::Convert {
        agent: agent(1),
        lock: lock.clone(),
        mode,
    }
}

#[test]
fn a_request_converting_up_is_converted_down_on_every_node() {
    let a = lock_id!["a"];
    let mut c = core(1, Options::default());
    c.request(a.clone(), S, &[n1(), node("n2")], Req::Any)
        .unwrap();
    // On n1 the entry converts S -> SIX (for a lock below [a]); on n2 it still waits.
    let converting = EntryState::Converting {
        held: S,
        requested: Mode::SIX,
    };
    c.receive(notice(&n1(), &a, 4, converting));
    c.receive(notice(&node("n2"), &a, 7, EntryState::Waiting(S)));
    c.settle();
    assert!(c.status().have_all_locks(), "S is held on n1");
    let fx = c.convert(&a, Mode::IS).unwrap();
    // Every copy takes the weaker direct mode, not only those where the request is held.
    assert_eq!(
        to_servers(&fx),
        vec![
            (n1(), convert_req(&a, Mode::IS)),
            (node("n2"), convert_req(&a, Mode::IS)),
        ]
    );
    assert_eq!(c.request_on(&a).unwrap().mode, Mode::IS);
}

#[test]
fn a_pending_request_can_be_converted_down() {
    let a = lock_id!["a"];
    let mut c = core(1, Options::default());
    hold(&mut c, &a, S, 2);
    // A stronger lock on the same id: the request is X and pending while S is held.
    c.request(a.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(notice(
        &n1(),
        &a,
        3,
        EntryState::Converting {
            held: S,
            requested: X,
        },
    ));
    c.settle();
    assert_eq!(c.status(), TransactionStatus::Waiting);
    let fx = c.convert(&a, S).unwrap();
    assert_eq!(to_servers(&fx), vec![(n1(), convert_req(&a, S))]);
    // What the server holds covers the request again.
    assert!(c.status().have_all_locks());
}

#[test]
fn a_node_that_refused_the_request_is_not_asked_to_convert() {
    let a = lock_id!["a"];
    let mut c = core(1, Options::default());
    c.request(a.clone(), X, &[n1(), node("n2")], Req::Any)
        .unwrap();
    c.receive(AgentMessage::Rejected {
        node: node("n2"),
        lock: a.clone(),
        reason: Rejection::LockIdTooLarge("deep".into()),
    });
    c.receive(notice(&n1(), &a, 3, EntryState::Granted(X)));
    c.settle();
    let fx = c.convert(&a, S).unwrap();
    assert_eq!(to_servers(&fx), vec![(n1(), convert_req(&a, S))]);
}

#[test]
fn a_refused_conversion_releases_the_copy_and_the_status_says_so() {
    let a = lock_id!["a"];
    let mut c = core(1, Options::default());
    hold(&mut c, &a, S, 2);
    c.convert(&a, Mode::IS).unwrap();
    // The server kept its direct lock in another mode than the request's: the agent does not
    // count a copy it cannot describe, and releases it.
    let reason = Rejection::NotWeaker {
        held: S,
        requested: Mode::IS,
    };
    let fx = c.receive(AgentMessage::Rejected {
        node: n1(),
        lock: a.clone(),
        reason: reason.clone(),
    });
    assert_eq!(
        fx,
        vec![
            unlock_on_n1(&a),
            AgentEffect::Rejected {
                node: n1(),
                lock: a.clone(),
                reason
            },
        ]
    );
    c.receive(notice(&n1(), &a, 3, EntryState::Absent));
    c.settle();
    assert_eq!(
        c.status(),
        TransactionStatus::CannotServe {
            locks: vec![a],
            nodes: vec![n1()]
        }
    );
}

#[test]
fn a_conversion_refused_for_want_of_a_direct_lock_is_reported_and_changes_nothing() {
    let a = lock_id!["a"];
    let mut c = core(1, Options::default());
    hold(&mut c, &a, S, 2);
    c.convert(&a, Mode::IS).unwrap();
    let fx = c.receive(AgentMessage::Rejected {
        node: n1(),
        lock: a.clone(),
        reason: Rejection::NotHeld,
    });
    assert_eq!(
        fx,
        vec![AgentEffect::Rejected {
            node: n1(),
            lock: a.clone(),
            reason: Rejection::NotHeld
        }]
    );
    // What the agent counts comes from the server's notices, which still say S.
    c.settle();
    assert!(c.status().have_all_locks());
}

#[test]
fn a_grant_older_than_the_agents_own_conversion_does_not_count_until_it_is_answered() {
    let a = lock_id!["a"];
    let mut c = core(1, Options::default());
    hold(&mut c, &a, S, 2);
    // Up to X and down to IS, then up to X and down to S again, before any answer: the server
    // will hold IS after the first conversion and may make the agent wait for S (another agent's
    // IX, say), so the grant of S at version 2 says nothing about S any more.
    c.request(a.clone(), X, &[n1()], Req::All).unwrap();
    c.convert(&a, Mode::IS).unwrap();
    c.request(a.clone(), X, &[n1()], Req::All).unwrap();
    c.convert(&a, S).unwrap();
    c.settle();
    assert_eq!(c.status(), TransactionStatus::Waiting);
    let answer = |version, state, converted: bool| {
        let mut m = notice(&n1(), &a, version, state);
        if let (AgentMessage::Notice(n), true) = (&mut m, converted) {
            n.note = Some(Box::new(Note::Converted));
        }
        m
    };
    let converting = |requested| EntryState::Converting {
        held: Mode::IS,
        requested,
    };
    // The server's answers, in order: Lock X, Convert IS, Lock X, Convert S.
    c.receive(answer(3, EntryState::Granted(X), false));
    c.receive(answer(4, EntryState::Granted(Mode::IS), true));
    c.receive(answer(6, converting(X), false));
    c.settle();
    assert_eq!(c.status(), TransactionStatus::Waiting, "S is not held yet");
    c.receive(answer(7, converting(S), true));
    c.settle();
    assert_eq!(c.status(), TransactionStatus::Waiting, "the server says so");
    c.receive(answer(9, EntryState::Granted(S), false));
    c.settle();
    assert!(c.status().have_all_locks());
}
