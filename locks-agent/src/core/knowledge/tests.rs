use super::*;
use locks_core::Mode::{IX, X};
use locks_core::ModeTable;
use locks_core::lock_id;
use locks_core::proto::QueueEntry;

fn node() -> NodeId {
    NodeId::new("n1").unwrap()
}

fn agent(serial: u64) -> AgentId {
    AgentId::new(node(), 1, serial)
}

fn me() -> AgentId {
    agent(1)
}

fn waiting_view(version: u64, holder: u64, waiter: u64) -> Arc<LockView> {
    queue(version, holder, &[waiter])
}

fn notice(lock: &LockId, version: u64, state: EntryState) -> LockNotice {
    LockNotice {
        node: node(),
        lock: lock.clone(),
        version,
        state,
        queue: state.is_waiting().then(|| waiting_view(version, 2, 1)),
        note: None,
    }
}

/// A view at `version`: `holder` holds it in `X`, `waiting` wait for `X` in that order.
fn queue(version: u64, holder: u64, waiting: &[u64]) -> Arc<LockView> {
    let entry = |a: u64| QueueEntry {
        agent: agent(a),
        mode: X,
    };
    Arc::new(LockView {
        version,
        group: Some(X),
        granted: vec![entry(holder)],
        converting: vec![],
        waiting: waiting.iter().map(|&a| entry(a)).collect(),
    })
}

/// The notice that this agent waits for `X` on `lock` in `q`.
fn waiting_in(lock: &LockId, version: u64, q: Arc<LockView>) -> LockNotice {
    LockNotice {
        node: node(),
        lock: lock.clone(),
        version,
        state: EntryState::Waiting(X),
        queue: Some(q),
        note: None,
    }
}

#[test]
fn stale_and_duplicate_notices_are_dropped() {
    let l = lock_id!["l"];
    let mut k = Knowledge::default();
    assert!(k.on_notice(&me(), notice(&l, 5, EntryState::Granted(X))));
    assert!(!k.on_notice(&me(), notice(&l, 5, EntryState::Absent)));
    assert!(!k.on_notice(&me(), notice(&l, 4, EntryState::Absent)));
    assert_eq!(k.held(&l, &node()), Some(X));
    assert_eq!(k.entry_version(&l, &node()), Some(5));
}

#[test]
fn a_notice_without_queue_outdates_older_views_but_not_a_forward_of_the_same_version() {
    let l = lock_id!["l"];
    let mut k = Knowledge::default();
    assert!(k.on_notice(&me(), notice(&l, 3, EntryState::Waiting(X))));
    assert_eq!(k.view(&l, &node()).unwrap().version, 3);
    // Granted at 6: the view of 3 is gone; a forward older than 6 is refused.
    assert!(k.on_notice(&me(), notice(&l, 6, EntryState::Granted(X))));
    assert!(k.view(&l, &node()).is_none());
    assert!(!k.on_view(&me(), &l, &node(), waiting_view(5, 1, 3)));
    // A forward of version 6 is the queue this holder was not sent: kept.
    assert!(k.on_view(&me(), &l, &node(), waiting_view(6, 1, 3)));
    assert!(
        !k.on_view(&me(), &l, &node(), waiting_view(6, 1, 3)),
        "duplicate"
    );
    assert_eq!(k.views().count(), 1);
}

#[test]
fn views_without_waiters_are_not_kept() {
    let l = lock_id!["l"];
    let mut k = Knowledge::default();
    let mut free = (*waiting_view(4, 2, 3)).clone();
    free.waiting.clear();
    assert!(k.on_view(&me(), &l, &node(), waiting_view(3, 2, 3)));
    assert!(k.on_view(&me(), &l, &node(), Arc::new(free)));
    assert_eq!(k.views().count(), 0);
    assert!(!k.on_view(&me(), &l, &node(), waiting_view(3, 2, 3)));
}

