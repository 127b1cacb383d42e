//! Who is told what: the notice rules of the table's module documentation, hot ancestors,
//! watchers, versions, refusals and the snapshot.

mod common;

use common::*;
use locks_core::proto::{AgentMessage, EntryState, Rejection, ServerRequest};
use locks_core::{LockId, Mode, ModeTable, lock_id};
use locks_server::TableSnapshot;
use locks_server::state_machine::LockTable;

/// The hot root: 10,000 agents hold IS on a shared root and one of them takes
/// and releases a child lock. Exactly the agent itself is told, about the two locks its entry
/// changed on; the other 9,999 holders hear nothing.
#[test]
fn hot_root_child_lock_sends_a_constant_number_of_notices() {
    let mut tb = table();
    let root = lock_id!["root"];
    for n in 0..10_000 {
        let fx = lock(&mut tb, n, &root, Mode::IS);
        assert_eq!(fx.len(), 1);
    }
    let child = root.child("k");
    // Its root entry goes IS -> IX (an immediate conversion) and the child is granted.
    let fx = lock(&mut tb, 42, &child, Mode::X);
    assert_eq!(
        notices(&fx),
        vec![
            ("T42".into(), root.clone(), EntryState::Granted(Mode::IX)),
            ("T42".into(), child.clone(), EntryState::Granted(Mode::X)),
        ]
    );
    assert_eq!(fx.len(), 2);
    let fx = unlock(&mut tb, 42, &child);
    assert_eq!(
        notices(&fx),
        vec![
            ("T42".into(), root.clone(), EntryState::Granted(Mode::IS)),
            ("T42".into(), child.clone(), EntryState::Absent),
        ]
    );
    assert_eq!(fx.len(), 2);
}

/// Same, when the root's IS entries come from child locks: a second child lock under the root
/// only bumps an intention count there, so only the new child is reported.
#[test]
fn hot_root_held_through_children_sends_one_notice_per_child_lock() {
    let mut tb = table();
    let root = lock_id!["root"];
    for n in 0..10_000 {
        lock(&mut tb, n, &root.child(n as i64), Mode::S);
    }
    let extra = root.child("extra");
    let fx = lock(&mut tb, 7, &extra, Mode::S);
    assert_eq!(
        notices(&fx),
        vec![("T7".into(), extra.clone(), EntryState::Granted(Mode::S))]
    );
    assert_eq!(fx.len(), 1);
    let fx = unlock(&mut tb, 7, &extra);
    assert_eq!(fx.len(), 1);
    // A write on a new child converts the root entry IS -> IX: two notices.
    let fx = lock(&mut tb, 7, &extra, Mode::X);
    assert_eq!(fx.len(), 2);
    assert_eq!(tb.lock_count(), 10_002);
}

#[test]
fn a_waiter_is_not_told_about_waiters_behind_it() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::X);
    lock(&mut tb, 2, &l, Mode::X);
    let fx = lock(&mut tb, 3, &l, Mode::X);
    assert_eq!(
        notices(&fx),
        vec![("T3".into(), l.clone(), EntryState::Waiting(Mode::X))]
    );
    lock(&mut tb, 4, &l, Mode::X);
    // T3 withdraws: T4, behind it, is told (with a view without T3); T2, ahead, is not.
    let fx = unlock(&mut tb, 3, &l);
    assert_eq!(
        notices(&fx),
        vec![
            ("T3".into(), l.clone(), EntryState::Absent),
            ("T4".into(), l.clone(), EntryState::Waiting(Mode::X)),
        ]
    );
    let view = notice_to(&fx, 4, &l)
        .and_then(|n| n.queue.clone())
        .expect("view");
    assert_eq!(view.waiting.len(), 2);
    assert!(notice_to(&fx, 3, &l).is_some_and(|n| n.queue.is_none()));
}

#[test]
fn a_pending_request_that_asks_more_keeps_its_place() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::X);
    lock(&mut tb, 2, &l, Mode::S);
    lock(&mut tb, 3, &l, Mode::S);
    let fx = lock(&mut tb, 2, &l, Mode::X);
    assert_eq!(shape(&tb, &l), "X [T1 X] conv [] wait [T2 X, T3 S]");
    // T2's mode changed and T3 waits behind it: both are told.
    assert_eq!(
        notices(&fx),
        vec![
            ("T2".into(), l.clone(), EntryState::Waiting(Mode::X)),
            ("T3".into(), l.clone(), EntryState::Waiting(Mode::S)),
        ]
    );
}

