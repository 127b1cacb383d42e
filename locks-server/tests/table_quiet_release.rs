//! Rule 3's exception, the quiet release: a local holder that ends hands the lock on without
//! telling the waiters that already waited for whoever it lets in, and the next notice to an
//! older pending entry of that lock goes to all of them. The oracle of `table_proptest.rs`
//! checks the waiters' views against the queues over random operations; these are the cases
//! one by one.

mod common;

use common::*;
use locks_core::proto::{EntryState, ServerRequest};
use locks_core::{AgentId, LockId, Mode, NodeId, lock_id};
use locks_server::{Effects, LockTable};

/// The agents told anything by `fx`, in order.
fn told(fx: &Effects) -> Vec<String> {
    notices(fx).into_iter().map(|(to, _, _)| to).collect()
}

/// A hot lock: T1 holds it in `X`, T2, T3 and T4 wait for `X` in that order.
fn hot(tb: &mut LockTable, l: &LockId) {
    for n in 1..=4 {
        lock(tb, n, l, Mode::X);
    }
}

#[test]
fn ending_holders_of_a_hot_lock_tell_each_waiter_only_of_its_own_grant() {
    let mut tb = table();
    let l = lock_id!["hot"];
    hot(&mut tb, &l);
    let fx = remove(&mut tb, 1);
    assert_eq!(
        notices(&fx),
        vec![("T2".into(), l.clone(), EntryState::Granted(Mode::X))]
    );
    // The new holder gets the queue (rule 4): it learns who waits for it first hand.
    let queue = notice_to(&fx, 2, &l).and_then(|n| n.queue.clone()).unwrap();
    assert_eq!(queue.waiting.len(), 2);
    let fx = remove(&mut tb, 2);
    assert_eq!(told(&fx), vec!["T3"]);
    // A transaction that queues now is told the queue as it is, and nobody else hears of it.
    let fx = lock(&mut tb, 5, &l, Mode::X);
    assert_eq!(told(&fx), vec!["T5"]);
    let fx = remove(&mut tb, 3);
    assert_eq!(told(&fx), vec!["T4"]);
}

#[test]
fn after_a_quiet_release_the_next_notice_to_an_older_waiter_goes_to_every_waiter() {
    let mut tb = table();
    let l = lock_id!["hot"];
    hot(&mut tb, &l);
    assert_eq!(told(&remove(&mut tb, 1)), vec!["T2"]);
    // T3 asks again for what it waits for: it is answered where it stands, and T4, which
    // missed the release too, is told with it.
    let fx = lock(&mut tb, 3, &l, Mode::S);
    assert_eq!(told(&fx), vec!["T3", "T4"]);
    let now = tb.view(&l).unwrap();
    for n in [3, 4] {
        assert_eq!(*notice_to(&fx, n, &l).unwrap().queue.clone().unwrap(), now);
    }
    // Everyone pending is up to date again: the same question tells T3 alone.
    assert_eq!(told(&lock(&mut tb, 3, &l, Mode::S)), vec!["T3"]);
}

#[test]
fn a_grant_a_waiter_could_share_is_told_to_every_waiter() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::X);
    lock(&mut tb, 2, &l, Mode::S);
    lock(&mut tb, 3, &l, Mode::X);
    lock(&mut tb, 4, &l, Mode::IS);
    // T2 gets S; T4 (IS) would share it, and waits now only because T3 is ahead of it: it
    // waits for T2 through T3, which its last view does not show.
    let fx = remove(&mut tb, 1);
    assert_eq!(told(&fx), vec!["T2", "T3", "T4"]);
}

#[test]
fn a_pending_conversion_makes_a_release_loud() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::S);
    lock(&mut tb, 2, &l, Mode::S);
    lock(&mut tb, 3, &l, Mode::X);
    // T2 converts S -> X behind T1's S.
    lock(&mut tb, 2, &l, Mode::X);
    let fx = remove(&mut tb, 1);
    assert_eq!(told(&fx), vec!["T2", "T3"]);
}

#[test]
fn an_unlock_or_a_remote_agent_s_removal_tells_every_waiter() {
    // An unlock: the holder still runs, and could confirm a wait it no longer has.
    let mut tb = table();
    let l = lock_id!["hot"];
    hot(&mut tb, &l);
    let fx = unlock(&mut tb, 1, &l);
    assert_eq!(told(&fx), vec!["T1", "T2", "T3", "T4"]);

    // A holder of another node: its removal may come from that node leaving the cluster
    // while the agent still runs.
    let mut tb = table();
    let remote = AgentId::new(NodeId::new("n2").unwrap(), 1, 9);
    let fx = tb.handle(ServerRequest::Lock {
        agent: remote.clone(),
        lock: l.clone(),
        mode: Mode::X,
    });
    assert_eq!(fx.len(), 1);
    for n in 2..=4 {
        lock(&mut tb, n, &l, Mode::X);
    }
    let fx = tb.handle(ServerRequest::RemoveAgent { agent: remote });
    assert_eq!(told(&fx), vec!["T2", "T3", "T4"]);
}

#[test]
fn a_removed_waiter_is_told_ahead_of_as_ever() {
    let mut tb = table();
    let l = lock_id!["hot"];
    hot(&mut tb, &l);
    // T2 leaves the queue: those behind it are told, since their views showed it ahead.
    let fx = remove(&mut tb, 2);
    assert_eq!(told(&fx), vec!["T3", "T4"]);
}
