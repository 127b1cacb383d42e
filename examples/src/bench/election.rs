//! W7: leader election (`locks-leader`) among nodes on 127.0.0.1.
//!
//! Nodes listen on ephemeral loopback ports and are connected pairwise; each runs one candidate
//! member of the group (callbacks with no state). Per round:
//! - **first leader**: `n` times, a fresh group's members are started on every node at once; the
//!   time runs from just before the first `start` until every member reports the same leader
//!   (one of them). With 3 nodes and with 5.
//! - **failover, member stopped**: `n` times on 3 nodes, a fresh group agrees on a leader; the
//!   clock starts, the leader's member is stopped (`Member::stop`: it says goodbye and releases
//!   its locks), and runs until the two others agree on a new leader.
//! - **failover, node shut down**: `n` times, a fresh cluster of 3 nodes agrees on a leader; the
//!   clock starts, the leader's node is shut down (its connections close), and runs until the
//!   two others agree on a new leader.
//!
//! A group that does not agree within 10 s counts as "never agreed" (and is not timed); the
//! rows give the count over all rounds, warm-up included. Latencies are the times above; the
//! ratio is their p50 over the TCP loopback floor's.

use super::floors::Floor;
use super::rig::{COOKIE, err};
use super::stats::Sample;
use super::{Check, Ctx, Row, Spec};
use locks_leader::{
    CallReturn, Callbacks, Caller, Ctx as ElectionCtx, Elected, Handled, Member, MemberId, Role,
    Term, start,
};
use locks_server::{Node, NodeConfig};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a group may take to agree before it counts as "never agreed".
const AGREE_WITHIN: Duration = Duration::from_secs(10);

/// A member with no state: the election alone.
pub struct Plain;

impl Callbacks for Plain {
    type Call = ();
    type Reply = ();
    type Cast = ();
    type Broadcast = ();
    type Info = ();

    fn elected(
        &mut self,
        _new: Option<&MemberId>,
        _ctx: &mut ElectionCtx<'_, Self>,
    ) -> Elected<()> {
        Elected::Broadcast(())
    }

    fn surrendered(&mut self, _msg: (), _ctx: &mut ElectionCtx<'_, Self>) -> Handled<()> {
        Handled::Ok
    }

    fn from_leader(&mut self, _msg: (), _ctx: &mut ElectionCtx<'_, Self>) -> Handled<()> {
        Handled::Ok
    }

    fn handle_leader_call(
        &mut self,
        _req: (),
        _from: Caller,
        _ctx: &mut ElectionCtx<'_, Self>,
    ) -> CallReturn<(), ()> {
        CallReturn::Reply(())
    }

    fn handle_call(
        &mut self,
        _req: (),
        _from: Caller,
        _ctx: &mut ElectionCtx<'_, Self>,
    ) -> CallReturn<(), ()> {
        CallReturn::Reply(())
    }
}

/// Starts `n` nodes named `prefix0..`, connects every pair and waits until each sees all.
async fn cluster(prefix: &str, n: usize) -> Result<Vec<Node>, String> {
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..n {
        let config = NodeConfig::new(format!("{prefix}{i}"))
            .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
            .cookie(COOKIE)
            // Fresh processes with no earlier incarnation whose grants could be believed:
            // the start-delay protects restarts, and would only add its 2 s to every round.
            .start_delay(Duration::ZERO)
            .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100));
        let node = Node::start(config).await.map_err(err)?;
        for earlier in &nodes {
            let addr = earlier.local_addr().ok_or("no listen address")?;
            node.connect(addr).await.map_err(err)?;
        }
        nodes.push(node);
    }
    for node in &nodes {
        let mut events = node.subscribe_nodes();
        while node.nodes().len() < n {
            events.recv().await.ok_or("node stopped")?;
        }
    }
    Ok(nodes)
}

async fn shutdown(nodes: &[Node]) {
    for node in nodes {
        node.shutdown().await;
    }
}