#[test]
fn every_request_is_answered_even_when_nothing_changes() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::X);
    let v = tb.version();
    // X covers S: nothing changes, the version stays, T1 is still told where it stands.
    let fx = lock(&mut tb, 1, &l, Mode::S);
    assert_eq!(tb.version(), v);
    let n = notice_to(&fx, 1, &l).expect("answered");
    assert_eq!((n.state, n.version), (EntryState::Granted(Mode::X), v));
    assert_eq!(shape(&tb, &l), "X [T1 X] conv [] wait []");
}

#[test]
fn versions_start_above_the_base_and_move_once_per_operation() {
    let mut tb = LockTable::new(node(), ModeTable::standard(), 1 << 40);
    let ab = lock_id!["a", "b"];
    let fx = lock(&mut tb, 1, &ab, Mode::X);
    assert_eq!(tb.version(), (1 << 40) + 1);
    assert!(fx.iter().all(|(_, m)| matches!(m,
        AgentMessage::Notice(n) if n.version == (1 << 40) + 1)));
    let ac = lock_id!["a", "c"];
    let fx = lock(&mut tb, 1, &ac, Mode::S);
    assert_eq!(tb.version(), (1 << 40) + 2);
    // T1's entry on [a] only counted one more child (IX already covers IS): [a] did not
    // change, keeps its version and is not reported.
    assert_eq!(
        tb.view(&lock_id!["a"]).map(|v| v.version),
        Some((1 << 40) + 1)
    );
    assert_eq!(tb.view(&ac).map(|v| v.version), Some((1 << 40) + 2));
    assert_eq!(fx.len(), 1);
    lock(&mut tb, 2, &ab, Mode::X);
    assert_eq!(tb.version(), (1 << 40) + 3);
    // A new holder gets a larger fencing version.
    let fx = remove(&mut tb, 1);
    let n = notice_to(&fx, 2, &ab).expect("T2 granted");
    assert_eq!(
        (n.state, n.version),
        (EntryState::Granted(Mode::X), (1 << 40) + 4)
    );
}

