//! Surrender: a stale version, or a wait of the cycle that no longer holds, is refused (the
//! agent is told, with the queue now); otherwise the agent's entries on the lock and its
//! descendants go to the back of their wait queues, its entries on ancestors stay, and every
//! notice about the lock carries the note.

mod common;

use common::*;
use locks_core::proto::{AgentMessage, EntryState, Note, ServerRequest, Wait};
use locks_core::{LockId, Mode, lock_id};

fn surrendered(n: u64, version: u64) -> Option<Note> {
    Some(Note::Surrendered {
        agent: t(n),
        version,
    })
}

#[test]
fn surrender_with_a_stale_version_is_ignored_and_answered_with_a_fresh_view() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::X);
    lock(&mut tb, 2, &l, Mode::X);
    let v = tb.view(&l).expect("exists").version;
    let before = tb.snapshot();
    for stale in [v - 1, v + 1] {
        // Nothing moves, but the holder learns the current queue and version, so it can
        // analyse again (holders get no views otherwise).
        let fx = surrender(&mut tb, 1, &l, stale);
        assert_eq!(fx.len(), 1);
        let AgentMessage::Notice(n) = &fx[0].1 else {
            panic!("a notice expected, got {:?}", fx[0].1)
        };
        assert_eq!(fx[0].0.serial(), 1);
        assert_eq!(
            (n.version, n.state, n.note.as_deref().cloned()),
            (
                v,
                EntryState::Granted(Mode::X),
                Some(Note::NotSurrendered { version: stale })
            )
        );
        assert_eq!(n.queue.as_deref(), tb.view(&l).as_ref());
    }
    assert!(surrender(&mut tb, 1, &lock_id!["nope"], v).is_empty());
    // An agent with no entry on the lock has nothing to surrender.
    assert!(surrender(&mut tb, 9, &l, v).is_empty());
    assert_eq!(tb.snapshot(), before);
}

#[test]
fn surrender_moves_the_entry_to_the_back() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::X);
    lock(&mut tb, 2, &l, Mode::X);
    lock(&mut tb, 3, &l, Mode::S);
    assert_eq!(shape(&tb, &l), "X [T1 X] conv [] wait [T2 X, T3 S]");
    let v = tb.view(&l).expect("exists").version;
    let fx = surrender(&mut tb, 1, &l, v);
    assert_eq!(shape(&tb, &l), "X [T2 X] conv [] wait [T3 S, T1 X]");
    assert_eq!(
        notices(&fx),
        vec![
            ("T1".into(), l.clone(), EntryState::Waiting(Mode::X)),
            ("T2".into(), l.clone(), EntryState::Granted(Mode::X)),
            ("T3".into(), l.clone(), EntryState::Waiting(Mode::S)),
        ]
    );
    for (_, msg) in &fx {
        let AgentMessage::Notice(n) = msg else {
            panic!("only notices expected")
        };
        assert_eq!(n.note.as_deref().cloned(), surrendered(1, v));
        assert_eq!(n.version, v + 1);
    }
}

#[test]
fn surrender_moves_a_waiting_entry_to_the_back_too() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::X);
    lock(&mut tb, 2, &l, Mode::X);
    lock(&mut tb, 3, &l, Mode::X);
    let v = tb.view(&l).expect("exists").version;
    surrender(&mut tb, 2, &l, v);
    assert_eq!(shape(&tb, &l), "X [T1 X] conv [] wait [T3 X, T2 X]");
}

#[test]
fn surrender_moves_the_descendants_and_leaves_the_ancestors() {
    let mut tb = table();
    let (r, a, ab) = (lock_id!["r"], lock_id!["r", "a"], lock_id!["r", "a", "b"]);
    // T1 holds [r, a] and [r, a, b] for writing; T2 waits for a read of [r, a, b].
    lock(&mut tb, 1, &a, Mode::X);
    lock(&mut tb, 1, &ab, Mode::X);
    lock(&mut tb, 2, &ab, Mode::S);
    assert_eq!(shape(&tb, &r), "IX [T1 IX, T2 IS] conv [] wait []");
    assert_eq!(shape(&tb, &a), "X [T1 X] conv [] wait [T2 IS]");
    assert_eq!(shape(&tb, &ab), "X [T1 X] conv [] wait [T2 S]");
    let v = tb.view(&a).expect("exists").version;
    let fx = surrender(&mut tb, 1, &a, v);
    // [r] is untouched; [r, a] and [r, a, b] put T1 behind T2.
    assert_eq!(shape(&tb, &r), "IX [T1 IX, T2 IS] conv [] wait []");
    assert_eq!(shape(&tb, &a), "IS [T2 IS] conv [] wait [T1 X]");
    assert_eq!(shape(&tb, &ab), "S [T2 S] conv [] wait [T1 X]");
    assert!(holds(&tb, 2, &ab, Mode::S));
    assert!(fx.iter().all(|(_, m)| match m {
        AgentMessage::Notice(n) if n.lock == a => n.note.as_deref().cloned() == surrendered(1, v),
        AgentMessage::Notice(n) => n.lock == ab && n.note.is_none(),
        _ => false,
    }));
    remove(&mut tb, 2);
    assert!(holds(&tb, 1, &ab, Mode::X));
}