#[test]
fn a_surrender_suspends_no_entry_already_gone_under_it() {
    // Agent 1 held `a` and `a/1`, and its unlock of `a/1` was answered before it surrendered
    // `a` (a session that went on with other ids). Nothing of `a/1` is left to suspend: its
    // copy is forgotten at once, not kept until the surrender's answer (which, for a surrender
    // the server ignores, would never let it go).
    let (a, a1) = (lock_id!["a"], lock_id!["a", 1]);
    let mut k = Knowledge::default();
    k.on_notice(&me(), notice(&a, 2, EntryState::Granted(X)));
    k.on_notice(&me(), notice(&a1, 2, EntryState::Granted(X)));
    k.on_notice(&me(), notice(&a1, 3, EntryState::Absent));
    k.on_view(&me(), &a, &node(), waiting_view(4, 1, 2));
    // Agent 1 asks for nothing under `a` any more.
    k.surrendered(&a, &node(), 4, |_, _| false);
    assert!(k.is_suspended(&a, &node()));
    assert!(!k.is_suspended(&a1, &node()));
    assert!(k.forget_left(&a1, &node()));
}

#[test]
fn an_applied_surrender_keeps_descendants_suspended_until_their_own_notice() {
    let (a, a1) = (lock_id!["a"], lock_id!["a", 1]);
    let mut k = Knowledge::default();
    k.on_notice(&me(), notice(&a, 2, EntryState::Granted(X)));
    k.on_notice(&me(), notice(&a1, 2, EntryState::Granted(X)));
    k.on_view(&me(), &a, &node(), waiting_view(4, 1, 2));
    k.surrendered(&a, &node(), 4, |_, _| true);
    assert!(k.surrender_outstanding());
    assert_eq!(k.held(&a, &node()), None);
    assert_eq!(k.held(&a1, &node()), None);
    assert!(k.view(&a, &node()).is_none());
    // An older notice, sent before the server saw the surrender, changes nothing.
    assert!(!k.on_notice(&me(), notice(&a, 3, EntryState::Granted(X))));
    // The surrender's own notice (with this agent's note) re-queues `a` ...
    let mut n = notice(&a, 7, EntryState::Waiting(X));
    n.note = Some(Box::new(Note::Surrendered {
        agent: me(),
        version: 4,
    }));
    k.on_notice(&me(), n);
    assert!(!k.surrender_outstanding());
    // ... and `a/1` stays in doubt until its own notice comes.
    assert_eq!(k.held(&a1, &node()), None);
    k.on_notice(&me(), notice(&a1, 7, EntryState::Waiting(X)));
    assert_eq!(k.held(&a1, &node()), None);
    k.on_notice(&me(), notice(&a1, 9, EntryState::Granted(X)));
    assert_eq!(k.held(&a1, &node()), Some(X));
    assert_eq!(
        k.deadlocks(),
        &[Deadlock {
            victim: me(),
            lock: a,
            node: node()
        }]
    );
}

#[test]
fn an_ignored_surrender_gives_the_descendants_back() {
    let (a, a1) = (lock_id!["a"], lock_id!["a", 1]);
    let mut k = Knowledge::default();
    k.on_notice(&me(), notice(&a, 2, EntryState::Granted(IX)));
    k.on_notice(&me(), notice(&a1, 2, EntryState::Granted(X)));
    k.surrendered(&a, &node(), 4, |_, _| true);
    // The server's answer to a stale surrender: the entry now, with the version surrendered.
    let mut n = notice(&a, 8, EntryState::Granted(IX));
    n.note = Some(Box::new(Note::NotSurrendered { version: 4 }));
    k.on_notice(&me(), n);
    assert_eq!(k.held(&a, &node()), Some(IX));
    assert_eq!(k.held(&a1, &node()), Some(X));
    assert!(!k.surrender_outstanding());
}