#[test]
fn watchers_see_every_change_of_exactly_their_lock() {
    let mut tb = table();
    let (a, ab) = (lock_id!["a"], lock_id!["a", "b"]);
    let watch = |tb: &mut LockTable, id: &locks_core::LockId| {
        tb.handle(ServerRequest::Watch {
            watcher: t(9),
            lock: id.clone(),
        })
    };
    // Watching a lock that does not exist answers with an empty view.
    let fx = watch(&mut tb, &ab);
    assert!(matches!(&fx[..], [(w, AgentMessage::Watched { view, .. })]
        if *w == t(9) && view.granted.is_empty() && view.group.is_none()));
    assert_eq!(tb.lock_count(), 1);
    let fx = lock(&mut tb, 1, &ab, Mode::X);
    let watched: Vec<_> = fx
        .iter()
        .filter_map(|(w, m)| match m {
            AgentMessage::Watched { lock, view, .. } => {
                Some((w.clone(), lock.clone(), view.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        watched.len(),
        1,
        "[a] changed too, but only [a, b] is watched"
    );
    assert_eq!(watched[0].1, ab);
    assert_eq!(watched[0].2.granted.len(), 1);
    // The lock becoming free is seen too.
    let fx = remove(&mut tb, 1);
    assert!(
        matches!(&fx[..], [(_, AgentMessage::Watched { view, .. })] if view.granted.is_empty())
    );
    assert_eq!(tb.view(&a), None);
    tb.handle(ServerRequest::Unwatch {
        watcher: t(9),
        lock: ab.clone(),
    });
    assert_eq!((tb.lock_count(), tb.agent_count()), (0, 0));
}

#[test]
fn refused_requests_get_a_rejection_and_change_nothing() {
    let mut tb = LockTable::new(node(), ModeTable::shared_exclusive(), 0).with_max_depth(2);
    let l = lock_id!["l"];
    let reason = |fx: &Vec<(locks_core::AgentId, AgentMessage)>| match &fx[..] {
        [(_, AgentMessage::Rejected { reason, .. })] => reason.clone(),
        other => panic!("expected one rejection, got {other:?}"),
    };
    assert_eq!(
        reason(&lock(&mut tb, 1, &l, Mode::U)),
        Rejection::ModeNotInTable(Mode::U)
    );
    assert!(matches!(
        reason(&lock(&mut tb, 1, &lock_id!["a", "b", "c"], Mode::S)),
        Rejection::LockIdTooLarge(_)
    ));
    assert_eq!(reason(&unlock(&mut tb, 1, &l)), Rejection::NotHeld);
    assert_eq!(
        reason(&convert(&mut tb, 1, &l, Mode::S)),
        Rejection::NotHeld
    );
    lock(&mut tb, 1, &l, Mode::S);
    assert_eq!(
        reason(&convert(&mut tb, 1, &l, Mode::X)),
        Rejection::NotWeaker {
            held: Mode::S,
            requested: Mode::X
        }
    );
    assert_eq!(
        reason(&convert(&mut tb, 1, &l, Mode::S)),
        Rejection::NotWeaker {
            held: Mode::S,
            requested: Mode::S
        }
    );
    // A pending lock converts only to a weaker mode too, and an intention-only entry cannot be
    // unlocked.
    lock(&mut tb, 2, &l, Mode::S);
    lock(&mut tb, 2, &l, Mode::X);
    assert_eq!(
        reason(&convert(&mut tb, 2, &l, Mode::X)),
        Rejection::NotWeaker {
            held: Mode::X,
            requested: Mode::X
        }
    );
    lock(&mut tb, 3, &lock_id!["m", "n"], Mode::S);
    assert_eq!(
        reason(&unlock(&mut tb, 3, &lock_id!["m"])),
        Rejection::NotHeld
    );
    assert_eq!(tb.lock_count(), 3);
}

#[test]
fn removing_every_agent_empties_the_table() {
    let mut tb = table();
    for n in 1..=4 {
        lock(&mut tb, n, &lock_id!["a", n as i64], Mode::X);
        lock(&mut tb, n, &lock_id!["a"], Mode::S);
    }
    for n in 1..=4 {
        remove(&mut tb, n);
    }
    assert_eq!((tb.lock_count(), tb.agent_count()), (0, 0));
    assert!(tb.snapshot().locks.is_empty());
}

#[test]
fn the_snapshot_round_trips_through_the_codec() {
    let mut tb = table();
    lock(&mut tb, 1, &lock_id!["a", "b"], Mode::X);
    lock(&mut tb, 2, &lock_id!["a"], Mode::S);
    tb.handle(ServerRequest::Watch {
        watcher: t(3),
        lock: lock_id!["a"],
    });
    let snap = tb.snapshot();
    let a = snap.lock(&lock_id!["a"]).expect("exists");
    assert_eq!(a.watchers, vec![t(3)]);
    assert_eq!(a.entry(&t(1)).map(|e| e.direct), Some(None));
    assert_eq!(a.entry(&t(2)).map(|e| e.direct), Some(Some(Mode::S)));
    assert_eq!(
        snap.state(&t(2), &lock_id!["a"]),
        EntryState::Waiting(Mode::S)
    );
    let bytes = locks_core::codec::encode(&snap, 1 << 20).expect("encodes");
    let back: TableSnapshot = locks_core::codec::decode(&bytes, 1 << 20).expect("decodes");
    assert_eq!(back, snap);
}

/// An agent removed with locks and watches on several ids: the others hear of them in lock id
/// order (an ancestor before its descendants), whatever order the table created the records
/// in. Here `["b"]` and its child exist before `["a"]`, and the watch on `["a", 1]` before both.
#[test]
fn a_removed_agent_s_notices_come_in_lock_id_order() {
    let mut tb = table();
    let (a, b) = (lock_id!["a"], lock_id!["b"]);
    let (a1, b1) = (a.child(1), b.child(1));
    tb.step(locks_server::state_machine::TableInput::Request(
        ServerRequest::Watch {
            watcher: t(3),
            lock: a1.clone(),
        },
    ));
    lock(&mut tb, 1, &b1, Mode::X);
    lock(&mut tb, 1, &b, Mode::S);
    lock(&mut tb, 1, &a1, Mode::X);
    lock(&mut tb, 1, &a, Mode::S);
    for id in [&b1, &b, &a1, &a] {
        lock(&mut tb, 2, id, Mode::X);
    }
    let fx = remove(&mut tb, 1);
    let order: Vec<LockId> = fx
        .iter()
        .filter_map(|(_, m)| match m {
            AgentMessage::Notice(n) => Some(n.lock.clone()),
            AgentMessage::Watched { lock, .. } => Some(lock.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(order.len(), fx.len(), "only notices and views: {fx:?}");
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    // Everybody affected heard: the waiter on each of the four ids, the watcher of one.
    for id in [&a, &a1, &b, &b1] {
        assert!(order.contains(id), "nothing about {id:?}: {order:?}");
    }
}
