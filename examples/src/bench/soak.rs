//! SOAK: the client port's attacks of issue 50, in a loop, against a `node` process on
//! 127.0.0.1, while good clients lock and unlock throughout.
//!
//! The attacks, each a task that starts over until the soak ends (every attacker address is a
//! loopback address of its own, 127.0.x.y with x >= 2, so the per-address bounds are what
//! protects the good clients, who come from 127.0.0.1):
//! - idle TCP connections that send nothing ([`IDLE`]), reopened whenever the node closes one;
//! - slow HTTP/2 prefaces, a byte every two seconds ([`SLOW`]);
//! - header-only calls (`Info`, the headers and never the body), with and without the token,
//!   [`HALF_OPEN`] on each connection, held for a few seconds;
//! - calls holding a partial 60 KB message (a gRPC frame that announces 64 KiB and stops short),
//!   [`PARTIAL`] at once;
//! - lock requests for ids of 12,000 keys;
//! - session floods: several addresses opening more sessions than their bound;
//! - oversize (65,537-byte) and malformed (undecodable) session messages.
//!
//! The good clients ([`GOOD`] sessions) lock and unlock in a loop, each operation bounded by
//! [`GOOD_OP_BOUND`]: one that fails or passes it counts as not served. The node's resident
//! memory (VmRSS) is read at the start (after a first good operation), every half second
//! during the soak (its peak), and at the end: once the attacks stopped, polled until it is
//! back within [`RSS_SLACK`] of the start, for [`SETTLE`] at most.
//!
//! The soak passes when every good operation was served and the end is within [`RSS_SLACK`]
//! of the start. The bench row (`bench soak --soak-secs N`, 600 s by default) reports it;
//! `examples/tests/soak.rs` runs a short one in the test suite.

use super::cluster::NodeProcess;
use super::{Ctx, Measured, Outcome, Row};
use futures::SinkExt;
use locks_grpc::client::{Client, ClientOptions, LockSpec};
use locks_grpc::pb;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Idle TCP connections kept open.
pub const IDLE: usize = 200;
/// Connections sending the HTTP/2 preface a byte every two seconds.
pub const SLOW: usize = 100;
/// Header-only calls opened on one connection.
pub const HALF_OPEN: usize = 500;
/// Calls holding a partial 60 KB message at once.
pub const PARTIAL: usize = 100;
/// Good client sessions.
pub const GOOD: usize = 4;
/// The longest a good client's lock+unlock may take before it counts as not served.
pub const GOOD_OP_BOUND: Duration = Duration::from_secs(5);
/// How far above the start the node's memory may end.
pub const RSS_SLACK: u64 = 50 * 1024 * 1024;
/// How long the end waits for the node's memory to come back.
pub const SETTLE: Duration = Duration::from_secs(30);

/// The client token the soak's node is started with.
pub const TOKEN: &str = "soak-token";

/// What a soak measured.
#[derive(Debug, Clone, Default)]
pub struct SoakReport {
    /// How long the attacks ran.
    pub secs: f64,
    /// The node's VmRSS at the start, its peak during the soak and at the end, in bytes.
    pub rss_start: u64,
    /// See `rss_start`.
    pub rss_peak: u64,
    /// See `rss_start`.
    pub rss_end: u64,
    /// Good lock+unlock operations served.
    pub good_ops: u64,
    /// Good operations that failed or passed [`GOOD_OP_BOUND`].
    pub good_failed: u64,
    /// Attack rounds run, over every kind.
    pub attack_rounds: u64,
    /// Why good operations were not served: the first [`REASONS`] reasons.
    pub reasons: Vec<String>,
}

/// How many reasons for good operations not served a report keeps.
pub const REASONS: usize = 8;

/// The reasons good clients were not served, shared by the good clients.
type Reasons = Arc<std::sync::Mutex<Vec<String>>>;

/// Counts a good operation not served and keeps its reason (the first [`REASONS`]).
fn not_served(failed: &AtomicU64, reasons: &Reasons, why: String) {
    failed.fetch_add(1, Ordering::Relaxed);
    let mut reasons = reasons
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if reasons.len() < REASONS {
        reasons.push(why);
    }
}

