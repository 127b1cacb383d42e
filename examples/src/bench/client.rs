//! CLIENT: lock+unlock through the gRPC API (`locks-grpc`), from a Rust client in this process
//! to `node` processes on 127.0.0.1 (the workspace's `node` program, which must sit beside this
//! one: `cargo build --release -p examples --bin node`), beside the anchors a user would pick
//! instead, measured in the same run at the same numbers of clients.
//!
//! - `C1 grpc local lock+unlock`: one session on one node; each operation is `lock([c1, i], X)`
//!   on that node, waiting for the grant, then `send_unlock`, which sends the unlock without
//!   waiting for its answer: the node carries out a session's requests in order, so the next
//!   `lock`'s answer comes after the release, and an operation is one round trip to the node
//!   ([`Cycle::Pipelined`]). Operations/s and the p50/p99.
//! - `C1 grpc local lock+unlock awaited`: the same with `unlock`, each answer waited for (two
//!   round trips, [`Cycle::Awaited`]), as the anchors' clients do.
//! - `C1 grpc session+lock+end`: each operation opens a session, locks, and ends it.
//! - `C1 grpc N sessions lock+unlock` (N of [`C1_SESSIONS`]): N sessions at once (a
//!   [`fleet`], 16 per HTTP/2 connection), each doing lock, wait for the grant, send the
//!   unlock, on its own keys for a fixed time: operations/s over all of them; and
//!   `C1 grpc 64 sessions lock+unlock awaited`, the 64 with each unlock's answer waited for.
//! - `C2 grpc Majority 3 procs`: three node processes, the client talks to one; each operation
//!   is `lock([c2, i], X, [all three], Majority)`, then `send_unlock`; and the same with
//!   [`C2_SESSIONS`] sessions at once (`[c2m, s, i]`), and those sessions on one-level ids
//!   (`[c2m-s-i]`, [`C2_FLAT`]: a lock with no ancestors, as an etcd or Redis lock names one
//!   key; no goal, it shows what the ancestors' entries and notices cost).
//! - With `--python PATH` (`client_python`): the installed Python client's lock+unlock at 1 and
//!   16 threads, one session each, and its asyncio client's at 16 sessions on one event loop.
//! - With `--redis ADDR`: the Redis lock cycle (`redis::cycles`) at 1, 16, 64 and 256
//!   clients; with `--etcd ADDR`, etcd's Lock/Unlock (`client_etcd`) at the same counts.
//!
//! Every locks row notes its ratio to the anchors measured at its count (`/redis`, `/etcd`),
//! and the goals are decided on the anchor rows: C1 at 64 sessions at least 3x Redis's 64
//! clients and 10x etcd's 64 sessions; C1 at one session 10x etcd's; C2 at 64 sessions 10x
//! etcd's (one etcd member) at 64.
//!
//! The ratio column is the p50 over the TCP loopback floor's. Every client of this workload
//! (sequential or a fleet, locks' or etcd's; Redis's too) runs on a current-thread runtime of
//! its own, as the TCP floor's client does: on two cores beside a node, a fleet on two worker
//! threads spent twice the CPU per operation (their wake-ups of each other), which the node
//! then lacked. The nodes are stopped (stdin closed, killed by handle after 5 s) when done.

use super::cluster::NodeProcess;
use super::fleet::fleet_time;
use super::floors::Floor;
use super::rig::err;
use super::stats::Sample;
use super::uncontended::fail;
use super::{Check, Ctx, Row, Spec};
use super::{client_etcd, client_python, fleet, redis};
use locks_grpc::client::{Client, ClientOptions, LockSpec, Session};
use locks_grpc::pb::Requirement;
use std::time::{Duration, Instant};

/// Sessions of the concurrent C1 rows (one session is `C1 grpc local lock+unlock`).
pub const C1_SESSIONS: [usize; 3] = [16, 64, 256];
/// Sessions of the concurrent C2 row.
pub const C2_SESSIONS: usize = 64;
/// Clients of the anchors' rows (Redis, etcd).
pub const ANCHOR_CLIENTS: [usize; 4] = [1, 16, 64, 256];

/// The single-session C1 row.
pub const C1_ONE: &str = "C1 grpc local lock+unlock";
/// The single-session C1 row whose unlocks are awaited.
pub const C1_ONE_AWAITED: &str = "C1 grpc local lock+unlock awaited";
/// The C1 fleet whose unlocks are awaited.
pub const C1_MANY_AWAITED: &str = "C1 grpc 64 sessions lock+unlock awaited";
/// The sessions of [`C1_MANY_AWAITED`].
const AWAITED_SESSIONS: usize = 64;

