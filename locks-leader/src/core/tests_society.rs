//! Members finding each other and losing track of each other through the views of the election
//! lock (module `society`): who is learnt, and who is forgotten as gone.

use super::tests::{Rec, T0, lock, member, n};
use super::*;
use locks_core::Mode;
use locks_core::proto::AgentMessage;

/// A view of the election lock on `node` at `version` in which `waiting` wait.
fn watched(node: &str, version: u64, waiting: &[&AgentId]) -> AgentMessage {
    let waiting = waiting
        .iter()
        .map(|a| locks_core::proto::QueueEntry {
            agent: (*a).clone(),
            mode: Mode::WRITE,
        })
        .collect();
    AgentMessage::Watched {
        node: n(node),
        lock: lock(),
        view: Arc::new(LockView {
            version,
            waiting,
            ..LockView::default()
        }),
    }
}

/// A candidate is forgotten when the view of its own node stops listing it after listing it,
/// whatever other views say; one never listed at home stays while some view lists it and is
/// forgotten when none does.
#[test]
fn candidates_missing_from_the_views_are_forgotten() {
    let mut w = member("a", 1, Role::Worker);
    w.start(&[n("b")], T0).unwrap();
    let known = |w: &MemberCore<Rec>, a: &AgentId| w.s.members.contains_key(&MemberId::of_agent(a));

    let at_home = AgentId::new(n("b"), 1, 7);
    w.deliver(watched("b", 1, &[&at_home]), T0);
    w.deliver(watched("a", 1, &[&at_home]), T0);
    assert!(known(&w, &at_home));
    w.deliver(watched("b", 2, &[]), T0);
    assert!(!known(&w, &at_home), "gone from its own node's view");

    let elsewhere = AgentId::new(n("b"), 1, 8);
    w.deliver(watched("a", 2, &[&elsewhere]), T0);
    w.deliver(watched("b", 3, &[]), T0);
    assert!(
        known(&w, &elsewhere),
        "never listed at home, still listed on a"
    );
    w.deliver(watched("a", 3, &[]), T0);
    assert!(!known(&w, &elsewhere), "listed nowhere any more");
}