impl SoakReport {
    /// Why the soak failed, if it did.
    pub fn failure(&self) -> Option<String> {
        if self.good_failed > 0 || self.good_ops == 0 {
            return Some(format!(
                "{} good operations not served ({} served): {}",
                self.good_failed,
                self.good_ops,
                self.reasons.join("; ")
            ));
        }
        if self.rss_end > self.rss_start + RSS_SLACK {
            return Some(format!(
                "VmRSS ended at {:.1} MB, more than 50 MB above the start ({:.1} MB)",
                mb(self.rss_end),
                mb(self.rss_start)
            ));
        }
        None
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// The resident memory of process `pid`, in bytes.
pub fn rss(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read the node's status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| "no VmRSS line".to_owned())
}

/// A TCP connection to `to` from the loopback address `from`.
async fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(to).await
}

/// Loopback address 127.0.`group`.`host`.
fn ip(group: u8, host: u8) -> IpAddr {
    [127, 0, group, host].into()
}

/// Sleeps `d`, or less if the soak stops meanwhile.
async fn nap(stop: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50).min(until - Instant::now())).await;
    }
}

/// Runs the soak against the node process `pid` whose client port is `addr` (started with
/// `--client-token` [`TOKEN`]) for `duration`.
pub async fn soak(addr: SocketAddr, pid: u32, duration: Duration) -> Result<SoakReport, String> {
    // A first good operation: what every session needs once is in the start's figure.
    good_op(addr, ip(0, 100), 0).await?;
    let rss_start = rss(pid)?;
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let good_ops = Arc::new(AtomicU64::new(0));
    let good_failed = Arc::new(AtomicU64::new(0));
    let reasons: Reasons = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..IDLE {
        let stop = stop.clone();
        tasks.spawn(idle(addr, ip(2, (i % 8) as u8 + 1), stop));
    }
    for i in 0..SLOW {
        let stop = stop.clone();
        tasks.spawn(slow_preface(addr, ip(3, (i % 4) as u8 + 1), stop));
    }
    for (host, token) in [(1, true), (2, false)] {
        let (stop, rounds) = (stop.clone(), rounds.clone());
        tasks.spawn(half_open(addr, ip(4, host), token, stop, rounds));
    }
    let (s, r) = (stop.clone(), rounds.clone());
    tasks.spawn(partial_messages(addr, ip(5, 1), s, r));
    let (s, r) = (stop.clone(), rounds.clone());
    tasks.spawn(bad_requests(addr, ip(6, 1), s, r));
    for host in 1..=4 {
        let (s, r) = (stop.clone(), rounds.clone());
        tasks.spawn(session_flood(addr, ip(7, host), s, r));
    }
    for g in 0..GOOD {
        let (s, ops, failed) = (stop.clone(), good_ops.clone(), good_failed.clone());
        let why = reasons.clone();
        tasks.spawn(good_client(addr, ip(0, 101 + g as u8), s, ops, failed, why));
    }
    let started = Instant::now();
    let mut rss_peak = rss_start;
    while started.elapsed() < duration {
        tokio::time::sleep(Duration::from_millis(500)).await;
        rss_peak = rss_peak.max(rss(pid)?);
    }
    stop.store(true, Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    // Every attack ends within a few seconds of the stop (their waits are bounded).
    if tokio::time::timeout(Duration::from_secs(30), async {
        while tasks.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tasks.abort_all();
    }
    let settle = Instant::now();
    let mut rss_end = rss(pid)?;
    while rss_end > rss_start + RSS_SLACK && settle.elapsed() < SETTLE {
        tokio::time::sleep(Duration::from_millis(200)).await;
        rss_end = rss(pid)?;
    }
    Ok(SoakReport {
        secs,
        rss_start,
        rss_peak: rss_peak.max(rss_end),
        rss_end,
        good_ops: good_ops.load(Ordering::Relaxed),
        good_failed: good_failed.load(Ordering::Relaxed),
        attack_rounds: rounds.load(Ordering::Relaxed),
        reasons: reasons
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone(),
    })
}

/// A connection that sends nothing; reopened when the node closes it.
async fn idle(addr: SocketAddr, from: IpAddr, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut tcp) = connect_from(from, addr).await else {
            nap(&stop, Duration::from_millis(200)).await;
            continue;
        };
        let mut buf = [0u8; 256];
        while !stop.load(Ordering::Relaxed) {
            match tokio::time::timeout(Duration::from_millis(500), tcp.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(_)) | Err(_) => {}
            }
        }
    }
}

