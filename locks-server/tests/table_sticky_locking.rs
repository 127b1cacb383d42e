//! Every scenario of StickyLocking's lock queue rules (immediate grant, the three wait scenarios,
//! the four conversion scenarios), step by step, asserting the queue after each step as
//! StickyLocking draws it:
//! `group [granted] conv [held>requested] wait [waiting]`.
//!
//! Where one of StickyLocking's pictures and its matrices disagree the matrices win (the table's module docs): after
//! T1 converts S→IS while T2 and T3 hold S, the group is S, not IS.

mod common;

use common::*;
use locks_core::proto::EntryState;
use locks_core::{Mode, lock_id};

fn l() -> locks_core::LockId {
    lock_id!["sticky"]
}

#[test]
fn sticky_immediate_grant() {
    let mut tb = table();
    assert_eq!(shape(&tb, &l()), "-");
    let fx = lock(&mut tb, 1, &l(), Mode::S);
    assert_eq!(shape(&tb, &l()), "S [T1 S] conv [] wait []");
    // T1 is told, with the version of the grant (the fencing version) and no queue view.
    assert_eq!(fx.len(), 1);
    let n = notice_to(&fx, 1, &l()).expect("T1 is told");
    assert_eq!(n.state, EntryState::Granted(Mode::S));
    assert_eq!(n.version, 1);
    assert!(n.queue.is_none());
}

#[test]
fn sticky_wait_scenario_1_not_compatible_with_group() {
    let mut tb = table();
    lock(&mut tb, 1, &l(), Mode::S);
    let fx = lock(&mut tb, 2, &l(), Mode::X);
    assert_eq!(shape(&tb, &l()), "S [T1 S] conv [] wait [T2 X]");
    // Only T2 is told; it waits, so it gets the whole queue.
    assert_eq!(
        notices(&fx),
        vec![("T2".into(), l(), EntryState::Waiting(Mode::X))]
    );
    let view = notice_to(&fx, 2, &l()).and_then(|n| n.queue.clone());
    assert_eq!(view.as_deref(), tb.view(&l()).as_ref());
}

#[test]
fn sticky_wait_scenario_2_existing_waiters() {
    let mut tb = table();
    lock(&mut tb, 1, &l(), Mode::S);
    lock(&mut tb, 2, &l(), Mode::X);
    assert_eq!(shape(&tb, &l()), "S [T1 S] conv [] wait [T2 X]");
    let fx = lock(&mut tb, 3, &l(), Mode::S);
    // S is compatible with the group, but T2 waits ahead.
    assert_eq!(shape(&tb, &l()), "S [T1 S] conv [] wait [T2 X, T3 S]");
    // T2's view of what is ahead of it did not change: it is not told.
    assert_eq!(
        notices(&fx),
        vec![("T3".into(), l(), EntryState::Waiting(Mode::S))]
    );
}

#[test]
fn sticky_wait_scenario_3_existing_conversions() {
    let mut tb = table();
    lock(&mut tb, 1, &l(), Mode::S);
    lock(&mut tb, 2, &l(), Mode::S);
    lock(&mut tb, 1, &l(), Mode::X);
    assert_eq!(shape(&tb, &l()), "S [T1 S, T2 S] conv [T1 S>X] wait []");
    lock(&mut tb, 3, &l(), Mode::S);
    assert_eq!(shape(&tb, &l()), "S [T1 S, T2 S] conv [T1 S>X] wait [T3 S]");
}

#[test]
fn sticky_conversion_scenario_1_example_1_no_waiters() {
    let mut tb = table();
    for n in 1..=3 {
        lock(&mut tb, n, &l(), Mode::S);
    }
    assert_eq!(shape(&tb, &l()), "S [T1 S, T2 S, T3 S] conv [] wait []");
    let fx = convert(&mut tb, 1, &l(), Mode::IS);
    // StickyLocking's picture says `Lock (IS)`; by its group matrix IS with S, S is S.
    assert_eq!(shape(&tb, &l()), "S [T1 IS, T2 S, T3 S] conv [] wait []");
    assert_eq!(
        notices(&fx),
        vec![("T1".into(), l(), EntryState::Granted(Mode::IS))]
    );
}

#[test]
fn sticky_conversion_scenario_1_example_2_with_waiters() {
    let mut tb = table();
    for n in 1..=3 {
        lock(&mut tb, n, &l(), Mode::S);
    }
    lock(&mut tb, 4, &l(), Mode::X);
    assert_eq!(shape(&tb, &l()), "S [T1 S, T2 S, T3 S] conv [] wait [T4 X]");
    let fx = convert(&mut tb, 1, &l(), Mode::IS);
    assert_eq!(
        shape(&tb, &l()),
        "S [T1 IS, T2 S, T3 S] conv [] wait [T4 X]"
    );
    // A holder changed mode: T1 is told, and so is T4, who waits behind the holders.
    assert_eq!(
        notices(&fx),
        vec![
            ("T1".into(), l(), EntryState::Granted(Mode::IS)),
            ("T4".into(), l(), EntryState::Waiting(Mode::X)),
        ]
    );
}

