//! The waiting callers (`callers.rs`): when `lock` and `await_all_locks` return, and with what,
//! as exact effect lists.

use super::*;
use crate::core::agent::{Answer, CallFailure, CallId};
use crate::core::status::GrantNodes;
use crate::core::status::LockResult;

fn granted(lock: &LockId, mode: Mode, version: u64) -> GrantedLock {
    GrantedLock {
        lock: lock.clone(),
        mode,
        nodes: GrantNodes::one(n1(), version),
    }
}

fn locked(call: u64, granted: GrantedLock, deadlocks: Vec<Deadlock>) -> AgentEffect {
    AgentEffect::Reply {
        call: CallId(call),
        result: Ok(Answer::Locked { granted, deadlocks }),
    }
}

fn failed(call: u64, failure: CallFailure) -> AgentEffect {
    AgentEffect::Reply {
        call: CallId(call),
        result: Err(failure),
    }
}

fn remove_agent(serial: u64) -> AgentEffect {
    AgentEffect::ToServer {
        node: n1(),
        request: ServerRequest::RemoveAgent {
            agent: agent(serial),
        },
    }
}

#[test]
fn lock_and_await_all_callers_are_answered_at_the_settle_that_has_all_locks() {
    let mut c = core(1, Options::default());
    let (a, b) = (lock_id!["a"], lock_id!["b"]);
    let fx = c
        .lock_and_wait(CallId(1), a.clone(), X, &[n1()], Req::All)
        .unwrap();
    assert_eq!(
        fx,
        vec![
            AgentEffect::ToServer {
                node: n1(),
                request: lock_req(1, &a, X)
            },
            AgentEffect::StatusChanged(TransactionStatus::Waiting),
        ],
        "the caller is recorded, not answered"
    );
    assert!(c.await_all(CallId(2)).is_empty());
    c.lock_and_wait(CallId(3), b.clone(), S, &[n1()], Req::All)
        .unwrap();
    c.receive(notice(&n1(), &a, 4, EntryState::Granted(X)));
    assert_eq!(c.settle(), vec![], "still waiting for [b]");
    c.receive(notice(&n1(), &b, 6, EntryState::Granted(S)));
    let have = TransactionStatus::HaveAllLocks { deadlocks: vec![] };
    let all = LockResult {
        locks: vec![granted(&a, X, 4), granted(&b, S, 6)],
        deadlocks: vec![],
    };
    assert_eq!(
        c.settle(),
        vec![
            AgentEffect::Granted(granted(&a, X, 4)),
            AgentEffect::Granted(granted(&b, S, 6)),
            AgentEffect::StatusChanged(have),
            locked(1, granted(&a, X, 4), vec![]),
            AgentEffect::Reply {
                call: CallId(2),
                result: Ok(Answer::AllLocks(all)),
            },
            locked(3, granted(&b, S, 6), vec![]),
        ],
        "every caller, in the order they came"
    );
    assert_eq!(c.settle(), vec![], "each caller is answered once");
}

#[test]
fn a_caller_of_a_lock_already_held_is_answered_at_the_next_settle() {
    // The Erlang original never answers a second `lock` of a held lock.
    let mut c = core(1, Options::default());
    let a = lock_id!["a"];
    hold(&mut c, &a, X, 2);
    let fx = c
        .lock_and_wait(CallId(7), a.clone(), S, &[n1()], Req::All)
        .unwrap();
    assert_eq!(fx, vec![]);
    assert_eq!(c.settle(), vec![locked(7, granted(&a, X, 2), vec![])]);
}

#[test]
fn a_refused_request_records_no_caller() {
    let mut c = core(1, Options::default());
    assert_eq!(
        c.lock_and_wait(CallId(1), lock_id!["a"], X, &[], Req::All),
        Err(RequestError::NoNodes {
            lock: lock_id!["a"]
        })
    );
    assert_eq!(c.end(), vec![], "nothing to fail, nothing to release");
}

#[test]
fn unlock_cancels_the_lock_callers_of_that_lock_only() {
    let mut c = core(1, Options::default());
    let (a, b) = (lock_id!["a"], lock_id!["b"]);
    c.lock_and_wait(CallId(1), a.clone(), X, &[n1()], Req::All)
        .unwrap();
    c.lock_and_wait(CallId(2), b.clone(), X, &[n1()], Req::All)
        .unwrap();
    c.await_all(CallId(3));
    let fx = c.unlock(&a).unwrap();
    assert_eq!(
        fx,
        vec![
            unlock_on_n1(&a),
            failed(1, CallFailure::Cancelled { lock: a.clone() }),
        ]
    );
    c.receive(notice(&n1(), &b, 3, EntryState::Granted(X)));
    let fx = c.settle();
    assert_eq!(
        fx[fx.len() - 2..],
        [
            locked(2, granted(&b, X, 3), vec![]),
            AgentEffect::Reply {
                call: CallId(3),
                result: Ok(Answer::AllLocks(LockResult {
                    locks: vec![granted(&b, X, 3)],
                    deadlocks: vec![],
                })),
            },
        ]
    );
}

#[test]
fn callers_fail_when_the_transaction_cannot_be_served() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.lock_and_wait(CallId(1), l.clone(), X, &[n1(), node("n2")], Req::All)
        .unwrap();
    c.await_all(CallId(2));
    let cannot = TransactionStatus::CannotServe {
        locks: vec![l.clone()],
        nodes: vec![node("n2")],
    };
    assert_eq!(
        c.unreachable(&node("n2")),
        vec![AgentEffect::StatusChanged(cannot)],
        "an unreachable server is a node down"
    );
    let failure = CallFailure::CannotServe {
        locks: vec![l],
        nodes: vec![node("n2")],
    };
    assert_eq!(
        c.settle(),
        vec![failed(1, failure.clone()), failed(2, failure)]
    );
}