/// The HTTP/2 preface a byte every two seconds; again when the node closes the connection.
async fn slow_preface(addr: SocketAddr, from: IpAddr, stop: Arc<AtomicBool>) {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut tcp) = connect_from(from, addr).await else {
            nap(&stop, Duration::from_millis(200)).await;
            continue;
        };
        for byte in PREFACE.iter().cycle() {
            if stop.load(Ordering::Relaxed) || tcp.write_all(&[*byte]).await.is_err() {
                break;
            }
            nap(&stop, Duration::from_secs(2)).await;
        }
    }
}

/// An HTTP/2 connection from `from`, its driver spawned.
async fn h2_connect(
    addr: SocketAddr,
    from: IpAddr,
) -> Result<h2::client::SendRequest<bytes::Bytes>, String> {
    let tcp = connect_from(from, addr).await.map_err(|e| e.to_string())?;
    let (send, conn) = h2::client::handshake(tcp)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// The headers of a gRPC call to `method`, with the token or without.
fn grpc_request(addr: SocketAddr, method: &str, token: bool) -> http::Request<()> {
    let mut request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/locks.v1.Locks/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if token {
        request = request.header("authorization", format!("Bearer {TOKEN}"));
    }
    request.body(()).expect("a valid request")
}

/// Opens up to [`HALF_OPEN`] calls of `Info` (the headers only) on one connection, holds them
/// for a few seconds, closes the connection, again.
async fn half_open(
    addr: SocketAddr,
    from: IpAddr,
    token: bool,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        rounds.fetch_add(1, Ordering::Relaxed);
        let Ok(mut send) = h2_connect(addr, from).await else {
            nap(&stop, Duration::from_millis(500)).await;
            continue;
        };
        let mut held = Vec::new();
        for _ in 0..HALF_OPEN {
            let ready = tokio::time::timeout(Duration::from_millis(500), send.clone().ready());
            let Ok(Ok(mut ready)) = ready.await else {
                break;
            };
            match ready.send_request(grpc_request(addr, "Info", token), false) {
                Ok(call) => held.push(call),
                Err(_) => break,
            }
            send = ready;
        }
        nap(&stop, Duration::from_secs(3)).await;
        drop(held);
    }
}

/// Calls of `Session` that send a gRPC frame announcing 64 KiB and only 60 KB of it, held for
/// a few seconds, again.
async fn partial_messages(
    addr: SocketAddr,
    from: IpAddr,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
) {
    let mut frame = vec![0u8, 0, 1, 0, 0];
    frame.extend(std::iter::repeat_n(0x0a, 60 * 1024));
    let frame = bytes::Bytes::from(frame);
    while !stop.load(Ordering::Relaxed) {
        rounds.fetch_add(1, Ordering::Relaxed);
        let Ok(mut send) = h2_connect(addr, from).await else {
            nap(&stop, Duration::from_millis(500)).await;
            continue;
        };
        let mut held = Vec::new();
        for _ in 0..PARTIAL {
            let ready = tokio::time::timeout(Duration::from_millis(500), send.clone().ready());
            let Ok(Ok(mut ready)) = ready.await else {
                break;
            };
            match ready.send_request(grpc_request(addr, "Session", true), false) {
                Ok((response, mut body)) => {
                    let _ = body.send_data(frame.clone(), false);
                    held.push((response, body));
                }
                Err(_) => break,
            }
            send = ready;
        }
        nap(&stop, Duration::from_secs(3)).await;
        drop(held);
    }
}

