//! The first node (module `first_node`): the order in which a candidate asks for the election lock, and
//! what its agent is told of nodes it has not asked yet.

use super::tests::{T0, lock, member, n, requests, serve_locks_on};
use super::*;
use locks_core::proto::{AgentMessage, ServerRequest};
use locks_core::{Mode, ModeTable};
use locks_server::state_machine::LockTable;

#[test]
fn a_candidate_asks_its_first_node_then_every_node_once_it_holds_it() {
    // `b` is the first node (the smallest node up); the candidate lives on `c`.
    let mut c = member("c", 1, Role::Candidate);
    let effects = c.start(&[n("b")], T0).unwrap();
    let agent = c.agent_id().clone();
    let lock_req = ServerRequest::Lock {
        agent: agent.clone(),
        lock: lock(),
        mode: Mode::WRITE,
    };
    let watch = ServerRequest::Watch {
        watcher: agent.clone(),
        lock: lock(),
    };
    assert_eq!(
        requests(&effects),
        vec![
            (n("b"), lock_req.clone()),
            (n("b"), watch.clone()),
            (n("c"), watch),
        ]
    );
    // Granted on the first node: the request covers every node up.
    let mut table = LockTable::new(n("b"), ModeTable::standard(), 1);
    let mut more = Vec::new();
    for (to, msg) in table.handle(lock_req.clone()) {
        if to == agent {
            more.extend(c.deliver(msg, T0));
        }
    }
    more.extend(c.settle(T0));
    assert!(requests(&more).contains(&(n("c"), lock_req)), "{more:?}");
}

#[test]
fn a_candidate_forwards_views_to_agents_on_a_node_it_has_not_asked_yet() {
    // `a` is the first node; `b` goes down and comes back before the candidate on `c` holds the
    // first node, so its request does not name `b` yet.
    let mut c = member("c", 1, Role::Candidate);
    let start = c.start(&[n("a"), n("b")], T0).unwrap();
    c.node_down(&n("b"), T0);
    c.node_up(&n("b"), T0);
    c.settle(T0);
    // On the first node, the candidate waits behind an agent of `b` (which may be waiting on `c`
    // for all the candidate knows: only a forwarded view lets that agent see the cycle).
    let mut table = LockTable::new(n("a"), ModeTable::standard(), 1);
    let other = AgentId::new(n("b"), 1, 7);
    table.handle(ServerRequest::Lock {
        agent: other.clone(),
        lock: lock(),
        mode: Mode::WRITE,
    });
    let effects = serve_locks_on(&mut c, &n("a"), &mut table, &start);
    let forwarded = effects.iter().any(|e| {
        matches!(
            e,
            MemberEffect::Agent(AgentEffect::ToAgent { to, msg: AgentMessage::Forward { .. } })
                if *to == other
        )
    });
    assert!(forwarded, "{effects:?}");
}