#[test]
fn surrender_regrants_at_once_when_nobody_else_waits() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::X);
    let v = tb.view(&l).expect("exists").version;
    let fx = surrender(&mut tb, 1, &l, v);
    assert_eq!(shape(&tb, &l), "X [T1 X] conv [] wait []");
    let n = notice_to(&fx, 1, &l).expect("told");
    assert_eq!(n.state, EntryState::Granted(Mode::X));
    assert_eq!(n.version, v + 1, "a new grant, with a new fencing version");
}

#[test]
fn sticky_conversion_deadlock_is_broken_by_a_surrender() {
    let mut tb = table();
    let l = lock_id!["sticky"];
    lock(&mut tb, 1, &l, Mode::S);
    lock(&mut tb, 2, &l, Mode::S);
    lock(&mut tb, 1, &l, Mode::X);
    lock(&mut tb, 2, &l, Mode::X);
    assert_eq!(
        shape(&tb, &l),
        "S [T1 S, T2 S] conv [T1 S>X, T2 S>X] wait []"
    );
    let v = tb.view(&l).expect("exists").version;
    // The larger agent surrenders: it loses its S and waits for X at the back.
    let fx = surrender(&mut tb, 2, &l, v);
    assert_eq!(shape(&tb, &l), "X [T1 X] conv [] wait [T2 X]");
    assert_eq!(
        notices(&fx),
        vec![
            ("T1".into(), l.clone(), EntryState::Granted(Mode::X)),
            ("T2".into(), l.clone(), EntryState::Waiting(Mode::X)),
        ]
    );
    remove(&mut tb, 1);
    assert_eq!(shape(&tb, &l), "X [T2 X] conv [] wait []");
}

/// 1 holds L and waits for K; 2 holds K and waits for L: a cycle on this node.
fn cycle(tb: &mut locks_server::state_machine::LockTable) -> (LockId, LockId) {
    let (l, k) = (lock_id!["l"], lock_id!["k"]);
    lock(tb, 1, &l, Mode::X);
    lock(tb, 2, &k, Mode::X);
    lock(tb, 1, &k, Mode::X);
    lock(tb, 2, &l, Mode::X);
    (l, k)
}

fn wait(waiter: u64, blocker: u64, lock: &LockId) -> Wait {
    Wait {
        waiter: t(waiter),
        blocker: t(blocker),
        lock: lock.clone(),
    }
}

/// Agent 2's surrender of `k` at `version` with `waits` is refused: nothing moves, and 2 is
/// told so.
fn refused(
    tb: &mut locks_server::state_machine::LockTable,
    k: &LockId,
    version: u64,
    waits: Vec<Wait>,
) {
    let before = tb.snapshot();
    let fx = tb.handle(ServerRequest::Surrender {
        agent: t(2),
        lock: k.clone(),
        version,
        waits,
    });
    assert_eq!(tb.snapshot(), before);
    assert!(matches!(
        &fx[..],
        [(to, AgentMessage::Notice(n))]
            if *to == t(2) && n.note.as_deref() == Some(&Note::NotSurrendered { version })
    ));
}

#[test]
fn surrender_applies_only_while_the_waits_of_its_cycle_hold() {
    let mut tb = table();
    let (l, k) = cycle(&mut tb);
    let v = tb.view(&k).expect("exists").version;
    // A wait that does not hold (3 is nowhere): refused at the current version.
    refused(&mut tb, &k, v, vec![wait(1, 2, &k), wait(2, 3, &l)]);
    // The cycle's real waits: applied, and 1 gets K.
    let fx = tb.handle(ServerRequest::Surrender {
        agent: t(2),
        lock: k.clone(),
        version: v,
        waits: vec![wait(1, 2, &k), wait(2, 1, &l)],
    });
    assert!(fx.iter().any(|(to, m)| *to == t(1)
        && matches!(m, AgentMessage::Notice(n) if n.lock == k && n.state == EntryState::Granted(Mode::X))));
}

#[test]
fn a_surrender_whose_waits_are_its_whole_cycle_is_applied_though_the_lock_moved_on() {
    let mut tb = table();
    let (l, k) = cycle(&mut tb);
    let v = tb.view(&k).expect("exists").version;
    // 3 queues on K behind 1 after 2 decided: K's version moves, the cycle stays.
    lock(&mut tb, 3, &k, Mode::X);
    assert!(tb.view(&k).expect("exists").version > v);
    // Only part of the cycle (it runs through another node, say): the version decides, and
    // it is stale.
    refused(&mut tb, &k, v, vec![wait(1, 2, &k)]);
    // The whole cycle, every wait holding: the cycle is real now, so it is applied, with the
    // victim's version in the note, and 1 gets K.
    let fx = tb.handle(ServerRequest::Surrender {
        agent: t(2),
        lock: k.clone(),
        version: v,
        waits: vec![wait(1, 2, &k), wait(2, 1, &l)],
    });
    assert!(fx.iter().any(|(to, m)| *to == t(2)
        && matches!(m, AgentMessage::Notice(n) if n.lock == k && n.note.as_deref().cloned() == surrendered(2, v))));
    assert!(fx.iter().any(|(to, m)| *to == t(1)
        && matches!(m, AgentMessage::Notice(n) if n.lock == k && n.state == EntryState::Granted(Mode::X))));
    assert_eq!(shape(&tb, &k), "X [T1 X] conv [] wait [T3 X, T2 X]");
}