/// A lock request for an id of `keys` keys.
fn lock_request(id: u64, keys: usize) -> pb::SessionRequest {
    let path = vec!["k"; keys].join("/");
    pb::SessionRequest {
        request_id: id,
        kind: Some(pb::session_request::Kind::Lock(LockSpec::new(&path, "X").0)),
    }
}

/// In one session after another: a lock of an id of 12,000 keys, a request of 65,537 bytes;
/// and on raw calls, a message that does not decode.
async fn bad_requests(
    addr: SocketAddr,
    from: IpAddr,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
) {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("a valid address")
        .local_address(Some(from));
    while !stop.load(Ordering::Relaxed) {
        rounds.fetch_add(1, Ordering::Relaxed);
        let round = async {
            let channel = endpoint.connect().await.ok()?;
            let token: tonic::metadata::MetadataValue<_> =
                format!("Bearer {TOKEN}").parse().ok()?;
            let mut client = pb::locks_client::LocksClient::with_interceptor(
                channel,
                move |mut r: tonic::Request<()>| {
                    r.metadata_mut().insert("authorization", token.clone());
                    Ok(r)
                },
            );
            let (mut tx, rx) = futures::channel::mpsc::channel(4);
            let mut events = client.session(rx).await.ok()?.into_inner();
            tx.send(lock_request(1, 12_000)).await.ok()?;
            let oversize = pb::SessionRequest {
                request_id: 2,
                kind: Some(pb::session_request::Kind::Lock(
                    LockSpec::new(&"x".repeat(65_537), "X").0,
                )),
            };
            tx.send(oversize).await.ok()?;
            // Both refused with an answer each, and the session goes on.
            let mut answers = 0;
            while answers < 2 {
                let event = events.message().await.ok()??;
                if event.request_id != 0 {
                    answers += 1;
                }
            }
            drop(tx);
            // A message that does not decode (a field of wire type 7), on a raw call.
            let mut send = h2_connect(addr, from).await.ok()?.ready().await.ok()?;
            let (response, mut body) = send
                .send_request(grpc_request(addr, "Session", true), false)
                .ok()?;
            body.send_data(
                bytes::Bytes::from_static(&[0, 0, 0, 0, 2, 0x0f, 0xff]),
                true,
            )
            .ok()?;
            let _ = response.await;
            Some(())
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), round).await;
        nap(&stop, Duration::from_millis(100)).await;
    }
}

/// Opens more sessions than an address may hold, holds them for a few seconds, again.
async fn session_flood(
    addr: SocketAddr,
    from: IpAddr,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        rounds.fetch_add(1, Ordering::Relaxed);
        let Ok(mut send) = h2_connect(addr, from).await else {
            nap(&stop, Duration::from_millis(500)).await;
            continue;
        };
        let mut held = Vec::new();
        for _ in 0..300 {
            let ready = tokio::time::timeout(Duration::from_millis(500), send.clone().ready());
            let Ok(Ok(mut ready)) = ready.await else {
                break;
            };
            match ready.send_request(grpc_request(addr, "Session", true), false) {
                Ok(call) => held.push(call),
                Err(_) => break,
            }
            send = ready;
        }
        nap(&stop, Duration::from_secs(3)).await;
        drop(held);
    }
}

/// One lock+unlock in a session of its own, from `from` (the soak's first operation).
async fn good_op(addr: SocketAddr, from: IpAddr, n: u64) -> Result<(), String> {
    let mut client = good_connect(addr, from).await?;
    let mut session = client.session().await.map_err(|e| e.to_string())?;
    let path = format!("good/{from}/{n}");
    session
        .lock(LockSpec::new(&path, "X"))
        .await
        .map_err(|e| e.to_string())?;
    session.unlock(&path).await.map_err(|e| e.to_string())?;
    session.end().await.map_err(|e| e.to_string())
}