#[test]
fn sticky_conversion_scenario_2_example_1_no_queue() {
    let mut tb = table();
    lock(&mut tb, 1, &l(), Mode::U);
    lock(&mut tb, 2, &l(), Mode::IS);
    lock(&mut tb, 3, &l(), Mode::IS);
    assert_eq!(shape(&tb, &l()), "U [T1 U, T2 IS, T3 IS] conv [] wait []");
    lock(&mut tb, 1, &l(), Mode::X);
    assert_eq!(
        shape(&tb, &l()),
        "U [T1 U, T2 IS, T3 IS] conv [T1 U>X] wait []"
    );
    unlock(&mut tb, 2, &l());
    assert_eq!(shape(&tb, &l()), "U [T1 U, T3 IS] conv [T1 U>X] wait []");
    let fx = unlock(&mut tb, 3, &l());
    assert_eq!(shape(&tb, &l()), "X [T1 X] conv [] wait []");
    assert_eq!(
        notices(&fx),
        vec![
            ("T1".into(), l(), EntryState::Granted(Mode::X)),
            ("T3".into(), l(), EntryState::Absent),
        ]
    );
}

#[test]
fn sticky_conversion_scenario_2_example_2_with_conversion_queue() {
    let mut tb = table();
    lock(&mut tb, 1, &l(), Mode::U);
    lock(&mut tb, 2, &l(), Mode::IS);
    lock(&mut tb, 3, &l(), Mode::IS);
    lock(&mut tb, 2, &l(), Mode::IX);
    assert_eq!(
        shape(&tb, &l()),
        "U [T1 U, T2 IS, T3 IS] conv [T2 IS>IX] wait []"
    );
    let fx = lock(&mut tb, 3, &l(), Mode::IX);
    // T3's IX is compatible with the other holders' IS... but T2 converts ahead of it.
    assert_eq!(
        shape(&tb, &l()),
        "U [T1 U, T2 IS, T3 IS] conv [T2 IS>IX, T3 IS>IX] wait []"
    );
    assert_eq!(
        notices(&fx),
        vec![(
            "T3".into(),
            l(),
            EntryState::Converting {
                held: Mode::IS,
                requested: Mode::IX
            }
        )]
    );
    unlock(&mut tb, 1, &l());
    assert_eq!(shape(&tb, &l()), "IX [T2 IX, T3 IX] conv [] wait []");
}

#[test]
fn sticky_conversion_scenario_3_with_waiting_queue() {
    let mut tb = table();
    lock(&mut tb, 1, &l(), Mode::S);
    lock(&mut tb, 2, &l(), Mode::S);
    lock(&mut tb, 3, &l(), Mode::IX);
    lock(&mut tb, 4, &l(), Mode::IX);
    assert_eq!(
        shape(&tb, &l()),
        "S [T1 S, T2 S] conv [] wait [T3 IX, T4 IX]"
    );
    let fx = lock(&mut tb, 1, &l(), Mode::X);
    assert_eq!(
        shape(&tb, &l()),
        "S [T1 S, T2 S] conv [T1 S>X] wait [T3 IX, T4 IX]"
    );
    // A conversion now stands ahead of every waiter: all are told.
    let who: Vec<String> = notices(&fx).into_iter().map(|n| n.0).collect();
    assert_eq!(who, ["T1", "T3", "T4"]);
    unlock(&mut tb, 2, &l());
    assert_eq!(shape(&tb, &l()), "X [T1 X] conv [] wait [T3 IX, T4 IX]");
}

#[test]
fn sticky_conversion_scenario_4_conversion_deadlock() {
    let mut tb = table();
    lock(&mut tb, 1, &l(), Mode::S);
    lock(&mut tb, 2, &l(), Mode::S);
    assert_eq!(shape(&tb, &l()), "S [T1 S, T2 S] conv [] wait []");
    lock(&mut tb, 1, &l(), Mode::X);
    let fx = lock(&mut tb, 2, &l(), Mode::X);
    assert_eq!(
        shape(&tb, &l()),
        "S [T1 S, T2 S] conv [T1 S>X, T2 S>X] wait []"
    );
    // Both wait for each other; T2's view shows T1 converting ahead of it, which is all its
    // deadlock analysis needs.
    let view = notice_to(&fx, 2, &l())
        .and_then(|n| n.queue.clone())
        .expect("T2 waits and gets the queue");
    assert_eq!(view.converting.len(), 2);
    assert_eq!(view.converting[0].agent, t(1));
}