#[test]
fn callers_of_a_refused_request_are_told_the_servers_reason() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.lock_and_wait(CallId(1), l.clone(), X, &[n1()], Req::All)
        .unwrap();
    c.await_all(CallId(2));
    let reason = Rejection::QuotaExceeded {
        quota: locks_core::proto::Quota::Locks,
        limit: 2,
    };
    c.receive(AgentMessage::Rejected {
        node: n1(),
        lock: l.clone(),
        reason: reason.clone(),
    });
    let failure = CallFailure::Refused {
        lock: l,
        node: n1(),
        reason,
    };
    let fx = c.settle();
    assert_eq!(
        fx[fx.len() - 2..],
        [failed(1, failure.clone()), failed(2, failure)]
    );
}

#[test]
fn end_fails_the_callers_then_releases_and_later_callers_fail_at_once() {
    let mut c = core(1, Options::default());
    c.lock_and_wait(CallId(1), lock_id!["a"], X, &[n1()], Req::All)
        .unwrap();
    c.await_all(CallId(2));
    assert_eq!(
        c.end(),
        vec![
            failed(1, CallFailure::Ended),
            failed(2, CallFailure::Ended),
            remove_agent(1),
        ]
    );
    assert_eq!(c.await_all(CallId(3)), vec![failed(3, CallFailure::Ended)]);
    assert_eq!(c.end(), vec![]);
}

#[test]
fn an_abort_fails_the_callers_with_the_deadlock_before_it_is_reported() {
    let opts = Options {
        abort_on_deadlock: true,
        ..Options::default()
    };
    let mut c = two_cycle(2, 1, opts);
    c.await_all(CallId(1));
    let fx = c.settle();
    let fx = probe_returns(&mut c, &fx);
    let (x, deadlock) = (
        lock_id!["x"],
        CallFailure::Deadlock {
            lock: lock_id!["x"],
            node: n1(),
        },
    );
    let lost = LostLock {
        lock: x.clone(),
        mode: X,
        nodes: vec![n1()],
        cause: LossCause::Aborted,
    };
    assert_eq!(
        fx,
        vec![
            AgentEffect::Lost(lost),
            failed(1, deadlock.clone()),
            AgentEffect::Abort {
                lock: x,
                node: n1()
            },
        ]
    );
    assert_eq!(c.await_all(CallId(2)), vec![failed(2, deadlock)]);
    assert_eq!(c.end(), vec![remove_agent(2)]);
}

#[test]
fn a_withdrawn_caller_undoes_only_what_it_asked_for() {
    let mut c = core(1, Options::default());
    let (a, b) = (lock_id!["a"], lock_id!["b"]);
    // A new request: withdrawn whole, as `unlock` would.
    c.lock_and_wait(CallId(1), a.clone(), X, &[n1()], Req::All)
        .unwrap();
    let (removed, fx) = c.withdraw(CallId(1));
    assert_eq!(removed, Some(a.clone()));
    assert!(fx.contains(&AgentEffect::ToServer {
        node: n1(),
        request: ServerRequest::Unlock {
            agent: agent(1),
            lock: a.clone(),
        },
    }));
    assert!(c.request_on(&a).is_none());
    // An upgrade: lowered back to the mode asked before.
    c.lock_and_wait(CallId(2), b.clone(), S, &[n1()], Req::All)
        .unwrap();
    c.receive(notice(&n1(), &b, 4, EntryState::Granted(S)));
    c.settle();
    c.lock_and_wait(CallId(3), b.clone(), X, &[n1()], Req::All)
        .unwrap();
    let (removed, fx) = c.withdraw(CallId(3));
    assert_eq!(removed, None);
    assert!(fx.contains(&AgentEffect::ToServer {
        node: n1(),
        request: ServerRequest::Convert {
            agent: agent(1),
            lock: b.clone(),
            mode: S,
        },
    }));
    assert_eq!(c.request_on(&b).map(|r| r.mode), Some(S));
    // Answered already (call 2), or never recorded: nothing.
    assert_eq!(c.withdraw(CallId(2)), (None, Vec::new()));
    assert_eq!(c.withdraw(CallId(99)), (None, Vec::new()));
}

#[test]
fn a_later_call_on_the_lock_keeps_the_request_of_an_earlier_one() {
    let mut c = core(1, Options::default());
    let a = lock_id!["a"];
    c.lock_and_wait(CallId(1), a.clone(), X, &[n1()], Req::All)
        .unwrap();
    c.lock_and_wait(CallId(2), a.clone(), X, &[n1()], Req::All)
        .unwrap();
    assert_eq!(c.withdraw(CallId(1)), (None, Vec::new()));
    assert!(c.request_on(&a).is_some(), "call 2 still waits for it");
}

#[test]
fn a_timed_out_caller_is_withdrawn_and_told_what_it_waited_for() {
    let mut c = core(1, Options::default());
    let a = lock_id!["a"];
    c.lock_and_wait(CallId(1), a.clone(), X, &[n1()], Req::All)
        .unwrap();
    let fx = c.time_out(CallId(1));
    assert_eq!(
        fx.last(),
        Some(&failed(
            1,
            CallFailure::TimedOut {
                lock: a.clone(),
                waited_on: vec![(a.clone(), n1())],
                holders: Vec::new(),
            }
        ))
    );
    assert!(c.request_on(&a).is_none());
    assert!(c.time_out(CallId(1)).is_empty(), "answered once");
}
