//! CLIENT: lock+unlock through the gRPC API (`locks-grpc`), from a Rust client in this process
//! to `node` processes on 127.0.0.1 (the workspace's `node` program, which must sit beside this
//! one: `cargo build --release -p examples --bin node`).
//!
//! - `C1 grpc local`: one session on one node; each operation is `lock([c1, i], X)` on that
//!   node, then `unlock` (two round trips to the node). Operations/s and the p50/p99 of one.
//! - `C1 grpc session+lock+end`: each operation opens a session, locks, and ends it.
//! - `C1 grpc 64 sessions`: 64 sessions at once, each doing lock+unlock on its own keys for
//!   a fixed time: operations/s over all of them.
//! - `C2 grpc Majority 3 procs`: three node processes, the client talks to one; each operation
//!   is `lock([c2, i], X, [all three], Majority)`, then `unlock`.
//!
//! With `--etcd ADDR`, etcd's rows follow (`client_etcd`), and the goal of 10x etcd's
//! lock+unlock rate is decided for one session and for 64.
//!
//! The ratio is the p50 over the TCP loopback floor's. A sequential client (C1 local and
//! session+lock+end, C2, and etcd's E1 and E2) runs on a current-thread runtime of its own,
//! as the TCP floor's client does; the 64 sessions run on the harness's runtime (2 workers).
//! The nodes are stopped (stdin closed, killed by handle after 5 s) when done.

use super::client_etcd;
use super::cluster::NodeProcess;
use super::floors::Floor;
use super::rig::err;
use super::stats::Sample;
use super::uncontended::fail;
use super::{Check, Ctx, Row, Spec};
use locks_grpc::client::{Client, ClientOptions, LockSpec, Session};
use locks_grpc::pb::Requirement;
use std::time::{Duration, Instant};

/// Sessions of the concurrent row.
pub const SESSIONS: usize = 64;

async fn connect(addr: &str) -> Result<Client, String> {
    Client::connect(addr, ClientOptions::default())
        .await
        .map_err(err)
}