#[test]
fn a_notice_sent_before_the_server_took_the_surrender_leaves_it_in_doubt() {
    // The server applies a surrender decided on an older version when its waits are a whole
    // cycle now: a newer notice without the answer may predate it.
    let (a, a1) = (lock_id!["a"], lock_id!["a", 1]);
    let mut k = Knowledge::default();
    k.on_notice(&me(), notice(&a, 2, EntryState::Waiting(IX)));
    k.on_notice(&me(), notice(&a1, 2, EntryState::Waiting(X)));
    k.surrendered(&a, &node(), 2, |_, _| true);
    // Granted before the surrender reached the server.
    k.on_notice(&me(), notice(&a, 5, EntryState::Granted(IX)));
    k.on_notice(&me(), notice(&a1, 5, EntryState::Granted(X)));
    assert_eq!(k.held(&a, &node()), None);
    assert_eq!(k.held(&a1, &node()), None);
    assert!(k.surrender_outstanding());
    // The answer: applied, at 6; `a/1`'s notice of the same operation follows.
    let mut n = notice(&a, 6, EntryState::Waiting(IX));
    n.note = Some(Box::new(Note::Surrendered {
        agent: me(),
        version: 2,
    }));
    k.on_notice(&me(), n);
    assert!(!k.surrender_outstanding());
    assert_eq!(k.held(&a1, &node()), None);
    k.on_notice(&me(), notice(&a1, 6, EntryState::Waiting(X)));
    k.on_notice(&me(), notice(&a, 8, EntryState::Granted(IX)));
    k.on_notice(&me(), notice(&a1, 8, EntryState::Granted(X)));
    assert_eq!(k.held(&a, &node()), Some(IX));
    assert_eq!(k.held(&a1, &node()), Some(X));
}

#[test]
fn a_surrender_of_a_copy_the_agent_left_is_over_with_its_entry() {
    // Unlocked before the server saw the surrender: it is ignored without an answer.
    let a = lock_id!["a"];
    let mut k = Knowledge::default();
    k.on_notice(&me(), notice(&a, 2, EntryState::Waiting(X)));
    k.surrendered(&a, &node(), 2, |_, _| true);
    k.on_notice(&me(), notice(&a, 4, EntryState::Absent));
    assert!(!k.surrender_outstanding());
    k.on_notice(&me(), notice(&a, 6, EntryState::Granted(X)));
    assert_eq!(k.held(&a, &node()), Some(X));
}

#[test]
fn a_surrender_at_the_version_that_removed_the_entry_is_over_with_that_notice() {
    // The victim decided on another agent's view of the version its own unlock made (its
    // entry gone), before the server's notice of that version came: the server ignores the
    // surrender without an answer, and that notice is the end of it.
    let a = lock_id!["a"];
    let mut k = Knowledge::default();
    k.on_notice(&me(), notice(&a, 2, EntryState::Waiting(X)));
    k.surrendered(&a, &node(), 4, |_, _| true);
    k.on_notice(&me(), notice(&a, 4, EntryState::Absent));
    assert!(!k.surrender_outstanding());
    k.on_notice(&me(), notice(&a, 6, EntryState::Granted(X)));
    assert_eq!(k.held(&a, &node()), Some(X));
}

#[test]
fn deadlocks_are_recorded_once_and_a_surrendered_subtree_counts_once() {
    let mut k = Knowledge::default();
    let d = |l: LockId| Deadlock {
        victim: agent(2),
        lock: l,
        node: node(),
    };
    assert!(k.record_deadlock(d(lock_id!["a", 1])));
    assert!(!k.record_deadlock(d(lock_id!["a", 1])));
    assert!(k.record_deadlock(d(lock_id!["a"])));
    assert!(!k.record_deadlock(d(lock_id!["a", 2])));
    assert!(k.record_deadlock(d(lock_id!["b"])));
    assert_eq!(k.deadlocks(), &[d(lock_id!["a"]), d(lock_id!["b"])]);
}

#[test]
fn forgetting_a_node_forgets_its_copies() {
    let l = lock_id!["l"];
    let mut k = Knowledge::default();
    k.on_notice(&me(), notice(&l, 3, EntryState::Waiting(X)));
    k.forget_node(&node());
    assert_eq!(k.views().count(), 0);
    assert_eq!(k.held(&l, &node()), None);
    // A restarted server may count from anywhere: versions start afresh.
    assert!(k.on_notice(&me(), notice(&l, 1, EntryState::Granted(X))));
}

