//! Members on one node: the local scenario of the Erlang leader suite (test
//! 23), a leader's departure, workers, and calls before any leader exists. Every wait is
//! bounded; nothing is timed.

mod common;

use common::dict::{Dict, Rep, Req};
use common::{BOUND, bounded};
use locks_leader::{CallError, Member, Role, start};
use locks_server::{Node, NodeConfig};

async fn node(name: &str) -> Node {
    Node::start(NodeConfig::new(name)).await.unwrap()
}

async fn dict(node: &Node, group: &str, role: Role) -> Member<Dict> {
    bounded(start(node, group, Dict::default(), role))
        .await
        .unwrap()
}

/// Waits until every member believes in the same leader, and returns it.
async fn same_leader(members: &[&Member<Dict>]) -> locks_leader::Term {
    same_new_leader(members, None).await
}

/// Waits until every member believes in the same leader other than `old`, and returns it.
async fn same_new_leader(
    members: &[&Member<Dict>],
    old: Option<&locks_leader::Term>,
) -> locks_leader::Term {
    bounded(async {
        loop {
            let mut rxs: Vec<_> = members.iter().map(|m| m.changes()).collect();
            let terms: Vec<_> = rxs.iter_mut().map(|rx| rx.current()).collect();
            if let Some(Some(first)) = terms.first()
                && Some(first) != old
                && terms.iter().all(|t| t.as_ref() == Some(first))
            {
                return first.clone();
            }
            // Wait for any of them to change.
            let waits = rxs
                .into_iter()
                .map(|mut rx| Box::pin(async move { rx.changed().await }));
            let _ = futures::future::select_all(waits).await;
        }
    })
    .await
}

#[tokio::test]
async fn erlang_local_dict() {
    let n = node("local").await;
    let dicts = [
        dict(&n, "local_dict", Role::Candidate).await,
        dict(&n, "local_dict", Role::Candidate).await,
        dict(&n, "local_dict", Role::Candidate).await,
    ];
    for (i, d) in dicts.iter().enumerate() {
        // A store made before a leader exists waits for one; a follower applies the leader's
        // broadcast before its caller sees the reply.
        let v = 17 + i as i64;
        assert_eq!(d.leader_call(Req::Store("a".into(), v)).await, Ok(Rep::Ok));
        assert_eq!(d.call(Req::Find("a".into())).await, Ok(Rep::Value(Some(v))));
    }
    let leader = same_leader(&dicts.iter().collect::<Vec<_>>()).await;
    assert_eq!(
        dicts.iter().filter(|d| d.is_leader()).count(),
        1,
        "one leader: {leader}"
    );
    for d in &dicts {
        assert_eq!(bounded(d.candidates()).await.unwrap().len(), 3);
    }
    n.shutdown().await;
}

#[tokio::test]
async fn a_lone_candidate_leads_and_a_worker_follows_it() {
    let n = node("lone").await;
    let c = dict(&n, "g", Role::Candidate).await;
    let term = bounded(c.wait_for_leader()).await.unwrap();
    assert_eq!(&term.leader, c.id());
    assert!(c.is_leader());
    let w = dict(&n, "g", Role::Worker).await;
    assert_eq!(bounded(w.wait_for_leader()).await.unwrap(), term);
    // The worker's leader call goes to the leader, and the worker sees the broadcast first.
    assert_eq!(w.leader_call(Req::Store("k".into(), 1)).await, Ok(Rep::Ok));
    assert_eq!(w.call(Req::Find("k".into())).await, Ok(Rep::Value(Some(1))));
    assert_eq!(bounded(c.workers()).await.unwrap(), vec![w.id().clone()]);
    assert_eq!(bounded(w.candidates()).await.unwrap(), vec![c.id().clone()]);
    // A worker alone never leads.
    c.stop().await;
    let mut rx = w.changes();
    bounded(rx.wait_for(|t| t.is_none())).await.unwrap();
    assert_eq!(
        w.leader_call_timeout(Req::Find("k".into()), std::time::Duration::from_millis(50))
            .await,
        Err(CallError::Timeout)
    );
    n.shutdown().await;
}

#[tokio::test]
async fn when_the_leader_stops_another_candidate_leads_with_a_larger_term() {
    let n = node("handover").await;
    let a = dict(&n, "g", Role::Candidate).await;
    let first = bounded(a.wait_for_leader()).await.unwrap();
    let b = dict(&n, "g", Role::Candidate).await;
    let c = dict(&n, "g", Role::Candidate).await;
    assert_eq!(same_leader(&[&a, &b, &c]).await, first);
    assert_eq!(b.leader_call(Req::Store("x".into(), 5)).await, Ok(Rep::Ok));
    a.stop().await;
    let second = same_new_leader(&[&b, &c], Some(&first)).await;
    assert!(second > first, "{second} > {first}");
    assert_ne!(second.leader, first.leader);
    // The new leader has the old one's data, and answers calls.
    assert_eq!(
        c.leader_call(Req::Find("x".into())).await,
        Ok(Rep::Value(Some(5)))
    );
    for m in [&b, &c] {
        let info = bounded(m.info()).await.unwrap();
        assert_eq!(info.candidates.len(), 2, "{info:?}");
    }
    n.shutdown().await;
}

#[test]
fn bound_is_generous() {
    assert!(BOUND.as_secs() >= 10);
}
