//! Probes: a waiter confirms its edge from first-hand knowledge, refutes it when it does not
//! need the copy, and waits for its own news when the probe knows more than it does.

use super::*;
use locks_core::proto::{Probe, ProbeEdge};

fn edge(waiter: u64, blocker: u64, lock: &LockId, node: NodeId, version: u64) -> ProbeEdge {
    ProbeEdge {
        waiter: agent(waiter),
        blocker: agent(blocker),
        lock: lock.clone(),
        node,
        version,
    }
}

fn probes(effects: &[AgentEffect]) -> Vec<(AgentId, Probe)> {
    to_agents(effects)
        .into_iter()
        .filter_map(|(to, m)| match m {
            AgentMessage::Probe(p) => Some((to, p)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_waiter_that_does_not_need_the_copy_refutes_the_probe_to_its_victim() {
    let (l, k) = (lock_id!["l"], lock_id!["k"]);
    // Agent 1 gets L on n2 (Any) and stays queued on n1 behind agent 3.
    let mut c = core(1, Options::default());
    c.request(l.clone(), S, &[n1(), node("n2")], Req::Any)
        .unwrap();
    c.receive(notice(&node("n2"), &l, 2, EntryState::Granted(S)));
    c.receive(waiting_notice(&l, S, view(4, &[(3, X)], &[(1, S)])));
    c.settle();
    assert!(c.status().have_all_locks());
    // Agent 3, the victim, asks agent 1 to confirm that it waits for 3 on L.
    let probe = Probe {
        edges: vec![edge(1, 3, &l, n1(), 4), edge(3, 1, &k, n1(), 9)],
        next: 0,
        refuted: false,
        epoch: 0,
    };
    c.receive(AgentMessage::Probe(probe));
    let sent = probes(&c.settle());
    assert_eq!(sent.len(), 1);
    let (to, back) = &sent[0];
    assert_eq!(to, &agent(3));
    assert!(back.refuted, "the copy is not needed: {back:?}");
    assert_eq!(back.next, 0);
}

#[test]
fn a_probe_newer_than_the_waiters_view_waits_for_its_news() {
    let (l, k) = (lock_id!["l"], lock_id!["k"]);
    let mut c = core(1, Options::default());
    c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    // Agent 1 knows only that it waits for agent 2 (version 4).
    c.receive(waiting_notice(&l, X, view(4, &[(2, X)], &[(1, X)])));
    c.settle();
    // The victim saw version 6, where agent 3 holds L: agent 1 cannot tell yet.
    let probe = Probe {
        edges: vec![edge(1, 3, &l, n1(), 6), edge(3, 1, &k, n1(), 9)],
        next: 0,
        refuted: false,
        epoch: 0,
    };
    c.receive(AgentMessage::Probe(probe));
    assert!(probes(&c.settle()).is_empty(), "parked until news");
    // Its own notice of version 6 comes: the edge holds, the probe goes on to the victim.
    c.receive(waiting_notice(&l, X, view(6, &[(3, X)], &[(1, X)])));
    let sent = probes(&c.settle());
    assert_eq!(sent.len(), 1);
    let (to, on) = &sent[0];
    assert_eq!(to, &agent(3));
    assert!(!on.refuted);
    assert_eq!(on.next, 1);
    assert_eq!(on.edges[0].version, 6);
}

#[test]
fn a_victim_does_not_act_on_a_probe_that_left_before_its_news() {
    // The 2-cycle of `two_cycle`: agent 2 is the victim; its probe returns confirmed only
    // after a notice of its own entries arrived, which may have broken the cycle.
    let mut c = two_cycle(2, 1, Options::default());
    let fx = c.settle();
    let (_, mut probe) = probes(&fx).pop().expect("a probe");
    c.receive(notice(&n1(), &lock_id!["z"], 30, EntryState::Absent));
    c.settle();
    probe.next = probe.edges.len() as u32 - 1;
    c.receive(AgentMessage::Probe(probe));
    let fx = c.settle();
    assert!(
        to_servers(&fx).is_empty(),
        "no surrender on a probe from before: {fx:?}"
    );
}

/// What a victim's client is told when the server ignores its surrender (the cycle broke while
/// the probe was out): the loss, reported when the victim decided, before the surrender could
/// hand the lock to anybody; then the lock held again once the transaction holds everything,
/// at the version of the server's answer (nobody held it in between, so every later holder's
/// version is still larger). Nothing moved in the table.
#[test]
fn a_surrender_the_server_ignores_was_reported_lost_and_is_reported_held_again() {
    let (x, y) = (lock_id!["x"], lock_id!["y"]);
    let mut c = two_cycle(3, 1, Options::default());
    let fx = c.settle();
    let fx = probe_returns(&mut c, &fx);
    assert!(
        fx.iter().any(|e| matches!(e, AgentEffect::Lost(l)
            if l.lock == x && l.cause == LossCause::Surrendered)),
        "the loss is told when the victim decides: {fx:?}"
    );
    c.receive(AgentMessage::Notice(LockNotice {
        node: n1(),
        lock: x.clone(),
        version: 5,
        state: EntryState::Granted(X),
        queue: Some(view(5, &[(3, X)], &[(1, X)])),
        note: Some(Box::new(Note::NotSurrendered { version: 5 })),
    }));
    c.settle();
    c.receive(notice(&n1(), &y, 7, EntryState::Granted(X)));
    let fx = c.settle();
    let granted: Vec<&GrantedLock> = fx
        .iter()
        .filter_map(|e| match e {
            AgentEffect::Granted(g) => Some(g),
            _ => None,
        })
        .collect();
    let again = granted
        .iter()
        .find(|g| g.lock == x)
        .expect("x is told held again");
    assert_eq!(again.nodes[..], [(n1(), 5)], "at the version of the answer");
    assert!(c.status().have_all_locks());
}
