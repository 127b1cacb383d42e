//! The leader's node cut off from the other two of a three-node cluster (in-process nodes over
//! TCP on 127.0.0.1, cut with `Node::disconnect`), in both modes. Majority mode: the old leader
//! no longer claims to lead the moment the cut is done, gets `stepped_down`, refuses leader
//! calls for lack of a majority, and the other two elect a leader with a larger term, whose
//! confirmed writes survive the heal. Islands mode: both sides lead until the heal, as in the
//! original. Every wait is bounded; nothing is timed.

mod common;

use common::dict::{Dict, Rep, Req};
use common::{
    agreed, cluster_node, dict, eventually_finds, heal, island_dict, leaders_where, mesh, split,
};
use locks_leader::{CallError, Member};
use locks_server::Node;
use std::time::Duration;

async fn three(prefix: &str) -> Vec<Node> {
    let mut ns = Vec::new();
    for i in 0..3 {
        ns.push(cluster_node(&format!("{prefix}{i}")).await);
    }
    mesh(&ns.iter().collect::<Vec<_>>()).await;
    ns
}

async fn shutdown(nodes: &[Node]) {
    for n in nodes {
        n.shutdown().await;
    }
}

/// The index of the member that leads, and the others' indexes.
fn split_leader(dicts: &[Member<Dict>], leader: &locks_leader::MemberId) -> (usize, Vec<usize>) {
    let old = dicts
        .iter()
        .position(|d| d.id() == leader)
        .expect("the leader is one of them");
    (old, (0..dicts.len()).filter(|i| *i != old).collect())
}

#[tokio::test]
async fn majority_mode_a_cut_off_leader_steps_down_and_the_majority_elects_a_larger_term() {
    let ns = three("maj-");
    let ns = ns.await;
    let mut dicts = Vec::new();
    for node in &ns {
        dicts.push(dict(node, "partition").await);
    }
    let first = agreed(&dicts.iter().collect::<Vec<_>>(), None).await;
    let (old, rest) = split_leader(&dicts, &first.leader);
    assert!(dicts[old].is_leader());
    assert_eq!(
        dicts[old].leader_call(Req::Store("before".into(), 1)).await,
        Ok(Rep::Ok)
    );
    let others: Vec<&Node> = rest.iter().map(|&i| &ns[i]).collect();
    split(&[&ns[old]], &others).await;
    // The cut is done: the old leader's claim no longer holds, whatever its actor has handled.
    assert!(
        !dicts[old].is_leader(),
        "the cut-off leader still claims to lead"
    );
    // It steps down (its watch says no leader, its callbacks were told) ...
    leaders_where(&[&dicts[old]], |ts| ts[0].is_none()).await;
    assert!(
        matches!(dicts[old].call(Req::SteppedDown).await, Ok(Rep::Value(Some(n))) if n >= 1),
        "no stepped_down callback"
    );
    // ... and refuses leader calls: one node of three is no majority.
    assert_eq!(
        dicts[old]
            .leader_call_timeout(Req::Store("lost".into(), 2), Duration::from_secs(20))
            .await,
        Err(CallError::NoMajority { up: 1, group: 3 })
    );
    // The other two elect a leader with a larger term.
    let majority: Vec<&Member<Dict>> = rest.iter().map(|&i| &dicts[i]).collect();
    let second = agreed(&majority, Some(&first)).await;
    assert!(second > first, "{second} > {first}");
    assert!(!dicts[old].is_leader());
    assert_eq!(majority.iter().filter(|d| d.is_leader()).count(), 1);
    assert_eq!(
        majority[0]
            .leader_call(Req::Store("during".into(), 3))
            .await,
        Ok(Rep::Ok)
    );
    // Heal: one leader for all, no confirmed write lost, the refused one nowhere.
    heal(&[&ns[old]], &others).await;
    let everyone: Vec<&Member<Dict>> = dicts.iter().collect();
    let third = agreed(&everyone, None).await;
    assert!(third >= second, "{third} >= {second}");
    for d in &dicts {
        eventually_finds(d, "before", Some(1)).await;
        eventually_finds(d, "during", Some(3)).await;
        assert_eq!(d.call(Req::Find("lost".into())).await, Ok(Rep::Value(None)));
    }
    shutdown(&ns).await;
}

#[tokio::test]
async fn islands_mode_a_cut_off_leader_keeps_leading_beside_the_other_island_leader() {
    let ns = three("isl-").await;
    let mut dicts = Vec::new();
    for node in &ns {
        dicts.push(island_dict(node, "partition").await);
    }
    let first = agreed(&dicts.iter().collect::<Vec<_>>(), None).await;
    let (old, rest) = split_leader(&dicts, &first.leader);
    let others: Vec<&Node> = rest.iter().map(|&i| &ns[i]).collect();
    split(&[&ns[old]], &others).await;
    let majority: Vec<&Member<Dict>> = rest.iter().map(|&i| &dicts[i]).collect();
    let second = agreed(&majority, Some(&first)).await;
    // The original's behaviour: each island leads, the old leader included.
    assert!(second > first, "{second} > {first}");
    assert!(dicts[old].is_leader());
    assert_eq!(dicts[old].leader(), Some(first.clone()));
    assert_eq!(
        dicts[old].leader_call(Req::Store("left".into(), 1)).await,
        Ok(Rep::Ok)
    );
    heal(&[&ns[old]], &others).await;
    let everyone: Vec<&Member<Dict>> = dicts.iter().collect();
    agreed(&everyone, None).await;
    assert_eq!(dicts.iter().filter(|d| d.is_leader()).count(), 1);
    shutdown(&ns).await;
}
