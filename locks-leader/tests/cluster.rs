//! The multi-node scenarios of the Erlang leader suite (tests 24-28) and the death of the
//! leader's node, with in-process nodes connected over TCP on 127.0.0.1: the netsplit tests in
//! islands mode (the original's behaviour), the others in majority mode (the default). Netsplits cut connections with `Node::disconnect`. Every wait is bounded; nothing
//! is timed.

mod common;

use common::dict::{Dict, Rep, Req};
use common::{
    agreed, bounded, cluster_node, dict, eventually_finds, heal, island_dict, leaders_where, mesh,
    split,
};
use locks_leader::{Role, start};
use locks_server::Node;

async fn nodes(prefix: &str, n: usize) -> Vec<Node> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(cluster_node(&format!("{prefix}{i}")).await);
    }
    out
}

async fn shutdown(nodes: &[Node]) {
    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test]
async fn erlang_gdict_all_nodes() {
    for n in 2..=5 {
        let ns = nodes(&format!("all{n}-"), n).await;
        mesh(&ns.iter().collect::<Vec<_>>()).await;
        let mut dicts = Vec::new();
        for node in &ns {
            dicts.push(dict(node, "gdict_all_nodes").await);
        }
        let refs: Vec<_> = dicts.iter().collect();
        let term = agreed(&refs, None).await;
        assert_eq!(dicts.iter().filter(|d| d.is_leader()).count(), 1, "{term}");
        assert_eq!(
            dicts[0].leader_call(Req::Store("a".into(), 1)).await,
            Ok(Rep::Ok)
        );
        for d in &dicts {
            eventually_finds(d, "a", Some(1)).await;
        }
        shutdown(&ns).await;
    }
}

#[tokio::test]
async fn erlang_gdict_simple_netsplit() {
    let ns = nodes("simple-", 2).await;
    let (a, b) = (&ns[0], &ns[1]);
    mesh(&[a, b]).await;
    let da = island_dict(a, "simple_netsplit").await;
    let db = island_dict(b, "simple_netsplit").await;
    let before = agreed(&[&da, &db], None).await;
    assert_eq!(da.call(Req::Find("x".into())).await, Ok(Rep::Value(None)));
    assert_eq!(db.call(Req::Find("x".into())).await, Ok(Rep::Value(None)));
    split(&[a], &[b]).await;
    // Each island elects its own leader: the two differ.
    let apart = leaders_where(&[&da, &db], |ts| match ts {
        [Some(x), Some(y)] => x.leader == *da.id() && y.leader == *db.id(),
        _ => false,
    })
    .await;
    assert_ne!(apart[0], apart[1]);
    heal(&[a], &[b]).await;
    let after = agreed(&[&da, &db], None).await;
    assert!(after > before, "{after} > {before}");
    shutdown(&ns).await;
}

#[tokio::test]
async fn erlang_gdict_netsplit() {
    for n in 3..=5 {
        let ns = nodes(&format!("split{n}-"), n).await;
        let left: Vec<&Node> = ns[..2].iter().collect();
        let right: Vec<&Node> = ns[2..].iter().collect();
        // Partitioned before the dictionaries start.
        mesh(&left).await;
        mesh(&right).await;
        let mut dl = Vec::new();
        for node in &left {
            dl.push(island_dict(node, "gdict_netsplit").await);
        }
        let mut dr = Vec::new();
        for node in &right {
            dr.push(island_dict(node, "gdict_netsplit").await);
        }
        let (rl, rr): (Vec<_>, Vec<_>) = (dl.iter().collect(), dr.iter().collect());
        let x = agreed(&rl, None).await;
        let y = agreed(&rr, None).await;
        assert_ne!(x.leader, y.leader);
        assert_eq!(
            dl[0].leader_call(Req::Store("a".into(), 1)).await,
            Ok(Rep::Ok)
        );
        assert_eq!(
            dr[0].leader_call(Req::Store("b".into(), 2)).await,
            Ok(Rep::Ok)
        );
        eventually_finds(&dl[1], "a", Some(1)).await;
        for d in &dr {
            eventually_finds(d, "b", Some(2)).await;
            assert_eq!(d.call(Req::Find("a".into())).await, Ok(Rep::Value(None)));
        }
        for d in &dl {
            assert_eq!(d.call(Req::Find("b".into())).await, Ok(Rep::Value(None)));
        }
        // Heal: one leader for all, and the islands' stores merged.
        let all: Vec<&Node> = ns.iter().collect();
        mesh(&all).await;
        let everyone: Vec<_> = dl.iter().chain(dr.iter()).collect();
        let z = agreed(&everyone, None).await;
        assert!(z > x && z > y, "{z} above {x} and {y}");
        for d in &everyone {
            eventually_finds(d, "a", Some(1)).await;
            eventually_finds(d, "b", Some(2)).await;
        }
        shutdown(&ns).await;
    }
}

