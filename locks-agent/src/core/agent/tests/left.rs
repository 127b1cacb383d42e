//! Copies the agent left for good: forgotten once nothing is outstanding, and a view of one,
//! however late, never shows the agent there again.

use super::*;

/// The server's answer to agent 1's `Unlock` of `lock` on `node`: its entry is gone.
fn unlocked(node: &NodeId, lock: &LockId, version: u64) -> AgentMessage {
    AgentMessage::Notice(LockNotice {
        node: node.clone(),
        lock: lock.clone(),
        version,
        state: EntryState::Absent,
        queue: None,
        note: Some(Box::new(Note::Unlocked)),
    })
}

#[test]
fn a_session_of_ever_new_locks_keeps_only_what_it_holds() {
    let nodes = [n1(), node("n2"), node("n3")];
    let mut c = core(1, Options::default());
    let held = lock_id!["held"];
    hold(&mut c, &held, X, 1);
    let mut version = 1;
    for i in 0..200u64 {
        let l = lock_id!["jobs", i];
        c.request(l.clone(), X, &nodes, Req::Majority).unwrap();
        for n in &nodes {
            version += 1;
            c.receive(notice(
                n,
                &lock_id!["jobs"],
                version,
                EntryState::Granted(IX),
            ));
            c.receive(notice(n, &l, version, EntryState::Granted(X)));
        }
        c.settle();
        assert!(c.status().have_all_locks(), "{:?}", c.status());
        c.unlock(&l).unwrap();
        for n in &nodes {
            version += 1;
            c.receive(unlocked(n, &lock_id!["jobs"], version));
            c.receive(unlocked(n, &l, version));
        }
        c.settle();
    }
    // What it holds, and nothing of the 200 locks nor of their parent.
    assert_eq!(c.knowledge.copy_count(), 1);
    assert_eq!(c.knowledge.held(&held, &n1()), Some(X));
}

#[test]
fn a_copy_still_asked_for_as_an_ancestor_is_kept() {
    let mut c = core(1, Options::default());
    let (parent, child) = (lock_id!["p"], lock_id!["p", "c"]);
    c.request(child.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(notice(&n1(), &parent, 2, EntryState::Granted(IX)));
    c.receive(notice(&n1(), &child, 2, EntryState::Granted(X)));
    c.settle();
    // The server took the parent's entry (as it would on a node's restart): the child's
    // request still asks for it, so its version stays known.
    c.receive(notice(&n1(), &parent, 3, EntryState::Absent));
    c.settle();
    assert_eq!(c.knowledge.copy_count(), 2);
    // A notice older than the one that said the entry is gone changes nothing.
    c.receive(notice(&n1(), &parent, 2, EntryState::Granted(IX)));
    assert_eq!(c.knowledge.held(&parent, &n1()), None);
}

#[test]
fn a_late_view_of_a_forgotten_copy_does_not_show_the_agent_there() {
    let l = lock_id!["l"];
    let mut c = core(1, Options::default());
    hold(&mut c, &l, X, 4);
    c.unlock(&l).unwrap();
    c.receive(unlocked(&n1(), &l, 10));
    c.settle();
    assert_eq!(c.knowledge.copy_count(), 0);
    // Agent 3 forwards a view from when agent 1 held the lock and 3 waited: agent 1 is not
    // there any more, and no edge may say that 3 waits for it.
    c.receive(forward(3, &l, view(6, &[(1, X)], &[(3, X)])));
    let stored = c.knowledge.view(&l, &n1()).expect("others' waits are kept");
    assert!(!stored.holds(&agent(1)), "{stored:?}");
    c.settle();
    assert_eq!(c.status(), TransactionStatus::NoLocks);
}