#[test]
fn a_forward_from_before_a_node_went_down_is_refused_after_it() {
    // Another agent's forward of the server's queue from before it went down may arrive after
    // it is back: it is no part of what the server says now (and taken for the view "before"
    // a notice of the new server, it would make the agent think the server told everybody).
    let l = lock_id!["l"];
    let mut k = Knowledge::default();
    k.on_notice(&me(), notice(&l, 12, EntryState::Waiting(X)));
    k.forget_node(&node());
    assert!(!k.on_forward(&me(), &l, &node(), &agent(3), queue(12, 2, &[1, 3]), true));
    assert!(!k.on_forward(&me(), &l, &node(), &agent(3), queue(9, 2, &[1, 3]), true));
    assert_eq!(k.views().count(), 0);
    // The server's own notices are taken whatever their version; newer forwards too.
    let waiting = |version: u64, q: Arc<LockView>| waiting_in(&l, version, q);
    assert!(k.on_notice(&me(), waiting(5, queue(5, 4, &[1]))));
    assert!(k.on_forward(&me(), &l, &node(), &agent(3), queue(13, 4, &[1, 3]), true));
}

#[test]
fn who_else_was_sent_a_view() {
    let l = lock_id!["l"];
    let modes = ModeTable::standard();
    let mut k = Knowledge::default();
    let waiting = |version: u64, q: Arc<LockView>| waiting_in(&l, version, q);
    let sent = |k: &Knowledge, to: u64| k.already_sent(&modes, &me(), &l, &node(), &agent(to));
    // The first view: nobody else need have it.
    k.on_notice(&me(), waiting(3, queue(3, 2, &[3, 5, 1])));
    assert!(!sent(&k, 2) && !sent(&k, 3));
    // A waiter joins behind: only it is told.
    k.on_notice(&me(), waiting(4, queue(4, 2, &[3, 5, 1, 4])));
    assert!(!sent(&k, 2) && !sent(&k, 3));
    // The holder changes while 1 waits: every waiter is told, and the new holder gets it from
    // the first waiter it blocks, 5.
    k.on_notice(&me(), waiting(6, queue(6, 3, &[5, 1, 4])));
    assert!(sent(&k, 5) && sent(&k, 4));
    assert!(sent(&k, 3), "5 sends it to the holder");
    // Now 1 is the first waiter the holder blocks: it must send it.
    k.on_notice(&me(), waiting(7, queue(7, 5, &[1, 4])));
    assert!(sent(&k, 4));
    assert!(!sent(&k, 5));
    // Forwarded by 4, which waits for everyone ahead of it: sent to all of them.
    k.on_forward(&me(), &l, &node(), &agent(4), queue(8, 5, &[1, 4, 9]), true);
    assert!(sent(&k, 5) && sent(&k, 4));
    assert!(!sent(&k, 9), "4 does not wait for 9");
    // A change of holders seen after a view in which this agent did not wait proves nothing.
    let mut k = Knowledge::default();
    k.on_view(&me(), &l, &node(), queue(3, 1, &[2]));
    k.on_notice(&me(), waiting(5, queue(5, 2, &[1])));
    assert!(!sent(&k, 2));
}

/// A view of `l` at `version`: agent 2 holds it, `waiting` wait in that order.
fn held_by_2(version: u64, waiting: &[u64]) -> Arc<LockView> {
    queue(version, 2, waiting)
}

fn waiters(k: &Knowledge, l: &LockId) -> Vec<AgentId> {
    let view = k.view(l, &node()).expect("a view is kept");
    view.waiting.iter().map(|w| w.agent.clone()).collect()
}