/// `n` lock+unlock operations in `session`, each timed.
async fn lock_unlock(
    session: &mut Session,
    spec: impl Fn(u64) -> LockSpec,
    n: u64,
    tag: &str,
) -> Result<Vec<u64>, String> {
    let mut lat = Vec::with_capacity(n as usize);
    for i in 0..n {
        let t = Instant::now();
        session.lock(spec(i)).await.map_err(err)?;
        session.unlock(&format!("{tag}/{i}")).await.map_err(err)?;
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Ok(lat)
}

async fn sequential(addr: String, n: u64) -> Result<Vec<Sample>, String> {
    let mut client = connect(&addr).await?;
    let mut session = client.session().await.map_err(err)?;
    let start = Instant::now();
    let lat = lock_unlock(
        &mut session,
        |i| LockSpec::new(&format!("c1/{i}"), "X"),
        n,
        "c1",
    )
    .await?;
    let one = Sample::new(n, start.elapsed(), lat);
    session.end().await.map_err(err)?;
    let m = (n / 4).max(1);
    let mut lat = Vec::with_capacity(m as usize);
    let start = Instant::now();
    for i in 0..m {
        let t = Instant::now();
        let mut session = client.session().await.map_err(err)?;
        session
            .lock(LockSpec::new(&format!("c1s/{i}"), "X"))
            .await
            .map_err(err)?;
        session.end().await.map_err(err)?;
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let per_session = Sample::new(m, start.elapsed(), lat);
    Ok(vec![one, per_session])
}

async fn concurrent(addr: String, run_for: Duration) -> Result<Sample, String> {
    let client = connect(&addr).await?;
    let mut tasks = Vec::with_capacity(SESSIONS);
    let start = Instant::now();
    for s in 0..SESSIONS {
        let mut client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut session = client.session().await.map_err(err)?;
            let mut lat = Vec::new();
            let mut i = 0u64;
            while start.elapsed() < run_for {
                let t = Instant::now();
                let path = format!("c1m/{s}/{i}");
                session.lock(LockSpec::new(&path, "X")).await.map_err(err)?;
                session.unlock(&path).await.map_err(err)?;
                lat.push(t.elapsed().as_nanos() as u64);
                i += 1;
            }
            session.end().await.map_err(err)?;
            Ok::<_, String>(lat)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.map_err(err)??);
    }
    Ok(Sample::new(all.len() as u64, start.elapsed(), all))
}

async fn majority(addr: String, nodes: Vec<String>, n: u64) -> Result<Sample, String> {
    let mut client = connect(&addr).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.info().await.map_err(err)?.nodes.len() < nodes.len() {
        if Instant::now() > deadline {
            return Err("the three nodes did not connect within 10 s".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut session = client.session().await.map_err(err)?;
    let spec = |i| {
        LockSpec::new(&format!("c2/{i}"), "X")
            .nodes(nodes.clone())
            .requirement(Requirement::Majority)
    };
    let start = Instant::now();
    let lat = lock_unlock(&mut session, spec, n, "c2").await?;
    let sample = Sample::new(n, start.elapsed(), lat);
    session.end().await.map_err(err)?;
    Ok(sample)
}

fn client_flags(peers: &[std::net::SocketAddr]) -> Vec<String> {
    let mut flags: Vec<String> = ["--client-listen", "127.0.0.1:0", "--start-delay-ms", "0"]
        .map(str::to_owned)
        .to_vec();
    for p in peers {
        flags.push("--peer".to_owned());
        flags.push(p.to_string());
    }
    flags
}

/// Runs `f` on the harness runtime within the round limit.
fn bounded<T>(
    ctx: &Ctx,
    f: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let limit = ctx.cfg.round_limit;
    ctx.rt.block_on(async move {
        tokio::time::timeout(limit, f)
            .await
            .map_err(|_| format!("not done within {} s", limit.as_secs()))?
    })
}

/// Runs `f` within the round limit on a current-thread runtime of its own, as the TCP floor's
/// client runs: a sequential client's answers then wake it on its own thread.
fn alone<T>(
    ctx: &Ctx,
    f: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let limit = ctx.cfg.round_limit;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    rt.block_on(async move {
        tokio::time::timeout(limit, f)
            .await
            .map_err(|_| format!("not done within {} s", limit.as_secs()))?
    })
}

/// The CLIENT rows.
pub fn run(ctx: &mut Ctx) -> Vec<Row> {
    let local = vec![
        Spec::rate("C1 grpc local lock+unlock", "op/s", Floor::Tcp).goal(
            "goal: local lock+unlock through the API p50 <= 3 TCP round trips",
            Check::FloorRatioAtMost(3.0),
        ),
        Spec::rate("C1 grpc session+lock+end", "op/s", Floor::Tcp),
    ];
    let many = vec![Spec::rate(
        format!("C1 grpc {SESSIONS} sessions lock+unlock"),
        "op/s",
        Floor::Tcp,
    )];
    let three = vec![
        Spec::rate("C2 grpc Majority 3 procs", "op/s", Floor::Tcp).goal(
            "goal: Majority over 3 processes through the API p50 <= 4 TCP round trips",
            Check::FloorRatioAtMost(4.0),
        ),
    ];
    let mut rows = Vec::new();
    match NodeProcess::start_with("c1", &client_flags(&[])) {
        Err(e) => {
            rows.extend(fail(&local, &e));
            rows.extend(fail(&many, &e));
        }
        Ok(node) => {
            let addr = node.client_addr.clone().unwrap_or_default();
            let n = ctx.cfg.size(5_000, 300);
            rows.extend(ctx.run_rounds(&local, |_| alone(ctx, sequential(addr.clone(), n))));
            let run_for = Duration::from_millis(ctx.cfg.size(1_000, 200));
            rows.extend(ctx.run_rounds(&many, |_| {
                Ok(vec![bounded(ctx, concurrent(addr.clone(), run_for))?])
            }));
            drop(node);
        }
    }
    let started = NodeProcess::start_with("c2a", &client_flags(&[])).and_then(|a| {
        let b = NodeProcess::start_with("c2b", &client_flags(&[a.addr]))?;
        let c = NodeProcess::start_with("c2c", &client_flags(&[a.addr, b.addr]))?;
        Ok([a, b, c])
    });
    match started {
        Err(e) => rows.extend(fail(&three, &e)),
        Ok(procs) => {
            let addr = procs[0].client_addr.clone().unwrap_or_default();
            let nodes: Vec<String> = ["c2a", "c2b", "c2c"].map(str::to_owned).to_vec();
            let n = ctx.cfg.size(3_000, 300);
            rows.extend(ctx.run_rounds(&three, |_| {
                Ok(vec![alone(ctx, majority(addr.clone(), nodes.clone(), n))?])
            }));
            drop(procs);
        }
    }
    if let Some(addr) = ctx.cfg.etcd.clone() {
        rows.extend(etcd_rows(ctx, &addr));
        decide_etcd_goals(&mut rows);
    }
    rows
}

/// The etcd rows (`client_etcd`), their goals decided against the locks rows measured above.
fn etcd_rows(ctx: &mut Ctx, addr: &str) -> Vec<Row> {
    let [one, many, elect] = client_etcd::specs();
    let n = ctx.cfg.size(2_000, 300);
    let run_for = Duration::from_millis(ctx.cfg.size(1_000, 200));
    let mut rows = ctx.run_rounds(std::slice::from_ref(&one), |round| {
        let addr = addr.to_owned();
        Ok(vec![alone(ctx, client_etcd::sequential(addr, round, n))?])
    });
    rows.extend(ctx.run_rounds(std::slice::from_ref(&many), |round| {
        let addr = addr.to_owned();
        let sample = client_etcd::concurrent(addr, round, SESSIONS, run_for);
        Ok(vec![bounded(ctx, sample)?])
    }));
    rows.extend(ctx.run_rounds(std::slice::from_ref(&elect), |round| {
        let addr = addr.to_owned();
        Ok(vec![alone(ctx, client_etcd::elections(addr, round, n))?])
    }));
    rows
}

/// Decides the etcd rows' goals: the locks row of each pair at least 10x the etcd row's rate.
pub fn decide_etcd_goals(rows: &mut [Row]) {
    let rate = |rows: &[Row], prefix: &str| {
        rows.iter()
            .find(|r| r.name.starts_with(prefix))
            .and_then(|r| r.measured().map(|m| m.value))
    };
    let pairs = [
        ("C1 grpc local lock+unlock", client_etcd::E1),
        ("C1 grpc 64 sessions", client_etcd::E1_MANY),
    ];
    for (ours, theirs) in pairs {
        let ratio = match (rate(rows, ours), rate(rows, theirs)) {
            (Some(a), Some(b)) if b > 0.0 => a / b,
            _ => continue,
        };
        if let Some(row) = rows.iter_mut().find(|r| r.name == theirs) {
            row.decide_goal(ratio >= 10.0);
            row.note(format!("locks/etcd={ratio:.1}x"));
        }
    }
}