#[tokio::test]
async fn erlang_late_join() {
    let ns = nodes("late-", 4).await;
    let early: Vec<&Node> = ns[..3].iter().collect();
    mesh(&early).await;
    let mut dicts = Vec::new();
    for node in &early {
        dicts.push(dict(node, "late_join").await);
    }
    agreed(&dicts.iter().collect::<Vec<_>>(), None).await;
    assert_eq!(
        dicts[0].leader_call(Req::Store("seed".into(), 7)).await,
        Ok(Rep::Ok)
    );
    for d in &dicts {
        eventually_finds(d, "seed", Some(7)).await;
    }
    mesh(&ns.iter().collect::<Vec<_>>()).await;
    dicts.push(dict(&ns[3], "late_join").await);
    agreed(&dicts.iter().collect::<Vec<_>>(), None).await;
    eventually_finds(&dicts[3], "seed", Some(7)).await;
    assert_eq!(
        dicts[3]
            .leader_call(Req::Store("from_late".into(), 1))
            .await,
        Ok(Rep::Ok)
    );
    for d in &dicts {
        eventually_finds(d, "from_late", Some(1)).await;
    }
    shutdown(&ns).await;
}

#[tokio::test]
async fn erlang_start_incremental() {
    for n in 2..=5 {
        let ns = nodes(&format!("incr{n}-"), n).await;
        let mut dicts = Vec::new();
        for i in 0..n {
            mesh(&ns[..=i].iter().collect::<Vec<_>>()).await;
            dicts.push(dict(&ns[i], "start_incremental").await);
            if i == 0 {
                assert_eq!(
                    dicts[0].leader_call(Req::Store("a".into(), 1)).await,
                    Ok(Rep::Ok)
                );
            }
            agreed(&dicts.iter().collect::<Vec<_>>(), None).await;
            for d in &dicts {
                eventually_finds(d, "a", Some(1)).await;
            }
        }
        shutdown(&ns).await;
    }
}

#[tokio::test]
async fn leader_node_shutdown_elects_a_new_leader_with_a_larger_term() {
    let ns = nodes("death-", 3).await;
    mesh(&ns.iter().collect::<Vec<_>>()).await;
    let mut dicts = Vec::new();
    for node in &ns {
        dicts.push(dict(node, "death").await);
    }
    let first = agreed(&dicts.iter().collect::<Vec<_>>(), None).await;
    assert_eq!(
        dicts[0].leader_call(Req::Store("k".into(), 3)).await,
        Ok(Rep::Ok)
    );
    let dead = dicts
        .iter()
        .position(|d| d.id() == &first.leader)
        .expect("the leader is one of them");
    ns[dead].shutdown().await;
    let rest: Vec<_> = dicts
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != dead)
        .map(|(_, d)| d)
        .collect();
    let second = agreed(&rest, Some(&first)).await;
    assert!(second > first, "{second} > {first}");
    assert_eq!(rest.iter().filter(|d| d.is_leader()).count(), 1);
    for d in &rest {
        eventually_finds(d, "k", Some(3)).await;
    }
    assert_eq!(
        rest[0].leader_call(Req::Store("after".into(), 4)).await,
        Ok(Rep::Ok)
    );
    for d in &rest {
        eventually_finds(d, "after", Some(4)).await;
    }
    let alive: Vec<Node> = ns
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != dead)
        .map(|(_, n)| n)
        .collect();
    shutdown(&alive).await;
    let _ = bounded(async {}).await;
}

/// Majority mode over two candidates and a worker on three nodes: the worker's node counts
/// among the group's nodes (its lock server holds the election lock like any other), so when
/// the leader's node goes, the other candidate holds a majority and the worker follows it.
#[tokio::test]
async fn a_workers_node_counts_towards_the_majority() {
    let ns = nodes("worker-", 3).await;
    mesh(&ns.iter().collect::<Vec<_>>()).await;
    let candidates = [
        dict(&ns[0], "with_worker").await,
        dict(&ns[1], "with_worker").await,
    ];
    let worker = bounded(start(&ns[2], "with_worker", Dict::default(), Role::Worker))
        .await
        .unwrap();
    let first = agreed(&[&candidates[0], &candidates[1], &worker], None).await;
    assert_eq!(
        worker.leader_call(Req::Store("k".into(), 1)).await,
        Ok(Rep::Ok)
    );
    let dead = candidates
        .iter()
        .position(|d| d.id() == &first.leader)
        .expect("a candidate leads");
    let other = &candidates[1 - dead];
    ns[dead].shutdown().await;
    let second = agreed(&[other, &worker], Some(&first)).await;
    assert_eq!(&second.leader, other.id());
    assert!(second > first, "{second} > {first}");
    eventually_finds(&worker, "k", Some(1)).await;
    assert_eq!(
        worker.leader_call(Req::Store("after".into(), 2)).await,
        Ok(Rep::Ok)
    );
    ns[1 - dead].shutdown().await;
    ns[2].shutdown().await;
}
