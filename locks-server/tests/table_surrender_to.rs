//! SurrenderTo, the voluntary surrender to a named waiter: refused, changing nothing, unless
//! the agent holds the lock and the named agent waits or converts on it; otherwise the same
//! requeueing as a deadlock surrender at the current version, with its own note.

mod common;

use common::*;
use locks_core::proto::{AgentMessage, EntryState, Note, Rejection, ServerRequest};
use locks_core::{LockId, Mode, lock_id};
use locks_server::state_machine::Sends;

fn surrender_to(
    tb: &mut locks_server::state_machine::LockTable,
    n: u64,
    lock: &LockId,
    to: u64,
) -> Sends {
    tb.handle(ServerRequest::SurrenderTo {
        agent: t(n),
        lock: lock.clone(),
        to: t(to),
    })
}

fn rejected(fx: &Sends) -> Vec<(u64, Rejection)> {
    fx.iter()
        .map(|(to, msg)| match msg {
            AgentMessage::Rejected { reason, .. } => (to.serial(), reason.clone()),
            other => panic!("a rejection expected, got {other:?}"),
        })
        .collect()
}

#[test]
fn a_surrender_to_a_waiter_requeues_the_holder_behind_it() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::X);
    lock(&mut tb, 2, &l, Mode::X);
    let v = tb.view(&l).expect("exists").version;
    let fx = surrender_to(&mut tb, 1, &l, 2);
    assert_eq!(shape(&tb, &l), "X [T2 X] conv [] wait [T1 X]");
    let note = Some(Note::SurrenderedTo {
        agent: t(1),
        to: t(2),
        version: v,
    });
    for who in [1, 2] {
        assert_eq!(
            notice_to(&fx, who, &l)
                .expect("told")
                .note
                .as_deref()
                .cloned(),
            note
        );
    }
    assert!(
        fx.iter().all(|(_, m)| !matches!(m, AgentMessage::Notice(n)
            if matches!(n.note.as_deref(), Some(Note::Surrendered { .. })))),
        "no deadlock note"
    );
}

#[test]
fn a_surrender_to_an_agent_that_does_not_wait_changes_nothing() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::S);
    lock(&mut tb, 2, &l, Mode::S);
    let before = tb.snapshot();
    // T2 holds, T3 has no entry: neither waits.
    for to in [2, 3] {
        let fx = surrender_to(&mut tb, 1, &l, to);
        assert_eq!(
            rejected(&fx),
            vec![(1, Rejection::NotWaiting { to: t(to) })]
        );
    }
    assert_eq!(tb.snapshot(), before);
    // T4 holds nothing: it has nothing to surrender.
    lock(&mut tb, 3, &l, Mode::X);
    let before_4 = tb.snapshot();
    let fx = surrender_to(&mut tb, 4, &l, 3);
    assert_eq!(
        rejected(&fx),
        vec![(4, Rejection::SurrenderNotHeld { to: t(3) })]
    );
    assert_eq!(tb.snapshot(), before_4);
    // A waiter cannot surrender what it waits for.
    let fx = surrender_to(&mut tb, 3, &l, 3);
    assert_eq!(
        rejected(&fx),
        vec![(3, Rejection::SurrenderNotHeld { to: t(3) })]
    );
}

#[test]
fn a_surrender_to_a_converter_is_allowed() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::S);
    lock(&mut tb, 2, &l, Mode::S);
    // T2 waits to convert to X, blocked by T1's S.
    lock(&mut tb, 2, &l, Mode::X);
    assert!(tb.state(&t(2), &l).is_waiting());
    surrender_to(&mut tb, 1, &l, 2);
    assert!(holds(&tb, 2, &l, Mode::X));
    assert!(matches!(tb.state(&t(1), &l), EntryState::Waiting(Mode::S)));
}
