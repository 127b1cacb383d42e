//! A randomized, bounded sequence of netsplits, heals, joins of new nodes and stores over five
//! in-process nodes connected over TCP on 127.0.0.1 (Erlang's quarantined `random_netsplits`,
//! the original's test suite, which must pass here). After every command each island must agree on
//! one leader of its own; the run ends healed, with one leader and every acknowledged store on
//! every member. Islands mode: the original's behaviour. The sequence is a function of the seed; every wait is bounded. The same
//! exploration over many more seeds runs on the deterministic simulation (`sim_leader.rs`).

mod common;

use common::dict::{Dict, Rep, Req};
use common::{agreed, bounded, cluster_node, eventually_finds, island_dict, wait_sees};
use locks_leader::Member;
use locks_server::Node;
use std::collections::BTreeMap;
use std::time::Duration;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Rewires the cluster into `islands` (lists of node indexes): every pair inside an island
/// connected, every pair across islands kept apart (from both sides); waits until each node sees
/// exactly its island.
async fn rewire(nodes: &[Node], islands: &[Vec<usize>]) {
    let island_of = |i: usize| islands.iter().position(|is| is.contains(&i));
    for i in 0..nodes.len() {
        for j in 0..nodes.len() {
            if i != j && island_of(i) != island_of(j) {
                bounded(nodes[i].disconnect(nodes[j].name())).await.unwrap();
            }
        }
    }
    for i in 0..nodes.len() {
        for j in 0..i {
            if island_of(i) == island_of(j) {
                bounded(nodes[i].reconnect(nodes[j].name())).await.unwrap();
                bounded(nodes[j].reconnect(nodes[i].name())).await.unwrap();
                bounded(nodes[i].connect(nodes[j].local_addr().unwrap()))
                    .await
                    .unwrap();
            }
        }
    }
    for island in islands {
        let names: Vec<&str> = island.iter().map(|&i| nodes[i].name()).collect();
        for &i in island {
            wait_sees(&nodes[i], &names).await;
        }
    }
}

async fn run(seed: u64, steps: usize) {
    let mut rng = Rng(seed * 0x9E37_79B9 + 1);
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..5 {
        nodes.push(cluster_node(&format!("r{seed}-{i}")).await);
    }
    let mut islands: Vec<Vec<usize>> = vec![(0..5).collect()];
    rewire(&nodes, &islands).await;
    let mut members: Vec<(usize, Member<Dict>)> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        members.push((i, island_dict(node, "ape").await));
    }
    let mut acked: BTreeMap<String, i64> = BTreeMap::new();
    let mut next_store = 0;
    for step in 0..steps {
        match rng.below(4) {
            0 => {
                let k = 2 + rng.below(2);
                let mut new = vec![Vec::new(); k];
                for i in 0..nodes.len() {
                    new[rng.below(k)].push(i);
                }
                new.retain(|is| !is.is_empty());
                islands = new;
            }
            1 => islands = vec![(0..nodes.len()).collect()],
            2 if nodes.len() < 7 => {
                let i = nodes.len();
                nodes.push(cluster_node(&format!("r{seed}-{i}")).await);
                let buddy = rng.below(i);
                if let Some(is) = islands.iter_mut().find(|is| is.contains(&buddy)) {
                    is.push(i);
                }
            }
            _ => {
                let (_, m) = &members[rng.below(members.len())];
                let key = format!("s{next_store}");
                next_store += 1;
                let stored = m
                    .leader_call_timeout(
                        Req::Store(key.clone(), next_store),
                        Duration::from_secs(10),
                    )
                    .await;
                if stored == Ok(Rep::Ok) {
                    acked.insert(key, next_store);
                }
            }
        }
        rewire(&nodes, &islands).await;
        if members.len() < nodes.len() {
            let i = members.len();
            members.push((i, island_dict(&nodes[i], "ape").await));
        }
        for island in &islands {
            let ms: Vec<&Member<Dict>> = members
                .iter()
                .filter(|(i, _)| island.contains(i))
                .map(|(_, m)| m)
                .collect();
            let term = match tokio::time::timeout(common::BOUND / 2, agreed(&ms, None)).await {
                Ok(t) => t,
                Err(_) => {
                    let mut infos = Vec::new();
                    for m in &ms {
                        infos.push(format!("{:?}", m.info().await));
                    }
                    panic!(
                        "seed {seed} step {step}: island {island:?} of {islands:?} never agreed:\n{}",
                        infos.join("\n")
                    );
                }
            };
            assert!(
                ms.iter().any(|m| m.id() == &term.leader),
                "seed {seed} step {step}: the leader is in the island"
            );
        }
    }
    rewire(&nodes, &[(0..nodes.len()).collect()]).await;
    let all: Vec<&Member<Dict>> = members.iter().map(|(_, m)| m).collect();
    agreed(&all, None).await;
    assert_eq!(all.iter().filter(|m| m.is_leader()).count(), 1);
    for m in &all {
        for (k, v) in &acked {
            eventually_finds(m, k, Some(*v)).await;
        }
    }
    for n in &nodes {
        n.shutdown().await;
    }
}

/// Seeds 1 and 2 by default; `LEADER_TCP_SEEDS=n` runs seeds 1 to n.
#[tokio::test]
async fn random_netsplits_over_tcp() {
    let last = std::env::var("LEADER_TCP_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    for seed in 1..=last {
        run(seed, 12).await;
    }
}
