//! `Convert` of a direct lock whose entry is not simply granted: converting up (because of a
//! lock on a descendant, or a stronger lock on the same id) or still waiting. The conversion
//! sets the direct mode whatever the entry's state; a converting entry gives up at once the part
//! of its held mode it no longer asks for, then settles as usual.
//!
//! Queues in the shape of StickyLocking's diagrams: `group [granted] conv [held>requested] wait
//! [waiting]`.

mod common;

use common::*;
use locks_core::proto::{AgentMessage, EntryState, Note, Rejection};
use locks_core::{Mode, lock_id};

fn rejection(fx: &locks_server::state_machine::Sends) -> Option<Rejection> {
    match &fx[..] {
        [(_, AgentMessage::Rejected { reason, .. })] => Some(reason.clone()),
        _ => None,
    }
}

#[test]
fn converting_for_a_descendant_lowers_the_held_mode_and_keeps_converting() {
    let mut tb = table();
    let (a, ab, ac) = (lock_id!["a"], lock_id!["a", "b"], lock_id!["a", "c"]);
    lock(&mut tb, 1, &a, Mode::S);
    lock(&mut tb, 2, &a, Mode::S);
    // T1's entry on [a] now needs S + IX = SIX; T2's S keeps it converting.
    lock(&mut tb, 1, &ab, Mode::X);
    assert_eq!(shape(&tb, &a), "S [T1 S, T2 S] conv [T1 S>SIX] wait []");

    let fx = convert(&mut tb, 1, &a, Mode::IS);
    assert_eq!(rejection(&fx), None, "the conversion is accepted");
    // Of S, T1 keeps what it still asks for and S covers: IS (its IX for [a, b] S never
    // covered). It still needs IS + IX = IX, which T2's S does not let in.
    assert_eq!(shape(&tb, &a), "S [T1 IS, T2 S] conv [T1 IS>IX] wait []");
    let n = notice_to(&fx, 1, &a).expect("T1 is answered");
    assert_eq!(
        n.state,
        EntryState::Converting {
            held: Mode::IS,
            requested: Mode::IX
        }
    );
    assert_eq!(n.queue.as_deref(), tb.view(&a).as_ref());
    assert_eq!(
        n.note.as_deref(),
        Some(&Note::Converted),
        "the answer says what it answers"
    );

    // Without [a, b], IS is all T1 needs: the conversion is withdrawn.
    unlock(&mut tb, 1, &ab);
    assert_eq!(shape(&tb, &a), "S [T1 IS, T2 S] conv [] wait []");
    remove(&mut tb, 2);
    assert_eq!(shape(&tb, &a), "IS [T1 IS] conv [] wait []");
    // A writer of another child of [a] gets in beside T1's IS.
    lock(&mut tb, 3, &ac, Mode::X);
    assert!(holds(&tb, 3, &ac, Mode::X));
    assert_eq!(shape(&tb, &a), "IX [T1 IS, T3 IX] conv [] wait []");
}

#[test]
fn converting_entry_whose_lowered_held_mode_covers_the_need_is_done() {
    let mut tb = table();
    let a = lock_id!["a"];
    lock(&mut tb, 1, &a, Mode::S);
    lock(&mut tb, 2, &a, Mode::S);
    // A stronger lock on the same id: the direct mode is X, T1 holds S and waits for X.
    lock(&mut tb, 1, &a, Mode::X);
    assert_eq!(shape(&tb, &a), "S [T1 S, T2 S] conv [T1 S>X] wait []");
    // Back to S: what T1 holds covers it, the upgrade is given up.
    let fx = convert(&mut tb, 1, &a, Mode::S);
    assert_eq!(shape(&tb, &a), "S [T1 S, T2 S] conv [] wait []");
    assert_eq!(
        notices(&fx),
        vec![("T1".into(), a.clone(), EntryState::Granted(Mode::S))]
    );
    // And T1's direct mode really is S now: a further conversion to X is refused.
    assert_eq!(
        rejection(&convert(&mut tb, 1, &a, Mode::X)),
        Some(Rejection::NotWeaker {
            held: Mode::S,
            requested: Mode::X
        })
    );
}

#[test]
fn converting_entry_to_a_mode_its_held_mode_does_not_cover_keeps_the_held_mode() {
    let mut tb = table();
    let a = lock_id!["a"];
    lock(&mut tb, 1, &a, Mode::S);
    lock(&mut tb, 2, &a, Mode::S);
    lock(&mut tb, 1, &a, Mode::X);
    assert_eq!(shape(&tb, &a), "S [T1 S, T2 S] conv [T1 S>X] wait []");
    // U is weaker than X but not covered by S: T1 keeps S and now converts to U, which T2's S
    // lets in at once.
    let fx = convert(&mut tb, 1, &a, Mode::U);
    assert_eq!(shape(&tb, &a), "U [T1 U, T2 S] conv [] wait []");
    assert_eq!(
        notice_to(&fx, 1, &a).map(|n| n.state),
        Some(EntryState::Granted(Mode::U))
    );
}

#[test]
fn waiting_entry_lowers_its_pending_mode_in_place() {
    let mut tb = table();
    let (a, ab) = (lock_id!["a"], lock_id!["a", "b"]);
    lock(&mut tb, 1, &a, Mode::X);
    lock(&mut tb, 2, &a, Mode::X);
    lock(&mut tb, 3, &a, Mode::S);
    assert_eq!(shape(&tb, &a), "X [T1 X] conv [] wait [T2 X, T3 S]");
    let fx = convert(&mut tb, 2, &a, Mode::S);
    assert_eq!(shape(&tb, &a), "X [T1 X] conv [] wait [T2 S, T3 S]");
    assert_eq!(
        notice_to(&fx, 2, &a).map(|n| n.state),
        Some(EntryState::Waiting(Mode::S))
    );
    // Both readers get in together once the writer leaves.
    unlock(&mut tb, 1, &a);
    assert_eq!(shape(&tb, &a), "S [T2 S, T3 S] conv [] wait []");

    // A waiting descendant lock: its ancestor's pending intention follows the conversion.
    lock(&mut tb, 4, &ab, Mode::X);
    assert_eq!(shape(&tb, &a), "S [T2 S, T3 S] conv [] wait [T4 IX]");
    assert_eq!(tb.state(&t(4), &ab), EntryState::Granted(Mode::X));
    convert(&mut tb, 4, &ab, Mode::S);
    // IS is compatible with the readers and nobody waits ahead: granted.
    assert_eq!(shape(&tb, &a), "S [T2 S, T3 S, T4 IS] conv [] wait []");
    assert!(holds(&tb, 4, &ab, Mode::S));
}

#[test]
fn convert_is_refused_without_a_direct_lock_or_a_weaker_mode() {
    let mut tb = table();
    let (a, ab) = (lock_id!["a"], lock_id!["a", "b"]);
    lock(&mut tb, 1, &ab, Mode::X);
    // An intention entry is no direct lock.
    assert_eq!(
        rejection(&convert(&mut tb, 1, &a, Mode::IS)),
        Some(Rejection::NotHeld)
    );
    lock(&mut tb, 2, &ab, Mode::S);
    assert_eq!(tb.state(&t(2), &ab), EntryState::Waiting(Mode::S));
    assert_eq!(
        rejection(&convert(&mut tb, 2, &ab, Mode::X)),
        Some(Rejection::NotWeaker {
            held: Mode::S,
            requested: Mode::X
        })
    );
    assert_eq!(shape(&tb, &ab), "X [T1 X] conv [] wait [T2 S]");
}