async fn good_connect(addr: SocketAddr, from: IpAddr) -> Result<Client, String> {
    // The client has no choice of local address: good clients come from 127.0.0.1, which no
    // attack uses.
    let _ = from;
    let options = ClientOptions {
        token: Some(TOKEN.to_owned()),
        ..ClientOptions::default()
    };
    Client::connect(&addr.to_string(), options)
        .await
        .map_err(|e| e.to_string())
}

/// Locks and unlocks in one session until the soak stops; an operation that fails or passes
/// [`GOOD_OP_BOUND`] is counted and the session started over.
async fn good_client(
    addr: SocketAddr,
    from: IpAddr,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    reasons: Reasons,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let session = tokio::time::timeout(GOOD_OP_BOUND, async {
            good_connect(addr, from)
                .await?
                .session()
                .await
                .map_err(|e| e.to_string())
        })
        .await;
        let mut session = match session {
            Ok(Ok(session)) => session,
            Ok(Err(e)) => {
                not_served(&failed, &reasons, format!("a session: {e}"));
                nap(&stop, Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                not_served(&failed, &reasons, "a session: not within 5 s".to_owned());
                continue;
            }
        };
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let path = format!("good/{from}/{}", n % 64);
            let op = tokio::time::timeout(GOOD_OP_BOUND, async {
                session.lock(LockSpec::new(&path, "X")).await?;
                session.unlock(&path).await
            })
            .await;
            match op {
                Ok(Ok(())) => {
                    ops.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err(e)) => {
                    not_served(&failed, &reasons, format!("lock+unlock: {e}"));
                    break;
                }
                Err(_) => {
                    not_served(&failed, &reasons, "lock+unlock: not within 5 s".to_owned());
                    break;
                }
            }
            // A client that pauses between operations, as a real one does.
            nap(&stop, Duration::from_millis(20)).await;
        }
    }
}

/// The SOAK row: a node process, [`soak`] for `--soak-secs`, the figures.
pub fn run(ctx: &mut Ctx) -> Vec<Row> {
    let secs = ctx.cfg.soak_secs;
    let name = format!("SOAK client-port attacks {secs} s");
    let args: Vec<String> = ["--client-listen", "127.0.0.1:0", "--client-token", TOKEN]
        .map(str::to_owned)
        .to_vec();
    let node = match NodeProcess::start_with("soak", &args) {
        Ok(node) => node,
        Err(e) => return vec![Row::failed(name, "ops/s", e)],
    };
    let addr = match node.client_addr.as_deref().map(str::parse::<SocketAddr>) {
        Some(Ok(addr)) => addr,
        _ => return vec![Row::failed(name, "ops/s", "no client address")],
    };
    let report = ctx
        .rt
        .block_on(soak(addr, node.pid(), Duration::from_secs(secs)));
    drop(node);
    vec![row(name, report)]
}

/// The row of a soak's report: good operations per second, with the memory figures; failed
/// when [`SoakReport::failure`] says so.
pub fn row(name: String, report: Result<SoakReport, String>) -> Row {
    let report = match report {
        Ok(report) => report,
        Err(e) => return Row::failed(name, "ops/s", e),
    };
    let figures = format!(
        "rss start={:.1}MB peak={:.1}MB end={:.1}MB; good ops={} not served={}; attack rounds={}",
        mb(report.rss_start),
        mb(report.rss_peak),
        mb(report.rss_end),
        report.good_ops,
        report.good_failed,
        report.attack_rounds
    );
    if let Some(why) = report.failure() {
        return Row::failed(name, "ops/s", format!("{why}; {figures}"));
    }
    let rate = report.good_ops as f64 / report.secs.max(1e-9);
    Row {
        name,
        unit: "ops/s",
        outcome: Outcome::Measured(Measured {
            value: rate,
            rank: super::stats::RankBy::Rate,
            min: rate,
            max: rate,
            p50_ns: None,
            p99_ns: None,
            ops: report.good_ops,
            rounds: 1,
            floor: None,
            goal: Some((
                "every good op served; RSS ends within 50 MB of the start",
                true,
            )),
            notes: vec![figures],
        }),
    }
}
