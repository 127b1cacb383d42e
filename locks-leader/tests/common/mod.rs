//! Helpers shared by the tests of `locks-leader`.
#![allow(dead_code)]

pub mod dict;

use std::future::Future;
use std::time::Duration;

/// The bound on every wait in the tests: long enough for a loaded CI machine, short enough to
/// fail a hung test.
pub const BOUND: Duration = Duration::from_secs(30);

/// Runs `f`, failing the test if it takes longer than [`BOUND`].
pub async fn bounded<F: Future>(f: F) -> F::Output {
    locks_testing::wait::within(BOUND, "bounded wait", f).await
}

use dict::{Dict, Rep, Req};
use locks_leader::{GroupOptions, Member, Role, Term, start, start_with};
use locks_server::{Node, NodeConfig};
use std::net::SocketAddr;

pub const COOKIE: &str = "leader-tests";

/// A cluster node on 127.0.0.1 (ephemeral port) that redials quickly.
pub async fn cluster_node(name: &str) -> Node {
    let config = NodeConfig::new(name)
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie(COOKIE)
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100));
    bounded(Node::start(config)).await.unwrap()
}

/// Waits until `node` sees exactly the nodes named (itself included).
pub async fn wait_sees(node: &Node, names: &[&str]) {
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    let mut events = node.subscribe_nodes();
    bounded(async {
        loop {
            let have: Vec<String> = node.nodes().iter().map(|n| n.to_string()).collect();
            if have == want {
                return;
            }
            events.recv().await.expect("node running");
        }
    })
    .await;
}

/// Connects every pair of `nodes` (each to the earlier ones) and waits until all see all.
pub async fn mesh(nodes: &[&Node]) {
    for (i, node) in nodes.iter().enumerate() {
        for earlier in &nodes[..i] {
            bounded(node.connect(earlier.local_addr().unwrap()))
                .await
                .unwrap();
        }
    }
    let names: Vec<&str> = nodes.iter().map(|n| n.name()).collect();
    for node in nodes {
        wait_sees(node, &names).await;
    }
}

/// Cuts every connection between `a` and `b` and waits until each island sees only itself.
pub async fn split(a: &[&Node], b: &[&Node]) {
    for x in a {
        for y in b {
            bounded(x.disconnect(y.name())).await.unwrap();
        }
    }
    for island in [a, b] {
        let names: Vec<&str> = island.iter().map(|n| n.name()).collect();
        for node in island {
            wait_sees(node, &names).await;
        }
    }
}

/// Lets the islands `a` and `b` (split with [`split`]) connect again; waits until all see all.
pub async fn heal(a: &[&Node], b: &[&Node]) {
    for x in a {
        for y in b {
            bounded(x.reconnect(y.name())).await.unwrap();
        }
    }
    let all: Vec<&Node> = a.iter().chain(b.iter()).copied().collect();
    let names: Vec<&str> = all.iter().map(|n| n.name()).collect();
    for node in &all {
        wait_sees(node, &names).await;
    }
}

/// A dictionary member of `group` on `node` (majority mode, the default).
pub async fn dict(node: &Node, group: &str) -> Member<Dict> {
    bounded(start(node, group, Dict::default(), Role::Candidate))
        .await
        .unwrap()
}

/// A dictionary member of `group` on `node` in islands mode (Erlang's behaviour).
pub async fn island_dict(node: &Node, group: &str) -> Member<Dict> {
    bounded(start_with(
        node,
        group,
        Dict::default(),
        Role::Candidate,
        GroupOptions::islands(),
    ))
    .await
    .unwrap()
}

/// Waits until `pred` holds of the leaders the members believe in (in order), re-checking on
/// every change; returns them.
pub async fn leaders_where(
    members: &[&Member<Dict>],
    pred: impl Fn(&[Option<Term>]) -> bool,
) -> Vec<Option<Term>> {
    bounded(async {
        loop {
            let mut rxs: Vec<_> = members.iter().map(|m| m.changes()).collect();
            let terms: Vec<Option<Term>> = rxs.iter_mut().map(|rx| rx.current()).collect();
            if pred(&terms) {
                return terms;
            }
            let waits = rxs
                .into_iter()
                .map(|mut rx| Box::pin(async move { rx.changed().await }));
            let _ = futures::future::select_all(waits).await;
        }
    })
    .await
}

/// Waits until the members all believe in one leader (other than `not`), which is one of them
/// and believes in itself; returns its term.
pub async fn agreed(members: &[&Member<Dict>], not: Option<&Term>) -> Term {
    let ids: Vec<_> = members.iter().map(|m| m.id().clone()).collect();
    let terms = leaders_where(members, |ts| {
        let Some(Some(first)) = ts.first() else {
            return false;
        };
        Some(first) != not
            && ids.contains(&first.leader)
            && ts.iter().all(|t| t.as_ref() == Some(first))
    })
    .await;
    terms[0].clone().unwrap()
}

/// Waits until `member`'s replica maps `key` to `value` (`None`: lacks it), polling its local
/// replica (a bounded wait).
pub async fn eventually_finds(member: &Member<Dict>, key: &str, value: Option<i64>) {
    let what = format!("{} finds {key} = {value:?}", member.id());
    locks_testing::wait::until(BOUND, &what, Duration::from_millis(5), || async {
        member.call(Req::Find(key.into())).await == Ok(Rep::Value(value))
    })
    .await
}