/// The single-session C2 row.
pub const C2_ONE: &str = "C2 grpc Majority 3 procs";
/// C2's fleet of [`C2_SESSIONS`] on one-level ids.
pub const C2_FLAT: &str = "C2 grpc Majority 3 procs 64 sessions one-level ids";

/// How a lock+unlock operation releases its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cycle {
    /// `send_unlock`: the unlock goes out without waiting for its answer, and the session's
    /// next request is answered after it (one round trip per operation).
    Pipelined,
    /// `unlock`, its answer waited for (two round trips per operation).
    Awaited,
}

impl Cycle {
    /// Releases `path` in `session` this way.
    async fn release(self, session: &mut Session, path: &str) -> Result<(), String> {
        match self {
            Cycle::Pipelined => session.send_unlock(path).await.map_err(err),
            Cycle::Awaited => session.unlock(path).await.map_err(err),
        }
    }
}

/// The name of the C1 row of `sessions` sessions.
pub fn c1_name(sessions: usize) -> String {
    if sessions == 1 {
        C1_ONE.to_owned()
    } else {
        format!("C1 grpc {sessions} sessions lock+unlock")
    }
}

/// The name of the C2 row of `sessions` sessions.
pub fn c2_name(sessions: usize) -> String {
    if sessions == 1 {
        C2_ONE.to_owned()
    } else {
        format!("C2 grpc Majority 3 procs {sessions} sessions")
    }
}

async fn connect(addr: &str) -> Result<Client, String> {
    Client::connect(addr, ClientOptions::default())
        .await
        .map_err(err)
}

/// `n` lock+unlock operations in `session`, each timed, then the session's end (which waits
/// for the last unlock's answer).
async fn lock_unlock(
    mut session: Session,
    spec: impl Fn(u64) -> LockSpec,
    n: u64,
    tag: &str,
    cycle: Cycle,
) -> Result<Sample, String> {
    let mut lat = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        session.lock(spec(i)).await.map_err(err)?;
        cycle.release(&mut session, &format!("{tag}/{i}")).await?;
        lat.push(t.elapsed().as_nanos() as u64);
    }
    session.end().await.map_err(err)?;
    Ok(Sample::new(n, start.elapsed(), lat))
}

async fn sequential(addr: String, n: u64) -> Result<Vec<Sample>, String> {
    let mut client = connect(&addr).await?;
    let mut samples = Vec::new();
    for (cycle, tag) in [(Cycle::Pipelined, "c1"), (Cycle::Awaited, "c1a")] {
        let session = client.session().await.map_err(err)?;
        let spec = |i| LockSpec::new(&format!("{tag}/{i}"), "X");
        samples.push(lock_unlock(session, spec, n, tag, cycle).await?);
    }
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
    samples.push(Sample::new(m, start.elapsed(), lat));
    Ok(samples)
}

/// `sessions` sessions, spread over [`fleet::connections`] connections, each doing lock+unlock
/// (released as `cycle` says) on its own locks (`spec(session, i)`, unlocked by its path) until
/// the deadline.
async fn concurrent(
    addr: String,
    sessions: usize,
    run_for: Duration,
    cycle: Cycle,
    spec: impl Fn(usize, u64) -> (String, LockSpec) + Send + Sync + Clone + 'static,
) -> Result<Sample, String> {
    let mut clients = Vec::new();
    for _ in 0..fleet::connections(sessions) {
        clients.push(connect(&addr).await?);
    }
    fleet::run(sessions, run_for, |s, start| {
        let mut client = clients[s % clients.len()].clone();
        let spec = spec.clone();
        async move {
            let mut session = client.session().await.map_err(err)?;
            let deadline = start.ready().await;
            let mut lat = Vec::new();
            let mut i = 0u64;
            let mut done = Instant::now();
            while done < deadline {
                let t = Instant::now();
                let (path, lock) = spec(s, i);
                session.lock(lock).await.map_err(err)?;
                cycle.release(&mut session, &path).await?;
                done = Instant::now();
                lat.push((done - t).as_nanos() as u64);
                i += 1;
            }
            session.end().await.map_err(err)?;
            Ok((lat, done))
        }
    })
    .await
}

