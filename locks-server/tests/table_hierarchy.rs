//! The hierarchy examples of the Erlang original's lock server and its single-node tests
//! 5-9, at table level, with intention modes on ancestors instead of Erlang's queue merging.
//! "A holds L" means: A's entry on L and on every ancestor of L are granted (see `holds`).

mod common;

use common::*;
use locks_core::proto::EntryState;
use locks_core::{Mode, lock_id};

#[test]
fn reference_3_4_write_on_child_blocks_read_and_write_on_parent() {
    for mode in [Mode::S, Mode::X] {
        let mut tb = table();
        lock(&mut tb, 1, &lock_id!["a", "b"], Mode::X);
        assert_eq!(shape(&tb, &lock_id!["a"]), "IX [T1 IX] conv [] wait []");
        assert!(holds(&tb, 1, &lock_id!["a", "b"], Mode::X));
        lock(&mut tb, 2, &lock_id!["a"], mode);
        assert_eq!(
            shape(&tb, &lock_id!["a"]),
            format!("IX [T1 IX] conv [] wait [T2 {mode}]")
        );
        assert!(!holds(&tb, 2, &lock_id!["a"], mode));
        remove(&mut tb, 1);
        assert!(holds(&tb, 2, &lock_id!["a"], mode));
    }
}

#[test]
fn reference_3_4_write_on_child_blocks_any_lock_below_it() {
    for mode in Mode::ALL {
        let mut tb = table();
        lock(&mut tb, 1, &lock_id!["a", "b"], Mode::X);
        lock(&mut tb, 2, &lock_id!["a", "b", "c"], mode);
        // T2's intention on [a, b] waits behind T1's write; [a] shares intentions.
        let int = mode.intention();
        assert_eq!(
            shape(&tb, &lock_id!["a", "b"]),
            format!("X [T1 X] conv [] wait [T2 {int}]")
        );
        assert!(!holds(&tb, 2, &lock_id!["a", "b", "c"], mode));
        remove(&mut tb, 1);
        assert!(holds(&tb, 2, &lock_id!["a", "b", "c"], mode));
    }
}

#[test]
fn reference_3_4_writes_on_siblings_coexist() {
    let mut tb = table();
    lock(&mut tb, 1, &lock_id!["a", "b"], Mode::X);
    lock(&mut tb, 2, &lock_id!["a", "c"], Mode::X);
    assert!(holds(&tb, 1, &lock_id!["a", "b"], Mode::X));
    assert!(holds(&tb, 2, &lock_id!["a", "c"], Mode::X));
    assert_eq!(
        shape(&tb, &lock_id!["a"]),
        "IX [T1 IX, T2 IX] conv [] wait []"
    );
    // And a sibling never inherits a queue: [a, d] is free (no Erlang false contention).
    lock(&mut tb, 3, &lock_id!["a", "d"], Mode::X);
    assert!(holds(&tb, 3, &lock_id!["a", "d"], Mode::X));
}

#[test]
fn reference_3_4_read_on_parent_allows_read_on_child_not_write() {
    let mut tb = table();
    lock(&mut tb, 1, &lock_id!["a"], Mode::S);
    lock(&mut tb, 2, &lock_id!["a", "b"], Mode::S);
    assert!(holds(&tb, 2, &lock_id!["a", "b"], Mode::S));
    lock(&mut tb, 2, &lock_id!["a", "c"], Mode::X);
    // T2's entry on [a] must go IS -> IX, which T1's S forbids.
    assert_eq!(
        shape(&tb, &lock_id!["a"]),
        "S [T1 S, T2 IS] conv [T2 IS>IX] wait []"
    );
    assert!(holds(&tb, 2, &lock_id!["a", "b"], Mode::S));
    assert!(!holds(&tb, 2, &lock_id!["a", "c"], Mode::X));
}

#[test]
fn erlang_test_5_lock_merge() {
    // An agent's own descendant locks never block it on the parent (as in the Erlang original):
    // [x,1] read, [x,2] write, then [x] write, all granted at once.
    let mut tb = table();
    let x = lock_id!["x"];
    for (id, mode) in [
        (lock_id!["x", 1], Mode::S),
        (lock_id!["x", 2], Mode::X),
        (x.clone(), Mode::X),
    ] {
        let fx = lock(&mut tb, 1, &id, mode);
        assert!(holds(&tb, 1, &id, mode), "{id} {mode}");
        assert!(notices(&fx).iter().all(|n| !n.2.is_waiting()));
    }
    assert_eq!(shape(&tb, &x), "X [T1 X] conv [] wait []");
}

#[test]
fn erlang_test_6_lock_upgrade1() {
    let mut tb = table();
    let l = lock_id!["up1"];
    lock(&mut tb, 1, &l, Mode::S);
    let fx = lock(&mut tb, 1, &l, Mode::X);
    assert_eq!(
        notices(&fx),
        vec![("T1".into(), l.clone(), EntryState::Granted(Mode::X))]
    );
    lock(&mut tb, 2, &l.child(1), Mode::S);
    assert!(!holds(&tb, 2, &l.child(1), Mode::S));
    assert_eq!(shape(&tb, &l), "X [T1 X] conv [] wait [T2 IS]");
    remove(&mut tb, 1);
    assert!(holds(&tb, 2, &l.child(1), Mode::S));
}

