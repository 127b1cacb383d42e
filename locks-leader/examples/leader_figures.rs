//! Figures of leader election over TCP on 127.0.0.1 (in-process nodes, one member per node):
//! time from starting the members to an agreed leader with 3 and 5 nodes, and time from the
//! leader's death (its member stopped; its whole node shut down) to a new agreed leader, with
//! the count of failovers that never agreed within 10 s.
//!
//! ```sh
//! cargo run --release -p locks-leader --example leader_figures -- [rounds]
//! ```

use locks_leader::{
    CallReturn, Callbacks, Caller, Ctx, Elected, Handled, Member, MemberId, Role, Term, start,
};
use locks_server::{Node, NodeConfig};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A member with no state.
struct Plain;

impl Callbacks for Plain {
    type Call = ();
    type Reply = ();
    type Cast = ();
    type Broadcast = ();
    type Info = ();

    fn elected(&mut self, _new: Option<&MemberId>, _ctx: &mut Ctx<'_, Self>) -> Elected<()> {
        Elected::Broadcast(())
    }

    fn surrendered(&mut self, _msg: (), _ctx: &mut Ctx<'_, Self>) -> Handled<()> {
        Handled::Ok
    }

    fn from_leader(&mut self, _msg: (), _ctx: &mut Ctx<'_, Self>) -> Handled<()> {
        Handled::Ok
    }

    fn handle_leader_call(
        &mut self,
        _req: (),
        _from: Caller,
        _ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<(), ()> {
        CallReturn::Reply(())
    }

    fn handle_call(
        &mut self,
        _req: (),
        _from: Caller,
        _ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<(), ()> {
        CallReturn::Reply(())
    }
}

const AGREE_WITHIN: Duration = Duration::from_secs(10);

async fn node(name: &str) -> Node {
    let config = NodeConfig::new(name)
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie("figures")
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100));
    Node::start(config).await.expect("node")
}

async fn cluster(prefix: &str, n: usize) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..n {
        let node = node(&format!("{prefix}{i}")).await;
        for earlier in &nodes {
            node.connect(earlier.local_addr().unwrap())
                .await
                .expect("connect");
        }
        nodes.push(node);
    }
    for node in &nodes {
        let mut events = node.subscribe_nodes();
        while node.nodes().len() < n {
            events.recv().await.expect("node running");
        }
    }
    nodes
}

/// Waits until the members agree on a leader other than `not` (which is one of them); `None`
/// if they do not within [`AGREE_WITHIN`].
async fn agreed(members: &[&Member<Plain>], not: Option<&MemberId>) -> Option<Term> {
    let ids: Vec<MemberId> = members.iter().map(|m| m.id().clone()).collect();
    let wait = async {
        loop {
            let mut rxs: Vec<_> = members.iter().map(|m| m.changes()).collect();
            let terms: Vec<Option<Term>> = rxs
                .iter_mut()
                .map(|rx| rx.borrow_and_update().clone())
                .collect();
            if let Some(Some(t)) = terms.first()
                && Some(&t.leader) != not
                && ids.contains(&t.leader)
                && terms.iter().all(|x| x.as_ref() == Some(t))
            {
                return t.clone();
            }
            let waits = rxs
                .into_iter()
                .map(|mut rx| Box::pin(async move { rx.changed().await }));
            let _ = futures::future::select_all(waits).await;
        }
    };
    tokio::time::timeout(AGREE_WITHIN, wait).await.ok()
}

fn summary(label: &str, mut times: Vec<Duration>, failed: usize) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| {
        times
            .get(((times.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or_default()
    };
    println!(
        "{label:<44} n={:<4} median {:>7.2} ms  p90 {:>7.2} ms  max {:>7.2} ms  never agreed: {failed}",
        times.len(),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(times.last().copied().unwrap_or_default()),
    );
}

async fn first_leader(n: usize, rounds: usize) {
    let nodes = cluster(&format!("first{n}-"), n).await;
    let mut times = Vec::new();
    let mut failed = 0;
    for r in 0..rounds {
        let group = format!("g{r}");
        let t0 = Instant::now();
        let members: Vec<Member<Plain>> = futures::future::join_all(
            nodes
                .iter()
                .map(|node| start(node, group.as_str(), Plain, Role::Candidate)),
        )
        .await
        .into_iter()
        .map(|m| m.expect("member"))
        .collect();
        let refs: Vec<&Member<Plain>> = members.iter().collect();
        match agreed(&refs, None).await {
            Some(_) => times.push(t0.elapsed()),
            None => failed += 1,
        }
        for m in &members {
            m.stop().await;
        }
    }
    summary(&format!("start to agreed leader, {n} nodes"), times, failed);
    for node in &nodes {
        node.shutdown().await;
    }
}

async fn failover_member(rounds: usize) {
    let nodes = cluster("fm-", 3).await;
    let mut times = Vec::new();
    let mut failed = 0;
    for r in 0..rounds {
        let group = format!("f{r}");
        let mut members = Vec::new();
        for node in &nodes {
            members.push(
                start(node, group.as_str(), Plain, Role::Candidate)
                    .await
                    .expect("member"),
            );
        }
        let refs: Vec<&Member<Plain>> = members.iter().collect();
        let Some(first) = agreed(&refs, None).await else {
            failed += 1;
            continue;
        };
        let i = members
            .iter()
            .position(|m| m.id() == &first.leader)
            .expect("leader");
        let t0 = Instant::now();
        members[i].stop().await;
        let rest: Vec<&Member<Plain>> = members
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, m)| m)
            .collect();
        match agreed(&rest, Some(&first.leader)).await {
            Some(_) => times.push(t0.elapsed()),
            None => failed += 1,
        }
        for m in &members {
            m.stop().await;
        }
    }
    summary("failover: leader's member stopped, 3 nodes", times, failed);
    for node in &nodes {
        node.shutdown().await;
    }
}

async fn failover_node(rounds: usize) {
    let mut times = Vec::new();
    let mut failed = 0;
    for r in 0..rounds {
        let nodes = cluster(&format!("fn{r}-"), 3).await;
        let mut members = Vec::new();
        for node in &nodes {
            members.push(
                start(node, "g", Plain, Role::Candidate)
                    .await
                    .expect("member"),
            );
        }
        let refs: Vec<&Member<Plain>> = members.iter().collect();
        let Some(first) = agreed(&refs, None).await else {
            failed += 1;
            continue;
        };
        let i = members
            .iter()
            .position(|m| m.id() == &first.leader)
            .expect("leader");
        let t0 = Instant::now();
        nodes[i].shutdown().await;
        let rest: Vec<&Member<Plain>> = members
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, m)| m)
            .collect();
        match agreed(&rest, Some(&first.leader)).await {
            Some(_) => times.push(t0.elapsed()),
            None => failed += 1,
        }
        drop(members);
        for node in &nodes {
            node.shutdown().await;
        }
    }
    summary("failover: leader's node shut down, 3 nodes", times, failed);
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    first_leader(3, rounds).await;
    first_leader(5, rounds).await;
    failover_member(rounds).await;
    failover_node(rounds).await;
}
