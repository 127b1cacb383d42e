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

/// Agent 1 waits for `holder` on L (version 4) and has taken in agent 3's probe of its edge to
/// 3 on L at `probe_version`, not handled yet.
fn probed_waiter(holder: u64, probe_version: u64) -> AgentCore {
    let (l, k) = (lock_id!["l"], lock_id!["k"]);
    let mut c = core(1, Options::default());
    c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(waiting_notice(&l, X, view(4, &[(holder, X)], &[(1, X)])));
    c.settle();
    c.receive(AgentMessage::Probe(Probe {
        edges: vec![edge(1, 3, &l, n1(), probe_version), edge(3, 1, &k, n1(), 9)],
        next: 0,
        refuted: false,
        epoch: 0,
    }));
    c
}

#[test]
fn a_probe_taken_in_before_the_end_goes_back_refuted() {
    let mut c = probed_waiter(3, 4);
    let sent = probes(&c.end());
    assert_eq!(
        sent.len(),
        1,
        "the victim must not wait for a probe that went with the end"
    );
    let (to, back) = &sent[0];
    assert_eq!(to, &agent(3));
    assert!(back.refuted);
    assert_eq!(back.next, 0);
}

#[test]
fn a_probe_parked_for_news_goes_back_refuted_at_the_end() {
    // Agent 1's view (version 4) shows agent 2 holding L; the probe saw version 6, where agent 3
    // holds it: the settle parks the probe until agent 1's news.
    let mut c = probed_waiter(2, 6);
    assert!(probes(&c.settle()).is_empty(), "parked until news");
    let sent = probes(&c.end());
    assert_eq!(sent.len(), 1);
    assert!(sent[0].1.refuted);
}

#[test]
fn a_probe_that_comes_after_the_end_goes_back_refuted() {
    let (l, k) = (lock_id!["l"], lock_id!["k"]);
    let mut c = core(1, Options::default());
    c.end();
    let probe = Probe {
        edges: vec![edge(1, 3, &l, n1(), 4), edge(3, 1, &k, n1(), 9)],
        next: 0,
        refuted: false,
        epoch: 0,
    };
    let sent = probes(&c.receive(AgentMessage::Probe(probe.clone())));
    assert_eq!(sent.len(), 1);
    assert!(sent[0].1.refuted);
    // One already refuted, or not asking agent 1, is not sent anywhere.
    let refuted = Probe {
        refuted: true,
        ..probe.clone()
    };
    assert!(probes(&c.receive(AgentMessage::Probe(refuted))).is_empty());
    let not_ours = Probe { next: 1, ..probe };
    assert!(probes(&c.receive(AgentMessage::Probe(not_ours))).is_empty());
}

/// Agent 1's `All` request on L over n1 and n2 waits on its gate (n1, behind agent 2), so it
/// left its copy on n2, granted there at version 5: its unlock is on its way.
fn left_n2() -> AgentCore {
    let l = lock_id!["l"];
    let mut c = core(1, Options::default());
    c.request(l.clone(), X, &[n1(), node("n2")], Req::All)
        .unwrap();
    c.receive(notice(&node("n2"), &l, 5, EntryState::Granted(X)));
    c.receive(waiting_notice(&l, X, view(3, &[(2, X)], &[(1, X)])));
    c.settle();
    assert!(c.left_copy(&l, &node("n2")));
    c
}

#[test]
fn a_probe_through_a_copy_left_goes_back_to_a_victim_not_queued_there() {
    let (l, k, m) = (lock_id!["l"], lock_id!["k"], lock_id!["m"]);
    let mut c = left_n2();
    // Victim 9 saw agent 3 wait for agent 1 on L at n2 (version 5), and 3 confirmed it. Agent
    // 1 left that copy; 9 holds only a forwarded view of it, which nobody will replace.
    let probe = Probe {
        edges: vec![
            edge(3, 1, &l, node("n2"), 5),
            edge(1, 2, &l, n1(), 3),
            edge(2, 9, &k, n1(), 7),
            edge(9, 3, &m, n1(), 8),
        ],
        next: 1,
        refuted: false,
        epoch: 0,
    };
    c.receive(AgentMessage::Probe(probe));
    let sent = probes(&c.settle());
    assert_eq!(sent.len(), 1, "the victim must hear that the cycle broke");
    let (to, back) = &sent[0];
    assert_eq!(to, &agent(9));
    assert!(back.refuted);
    assert_eq!(back.next, 0, "the edge into agent 1 on the copy it left");
    assert_eq!(back.edges[0].version, 5);
}

#[test]
fn a_probe_through_a_copy_left_is_dropped_when_its_victim_waits_there() {
    let (l, k) = (lock_id!["l"], lock_id!["k"]);
    let mut c = left_n2();
    // The victim itself waits behind agent 1 on L at n2: the server tells it of the unlock.
    let probe = Probe {
        edges: vec![
            edge(1, 2, &l, n1(), 3),
            edge(2, 9, &k, n1(), 7),
            edge(9, 1, &l, node("n2"), 5),
        ],
        next: 0,
        refuted: false,
        epoch: 0,
    };
    c.receive(AgentMessage::Probe(probe));
    let sent = probes(&c.settle());
    assert!(sent.is_empty(), "{sent:?}");
}