#[test]
fn erlang_test_7_lock_upgrade2() {
    let mut tb = table();
    let l = lock_id!["up2"];
    lock(&mut tb, 1, &l, Mode::S);
    lock(&mut tb, 2, &l.child(1), Mode::S);
    assert!(holds(&tb, 2, &l.child(1), Mode::S));
    lock(&mut tb, 1, &l, Mode::X);
    // The child read of another agent prevents the upgrade (T1 waits for T2, not for itself).
    assert_eq!(shape(&tb, &l), "S [T1 S, T2 IS] conv [T1 S>X] wait []");
    remove(&mut tb, 2);
    assert!(holds(&tb, 1, &l, Mode::X));
}

#[test]
fn erlang_test_8_lock_upgrade3() {
    let mut tb = table();
    let l = lock_id!["up3"];
    lock(&mut tb, 1, &l, Mode::S);
    lock(&mut tb, 2, &l, Mode::S);
    lock(&mut tb, 1, &l, Mode::X);
    lock(&mut tb, 2, &l, Mode::X);
    // Exactly one upgrade can win; with both pending it is a conversion deadlock.
    assert_eq!(
        shape(&tb, &l),
        "S [T1 S, T2 S] conv [T1 S>X, T2 S>X] wait []"
    );
    remove(&mut tb, 1);
    assert!(holds(&tb, 2, &l, Mode::X));
}

#[test]
fn erlang_test_9_two_w_locks_parent_read() {
    let mut tb = table();
    let l0 = lock_id!["l0"];
    lock(&mut tb, 1, &l0.child(1), Mode::X);
    lock(&mut tb, 2, &l0.child(2), Mode::X);
    lock(&mut tb, 1, &l0, Mode::S);
    // A read on the parent conflicts with a write on any child: T1 needs S + IX = SIX.
    assert_eq!(
        shape(&tb, &l0),
        "IX [T1 IX, T2 IX] conv [T1 IX>SIX] wait []"
    );
    assert!(!holds(&tb, 1, &l0, Mode::S));
    remove(&mut tb, 2);
    assert!(holds(&tb, 1, &l0, Mode::S));
    assert_eq!(shape(&tb, &l0), "SIX [T1 SIX] conv [] wait []");
}

#[test]
fn unlocking_a_child_lowers_the_parent() {
    let mut tb = table();
    let a = lock_id!["a"];
    lock(&mut tb, 1, &a, Mode::S);
    lock(&mut tb, 1, &a.child("b"), Mode::X);
    assert_eq!(shape(&tb, &a), "SIX [T1 SIX] conv [] wait []");
    let fx = unlock(&mut tb, 1, &a.child("b"));
    assert_eq!(shape(&tb, &a), "S [T1 S] conv [] wait []");
    assert_eq!(
        notices(&fx),
        vec![
            ("T1".into(), a.clone(), EntryState::Granted(Mode::S)),
            ("T1".into(), a.child("b"), EntryState::Absent),
        ]
    );
    unlock(&mut tb, 1, &a);
    assert_eq!(tb.lock_count(), 0);
    assert_eq!(tb.agent_count(), 0);
}

#[test]
fn two_children_count_separately_on_the_parent() {
    let mut tb = table();
    let r = lock_id!["r"];
    lock(&mut tb, 1, &r.child(1), Mode::X);
    lock(&mut tb, 1, &r.child(2), Mode::S);
    assert_eq!(shape(&tb, &r), "IX [T1 IX] conv [] wait []");
    // Releasing the write leaves the read's IS; releasing that leaves nothing.
    unlock(&mut tb, 1, &r.child(1));
    assert_eq!(shape(&tb, &r), "IS [T1 IS] conv [] wait []");
    unlock(&mut tb, 1, &r.child(2));
    assert_eq!(shape(&tb, &r), "-");
}

#[test]
fn convert_down_lowers_the_ancestors_intentions() {
    let mut tb = table();
    let ab = lock_id!["a", "b"];
    lock(&mut tb, 1, &ab, Mode::X);
    let fx = convert(&mut tb, 1, &ab, Mode::S);
    assert_eq!(shape(&tb, &lock_id!["a"]), "IS [T1 IS] conv [] wait []");
    assert_eq!(shape(&tb, &ab), "S [T1 S] conv [] wait []");
    assert_eq!(notices(&fx).len(), 2);
    // S -> IS keeps [a]'s IS: only [a, b] is told.
    let fx = convert(&mut tb, 1, &ab, Mode::IS);
    assert_eq!(
        notices(&fx),
        vec![("T1".into(), ab.clone(), EntryState::Granted(Mode::IS))]
    );
}

/// A lock released and taken again (its record, and its ancestors', kept for reuse by the
/// table) is granted at a newer fencing version, and in between the table shows none of it.
#[test]
fn a_lock_taken_again_after_its_release_has_a_newer_version() {
    let mut tb = table();
    let row = lock_id!["db", "t", 1u64];
    let mut last = 0;
    for n in 1..=3 {
        lock(&mut tb, n, &row, Mode::X);
        let (mode, version) = tb.holds(&t(n), &row).expect("granted");
        assert_eq!(mode, Mode::X);
        assert!(version > last, "T{n}: version {version} after {last}");
        last = version;
        assert_eq!(tb.lock_count(), 3);
        remove(&mut tb, n);
        assert_eq!((tb.lock_count(), tb.agent_count()), (0, 0));
        for id in [lock_id!["db"], lock_id!["db", "t"], row.clone()] {
            assert_eq!(tb.view(&id), None, "{id}");
        }
    }
}
