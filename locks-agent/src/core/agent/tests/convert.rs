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
            Effect::ToServer {
                node: n1(),
                request: ServerRequest::Unlock {
                    agent: agent(1),
                    lock: a.clone()
                }
            },
            Effect::Rejected {
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
        vec![Effect::Rejected {
            node: n1(),
            lock: a.clone(),
            reason: Rejection::NotHeld
        }]
    );
    // What the agent counts comes from the server's notices, which still say S.
    c.settle();
    assert!(c.status().have_all_locks());
}