/// Waits until the members agree on a leader other than `not` (one of them); `None` if they do
/// not within [`AGREE_WITHIN`].
async fn agreed(members: &[&Member<Plain>], not: Option<&MemberId>) -> Option<Term> {
    let ids: Vec<MemberId> = members.iter().map(|m| m.id().clone()).collect();
    let wait = async {
        loop {
            let mut rxs: Vec<_> = members.iter().map(|m| m.changes()).collect();
            let terms: Vec<Option<Term>> = rxs.iter_mut().map(|rx| rx.current()).collect();
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

async fn members(nodes: &[Node], group: &str) -> Result<Vec<Member<Plain>>, String> {
    let started = futures::future::join_all(
        nodes
            .iter()
            .map(|n| start(n, group, Plain, Role::Candidate)),
    )
    .await;
    started.into_iter().map(|m| m.map_err(err)).collect()
}

async fn stop_all(members: &[Member<Plain>]) {
    for m in members {
        m.stop().await;
    }
}

/// `n` first elections of fresh groups on `nodes`.
async fn first_leaders(nodes: &[Node], tag: &str, n: u64) -> Result<(Sample, u64), String> {
    let (mut lat, mut never) = (Vec::new(), 0);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        let ms = members(nodes, &format!("{tag}-{i}")).await?;
        match agreed(&ms.iter().collect::<Vec<_>>(), None).await {
            Some(_) => lat.push(t.elapsed().as_nanos() as u64),
            None => never += 1,
        }
        stop_all(&ms).await;
    }
    Ok((Sample::new(lat.len() as u64, start.elapsed(), lat), never))
}

/// Agrees on a leader, kills it with `kill`, and times the survivors' agreement.
async fn failover<F, Fut>(ms: &[Member<Plain>], kill: F) -> Result<Option<Duration>, String>
where
    F: FnOnce(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(first) = agreed(&ms.iter().collect::<Vec<_>>(), None).await else {
        return Ok(None);
    };
    let dead = ms
        .iter()
        .position(|m| m.id() == &first.leader)
        .ok_or("the leader is not a member")?;
    let t = Instant::now();
    kill(dead).await;
    let rest: Vec<&Member<Plain>> = ms
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != dead)
        .map(|(_, m)| m)
        .collect();
    Ok(agreed(&rest, Some(&first.leader))
        .await
        .map(|_| t.elapsed()))
}

async fn failovers_member(nodes: &[Node], tag: &str, n: u64) -> Result<(Sample, u64), String> {
    let (mut lat, mut never) = (Vec::new(), 0);
    let start = Instant::now();
    for i in 0..n {
        let ms = members(nodes, &format!("{tag}-{i}")).await?;
        match failover(&ms, |dead| ms[dead].stop()).await? {
            Some(d) => lat.push(d.as_nanos() as u64),
            None => never += 1,
        }
        stop_all(&ms).await;
    }
    Ok((Sample::new(lat.len() as u64, start.elapsed(), lat), never))
}

async fn failovers_node(tag: &str, n: u64) -> Result<(Sample, u64), String> {
    let (mut lat, mut never) = (Vec::new(), 0);
    let start = Instant::now();
    for i in 0..n {
        let nodes = cluster(&format!("{tag}{i}-"), 3).await?;
        let ms = members(&nodes, "w7").await?;
        match failover(&ms, |dead| nodes[dead].shutdown()).await? {
            Some(d) => lat.push(d.as_nanos() as u64),
            None => never += 1,
        }
        drop(ms);
        shutdown(&nodes).await;
    }
    Ok((Sample::new(lat.len() as u64, start.elapsed(), lat), never))
}

/// W7: first leader with 3 and 5 nodes, failover after the leader's member or node stops.
pub fn w7(ctx: &mut Ctx) -> Vec<Row> {
    let specs = vec![
        Spec::latency("W7 first leader, 3 nodes", "elect/s", Floor::Tcp).goal(
            "orig ~2 ms to the first agreed leader; goal no worse",
            Check::P50AtMostUs(2_000.0),
        ),
        Spec::latency("W7 first leader, 5 nodes", "elect/s", Floor::Tcp),
        Spec::latency("W7 failover, member stopped", "failover/s", Floor::Tcp).goal(
            "orig ~3 ms; goal no worse, none never agreed",
            Check::P50AtMostUs(3_000.0),
        ),
        Spec::latency("W7 failover, node shut down", "failover/s", Floor::Tcp).goal(
            "orig 6.4 ms, 8 of 100 never agreed; goal no worse, 0 never agreed",
            Check::P50AtMostUs(6_400.0),
        ),
    ];
    let limit = ctx.cfg.round_limit;
    let setup = ctx.rt.block_on(async {
        let three = cluster("w7a", 3).await?;
        let five = cluster("w7b", 5).await?;
        Ok::<_, String>((three, five))
    });
    let (three, five) = match setup {
        Ok(c) => c,
        Err(e) => return super::uncontended::fail(&specs, &e),
    };
    let n = ctx.cfg.size(20, 3);
    let never: [AtomicU64; 4] = Default::default();
    let mut rows = ctx.run_rounds(&specs, |round| {
        let results = ctx.rt.block_on(async {
            let run = async {
                Ok::<_, String>([
                    first_leaders(&three, &format!("f3-{round}"), n).await?,
                    first_leaders(&five, &format!("f5-{round}"), n).await?,
                    failovers_member(&three, &format!("fm-{round}"), n).await?,
                    failovers_node(&format!("w7n{round}-"), n).await?,
                ])
            };
            tokio::time::timeout(limit, run)
                .await
                .map_err(|_| format!("no round within {} s", limit.as_secs()))?
        })?;
        Ok(results
            .into_iter()
            .zip(&never)
            .map(|((sample, lost), count)| {
                count.fetch_add(lost, Ordering::Relaxed);
                sample
            })
            .collect())
    });
    ctx.rt.block_on(async {
        shutdown(&three).await;
        shutdown(&five).await;
    });
    for (row, count) in rows.iter_mut().zip(&never) {
        let lost = count.load(Ordering::Relaxed);
        row.note(format!("never agreed in all rounds={lost}"));
        if lost > 0 {
            row.goal_missed();
        }
    }
    rows
}