/// Waits (at most 10 s) until the node at `client` reaches `nodes` nodes, itself included.
async fn all_connected(client: &mut Client, nodes: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.info().await.map_err(err)?.nodes.len() < nodes {
        if Instant::now() > deadline {
            return Err(format!("the {nodes} nodes did not connect within 10 s"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// The lock of C2's operation `i`: on every node of `nodes`, granted by a majority.
fn majority_spec(path: &str, nodes: &[String]) -> LockSpec {
    LockSpec::new(path, "X")
        .nodes(nodes.to_vec())
        .requirement(Requirement::Majority)
}

async fn majority(addr: String, nodes: Vec<String>, n: u64) -> Result<Sample, String> {
    let mut client = connect(&addr).await?;
    all_connected(&mut client, nodes.len()).await?;
    let session = client.session().await.map_err(err)?;
    let spec = |i| majority_spec(&format!("c2/{i}"), &nodes);
    lock_unlock(session, spec, n, "c2", Cycle::Pipelined).await
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

/// Runs `f` within the round limit on a current-thread runtime of its own, as the TCP floor's
/// client runs: a sequential client's answers then wake it on its own thread.
pub fn alone<T>(
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

/// The shape of a fleet's lock ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ids {
    /// `root/session/i`: three levels, as the rows lock (the lock and two ancestors' entries on
    /// every node, and their notices).
    Deep,
    /// `root-session-i`: one level, as an etcd or Redis lock names one key.
    Flat,
}

impl Ids {
    /// Session `s`'s operation `i` under `root`.
    fn path(self, root: &str, s: usize, i: u64) -> String {
        match self {
            Ids::Deep => format!("{root}/{s}/{i}"),
            Ids::Flat => format!("{root}-{s}-{i}"),
        }
    }
}

/// The lock of C1's fleets: session `s`'s operation `i`, on the session's node.
fn c1_lock(ids: Ids) -> impl Fn(usize, u64) -> (String, LockSpec) + Send + Sync + Clone + 'static {
    move |s: usize, i: u64| {
        let path = ids.path("c1m", s, i);
        let lock = LockSpec::new(&path, "X");
        (path, lock)
    }
}

/// The lock of C2's fleets: session `s`'s operation `i`, `Majority` on `nodes`.
fn c2_lock(
    nodes: &[String],
    ids: Ids,
) -> impl Fn(usize, u64) -> (String, LockSpec) + Send + Sync + Clone + 'static {
    let nodes = nodes.to_vec();
    move |s: usize, i: u64| {
        let path = ids.path("c2m", s, i);
        let lock = majority_spec(&path, &nodes);
        (path, lock)
    }
}

/// C1's fleet of `sessions` sessions against the node serving clients at `addr`, for
/// `run_for`, alone (`bench --load`), releasing as `cycle` says, on a runtime of `workers`
/// threads (0: a current-thread runtime); with `majority` (node names), C2's fleet instead,
/// locking on those nodes; with `ids` [`Ids::Flat`], on one-level ids instead of the rows'
/// three-level ones: the rate and the p50 and p99, as a line of text.
pub fn load(
    addr: &str,
    sessions: usize,
    run_for: Duration,
    workers: usize,
    majority: &[String],
    cycle: Cycle,
    ids: Ids,
) -> Result<String, String> {
    let rt = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    }
    .map_err(err)?;
    let limit = run_for + Duration::from_secs(60);
    let sample = rt.block_on(async {
        let timeout = |_| format!("not done within {} s", limit.as_secs());
        if majority.is_empty() {
            let fleet = concurrent(addr.to_owned(), sessions, run_for, cycle, c1_lock(ids));
            return tokio::time::timeout(limit, fleet).await.map_err(timeout)?;
        }
        let mut client = connect(addr).await?;
        all_connected(&mut client, majority.len()).await?;
        let fleet = concurrent(
            addr.to_owned(),
            sessions,
            run_for,
            cycle,
            c2_lock(majority, ids),
        );
        tokio::time::timeout(limit, fleet).await.map_err(timeout)?
    })?;
    let p = super::stats::percentiles(&sample.latencies).ok_or("no operation")?;
    Ok(format!(
        "{sessions} sessions: {:.0} op/s, p50 {:.0} us, p99 {:.0} us",
        sample.rate(),
        p.p50 / 1e3,
        p.p99 / 1e3
    ))
}

/// The CLIENT rows.
pub fn run(ctx: &mut Ctx) -> Vec<Row> {
    let local = vec![
        Spec::rate(C1_ONE, "op/s", Floor::Tcp).goal(
            "goal: local lock+unlock through the API p50 <= 3 TCP round trips",
            Check::FloorRatioAtMost(3.0),
        ),
        Spec::rate(C1_ONE_AWAITED, "op/s", Floor::Tcp),
        Spec::rate("C1 grpc session+lock+end", "op/s", Floor::Tcp),
    ];
    let many: Vec<(Spec, usize, Cycle)> = C1_SESSIONS
        .iter()
        .map(|&n| {
            (
                Spec::rate(c1_name(n), "op/s", Floor::Tcp),
                n,
                Cycle::Pipelined,
            )
        })
        .chain(std::iter::once((
            Spec::rate(C1_MANY_AWAITED, "op/s", Floor::Tcp),
            AWAITED_SESSIONS,
            Cycle::Awaited,
        )))
        .collect();
    let many_specs: Vec<Spec> = many.iter().map(|(spec, _, _)| spec.clone()).collect();
    let python = client_python::specs(ctx);
    let mut rows = Vec::new();
    let run_for = fleet_time(ctx);
    match NodeProcess::start_with("c1", &client_flags(&[])) {
        Err(e) => {
            rows.extend(fail(&local, &e));
            rows.extend(fail(&many_specs, &e));
            rows.extend(fail(&python, &e));
        }
        Ok(node) => {
            let addr = node.client_addr.clone().unwrap_or_default();
            let n = ctx.cfg.size(5_000, 300);
            rows.extend(ctx.run_rounds(&local, |_| alone(ctx, sequential(addr.clone(), n))));
            for (spec, sessions, cycle) in &many {
                let spec = std::slice::from_ref(spec);
                rows.extend(ctx.run_rounds(spec, |_| {
                    let sample =
                        concurrent(addr.clone(), *sessions, run_for, *cycle, c1_lock(Ids::Deep));
                    Ok(vec![alone(ctx, sample)?])
                }));
            }
            rows.extend(client_python::run(ctx, &addr));
            drop(node);
        }
    }
    rows.extend(c2_rows(ctx));
    if let Some(addr) = ctx.cfg.redis.clone() {
        rows.extend(redis_rows(ctx, &addr));
    }
    if let Some(addr) = ctx.cfg.etcd.clone() {
        rows.extend(etcd_rows(ctx, &addr));
    }
    decide_goals(&mut rows);
    rows
}

/// C2: `Majority` over three node processes, one session and [`C2_SESSIONS`]; and
/// [`C2_SESSIONS`] on one-level ids ([`C2_FLAT`]).
fn c2_rows(ctx: &mut Ctx) -> Vec<Row> {
    let one = vec![Spec::rate(C2_ONE, "op/s", Floor::Tcp).goal(
        "goal: Majority over 3 processes through the API p50 <= 4 TCP round trips",
        Check::FloorRatioAtMost(4.0),
    )];
    let mut many = Spec::rate(c2_name(C2_SESSIONS), "op/s", Floor::Tcp);
    if ctx.cfg.etcd.is_some() {
        many = many.goal(
            "goal: >= 10x etcd's 64 sessions (one etcd member)",
            Check::AfterRounds,
        );
    }
    let fleets = [
        (vec![many], Ids::Deep),
        (vec![Spec::rate(C2_FLAT, "op/s", Floor::Tcp)], Ids::Flat),
    ];
    let started = NodeProcess::start_with("c2a", &client_flags(&[])).and_then(|a| {
        let b = NodeProcess::start_with("c2b", &client_flags(&[a.addr]))?;
        let c = NodeProcess::start_with("c2c", &client_flags(&[a.addr, b.addr]))?;
        Ok([a, b, c])
    });
    let procs = match started {
        Err(e) => {
            let mut rows = fail(&one, &e);
            for (specs, _) in &fleets {
                rows.extend(fail(specs, &e));
            }
            return rows;
        }
        Ok(procs) => procs,
    };
    let addr = procs[0].client_addr.clone().unwrap_or_default();
    let nodes: Vec<String> = ["c2a", "c2b", "c2c"].map(str::to_owned).to_vec();
    let n = ctx.cfg.size(3_000, 300);
    let mut rows = ctx.run_rounds(&one, |_| {
        Ok(vec![alone(ctx, majority(addr.clone(), nodes.clone(), n))?])
    });
    let run_for = fleet_time(ctx);
    for (specs, ids) in &fleets {
        rows.extend(ctx.run_rounds(specs, |_| {
            let lock = c2_lock(&nodes, *ids);
            Ok(vec![alone(
                ctx,
                concurrent(addr.clone(), C2_SESSIONS, run_for, Cycle::Pipelined, lock),
            )?])
        }));
    }
    drop(procs);
    rows
}

/// The Redis lock cycle at each of [`ANCHOR_CLIENTS`].
fn redis_rows(ctx: &mut Ctx, addr: &str) -> Vec<Row> {
    let specs: Vec<Spec> = ANCHOR_CLIENTS.iter().map(|&n| redis_spec(n)).collect();
    if let Err(e) = redis::check(addr) {
        return fail(&specs, &e);
    }
    let run_for = fleet_time(ctx);
    let mut rows = Vec::new();
    for (spec, &n) in specs.iter().zip(&ANCHOR_CLIENTS) {
        rows.extend(ctx.run_rounds(std::slice::from_ref(spec), |round| {
            Ok(vec![redis::cycles(addr, round, n, run_for)?])
        }));
    }
    rows
}

fn redis_spec(clients: usize) -> Spec {
    let spec = Spec::rate(redis::cycles_name(clients), "cycle/s", Floor::Tcp);
    if clients == 64 {
        spec.goal(
            "goal: C1 grpc 64 sessions >= 3x this rate",
            Check::AfterRounds,
        )
    } else {
        spec
    }
}

/// The etcd rows (`client_etcd`): one session, then fleets at the other [`ANCHOR_CLIENTS`].
fn etcd_rows(ctx: &mut Ctx, addr: &str) -> Vec<Row> {
    let n = ctx.cfg.size(2_000, 300);
    let run_for = fleet_time(ctx);
    let one = client_etcd::spec(1);
    let mut rows = ctx.run_rounds(std::slice::from_ref(&one), |round| {
        let addr = addr.to_owned();
        Ok(vec![alone(ctx, client_etcd::sequential(addr, round, n))?])
    });
    for &sessions in &ANCHOR_CLIENTS[1..] {
        let spec = client_etcd::spec(sessions);
        rows.extend(ctx.run_rounds(std::slice::from_ref(&spec), |round| {
            let addr = addr.to_owned();
            let sample = client_etcd::concurrent(addr, round, sessions, run_for);
            Ok(vec![alone(ctx, sample)?])
        }));
    }
    let elect = client_etcd::election_spec();
    rows.extend(ctx.run_rounds(std::slice::from_ref(&elect), |round| {
        let addr = addr.to_owned();
        Ok(vec![alone(ctx, client_etcd::elections(addr, round, n))?])
    }));
    rows
}

/// The rate of the row named `name`, if it was measured.
fn rate(rows: &[Row], name: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.name == name)
        .and_then(|r| r.measured().map(|m| m.value))
}

/// Notes on every locks row its ratio to the anchors of its client count, and decides the
/// goals: on the anchor rows (Redis 64, etcd 1 and 64) and on C2's fleet.
pub fn decide_goals(rows: &mut [Row]) {
    let mut ours: Vec<(String, usize)> = Vec::new();
    for n in std::iter::once(1).chain(C1_SESSIONS) {
        ours.push((c1_name(n), n));
    }
    ours.push((C1_ONE_AWAITED.to_owned(), 1));
    ours.push((C1_MANY_AWAITED.to_owned(), AWAITED_SESSIONS));
    ours.push((C2_ONE.to_owned(), 1));
    ours.push((c2_name(C2_SESSIONS), C2_SESSIONS));
    ours.push((C2_FLAT.to_owned(), C2_SESSIONS));
    for n in client_python::THREADS {
        ours.push((client_python::name(n), n));
    }
    ours.push((client_python::aio_name(), client_python::AIO_SESSIONS));
    for (name, n) in &ours {
        let Some(us) = rate(rows, name) else {
            continue;
        };
        let anchors = [
            ("redis", rate(rows, &redis::cycles_name(*n))),
            ("etcd", rate(rows, &client_etcd::name(*n))),
        ];
        let notes: Vec<String> = anchors
            .iter()
            .filter_map(|(what, r)| r.filter(|r| *r > 0.0).map(|r| (what, us / r)))
            .map(|(what, ratio)| format!("/{what}@{n}={ratio:.1}x"))
            .collect();
        if let Some(row) = rows.iter_mut().find(|r| &r.name == name) {
            for note in notes {
                row.note(note);
            }
        }
    }
    let goals = [
        (c1_name(64), redis::cycles_name(64), 3.0),
        (c1_name(64), client_etcd::name(64), 10.0),
        (c1_name(1), client_etcd::name(1), 10.0),
    ];
    for (us, them, at_least) in goals {
        if let (Some(a), Some(b)) = (rate(rows, &us), rate(rows, &them))
            && let Some(row) = rows.iter_mut().find(|r| r.name == them)
        {
            row.decide_goal(b > 0.0 && a / b >= at_least);
        }
    }
    let c2 = c2_name(C2_SESSIONS);
    if let (Some(a), Some(b)) = (rate(rows, &c2), rate(rows, &client_etcd::name(64)))
        && let Some(row) = rows.iter_mut().find(|r| r.name == c2)
    {
        row.decide_goal(b > 0.0 && a / b >= 10.0);
    }
}