#[test]
fn an_agent_that_withdrew_keeps_the_others_waits_without_its_own() {
    let l = lock_id!["l"];
    let mut k = Knowledge::default();
    let waiting = |version: u64, q: Arc<LockView>| waiting_in(&l, version, q);
    // 3 waits ahead of this agent (1), which forwards the view and withdraws.
    k.on_notice(&me(), waiting(5, held_by_2(5, &[3, 1])));
    k.unlock_sent(&l, &node());
    k.withdrew(&me(), &l, &node());
    assert_eq!(waiters(&k, &l), vec![agent(3)]);
    // A forward of the same version, or of an older one, shows this agent only as it was.
    assert!(!k.on_forward(&me(), &l, &node(), &agent(3), held_by_2(5, &[3, 1]), true));
    assert!(!k.on_view(&me(), &l, &node(), held_by_2(4, &[3, 1])));
    // The answer: nobody ahead of it was told, so the view stays, at its version.
    let answer = LockNotice {
        node: node(),
        lock: l.clone(),
        version: 7,
        state: EntryState::Absent,
        queue: None,
        note: Some(Box::new(Note::Unlocked)),
    };
    assert!(k.on_notice(&me(), answer));
    assert_eq!(k.view(&l, &node()).unwrap().version, 5);
    assert_eq!(waiters(&k, &l), vec![agent(3)]);
    // A newer view of the others is taken, and one from before the answer without this agent.
    assert!(k.on_view(&me(), &l, &node(), held_by_2(6, &[3, 1, 4])));
    assert_eq!(waiters(&k, &l), vec![agent(3), agent(4)]);
    assert!(!k.pending_somewhere(&me()));
    // One from before it that shows this agent holding counts without it too.
    let mut held = (*held_by_2(6, &[3])).clone();
    held.granted[0].agent = me();
    let mut k2 = k.clone();
    k2.views.clear();
    assert!(k2.on_view(&me(), &l, &node(), Arc::new(held)));
    assert!(k2.view(&l, &node()).unwrap().granted.is_empty());
    // Asking again: a forward of its new place may come before its own notice, which then
    // replaces the view it was taken out of.
    assert!(k.on_view(&me(), &l, &node(), held_by_2(9, &[3, 1])));
    assert_eq!(waiters(&k, &l), vec![agent(3), agent(1)]);
    assert!(k.on_notice(&me(), waiting(9, held_by_2(9, &[3, 1]))));
    assert!(k.pending_somewhere(&me()));
    assert!(k.on_view(&me(), &l, &node(), held_by_2(10, &[1])));
    assert_eq!(waiters(&k, &l), vec![agent(1)]);
}

#[test]
fn a_withdrawal_ends_with_the_answer_to_the_last_unlock_of_the_copy() {
    // Two unlocks of the copy outstanding; the first answer says the entry is gone, the last
    // that it is back (the intention of a request on a descendant asked in between).
    let l = lock_id!["l"];
    let mut k = Knowledge::default();
    let answer = |version: u64, state: EntryState, queue: Option<Arc<LockView>>| LockNotice {
        node: node(),
        lock: l.clone(),
        version,
        state,
        queue,
        note: Some(Box::new(Note::Unlocked)),
    };
    k.on_notice(&me(), notice(&l, 5, EntryState::Waiting(X)));
    k.unlock_sent(&l, &node());
    k.withdrew(&me(), &l, &node());
    k.unlock_sent(&l, &node());
    k.on_notice(&me(), answer(6, EntryState::Absent, None));
    // Until the last answer, this agent's place in any view is from before it left.
    assert!(k.on_view(&me(), &l, &node(), held_by_2(7, &[3, 1])));
    assert_eq!(waiters(&k, &l), vec![agent(3)]);
    k.on_notice(
        &me(),
        answer(8, EntryState::Waiting(IX), Some(held_by_2(8, &[3, 1]))),
    );
    assert_eq!(waiters(&k, &l), vec![agent(3), agent(1)]);
    assert!(k.pending_somewhere(&me()));
    assert!(k.on_view(&me(), &l, &node(), held_by_2(9, &[1, 4])));
    assert_eq!(waiters(&k, &l), vec![agent(1), agent(4)]);
}
