//! ETCD: etcd's lock and election services, measured in the same run as the CLIENT rows against
//! an etcd the user started (`--etcd ADDR`; the harness contacts that address and nothing
//! else), from a Rust client in this process over gRPC, as `etcdctl lock` and `etcdctl elect`
//! use them.
//!
//! - `E1 etcd lock+unlock`: one lease (the session); each operation is `Lock(name, lease)` on
//!   its own name, then `Unlock(key)`: two round trips, as C1's lock and unlock.
//! - `E1 etcd N sessions lock+unlock` (N of 16, 64, 256): N leases at once (a `fleet`, 16 per
//!   connection as C1's sessions), each doing lock+unlock on its own names for a fixed time.
//! - `E2 etcd campaign+resign`: one lease; each operation campaigns for one election, which it
//!   wins at once (no other candidate), and resigns.
//!
//! The stubs are generated at build time by protox from the subset of etcd's `.proto` files in
//! `examples/proto/etcd` (see `build.rs`): no `protoc` needed.

use super::fleet;
use super::floors::Floor;
use super::rig::err;
use super::stats::Sample;
use super::{Check, Spec};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

/// The etcd API subset, generated from `examples/proto/etcd`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
mod pb {
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
    pub mod v3lockpb {
        tonic::include_proto!("v3lockpb");
    }
    pub mod v3electionpb {
        tonic::include_proto!("v3electionpb");
    }
}

use pb::etcdserverpb::lease_client::LeaseClient;
use pb::etcdserverpb::{LeaseGrantRequest, LeaseRevokeRequest};
use pb::v3electionpb::election_client::ElectionClient;
use pb::v3electionpb::{CampaignRequest, ResignRequest};
use pb::v3lockpb::lock_client::LockClient;
use pb::v3lockpb::{LockRequest, UnlockRequest};

/// The TTL of the benchmark's leases, in seconds: longer than any round, so no keep-alive.
const LEASE_TTL: i64 = 120;

/// The single-session row's name.
pub const E1: &str = "E1 etcd lock+unlock";

/// The name of the Lock/Unlock row of `sessions` sessions.
pub fn name(sessions: usize) -> String {
    if sessions == 1 {
        E1.to_owned()
    } else {
        format!("E1 etcd {sessions} sessions lock+unlock")
    }
}

/// One connection to etcd, with a client of each service used.
#[derive(Clone)]
struct Etcd {
    lease: LeaseClient<Channel>,
    lock: LockClient<Channel>,
    election: ElectionClient<Channel>,
}

impl Etcd {
    async fn connect(addr: &str) -> Result<Etcd, String> {
        let uri = if addr.contains("://") {
            addr.to_owned()
        } else {
            format!("http://{addr}")
        };
        let channel = Endpoint::from_shared(uri)
            .map_err(err)?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| format!("etcd at {addr}: {e}"))?;
        Ok(Etcd {
            lease: LeaseClient::new(channel.clone()),
            lock: LockClient::new(channel.clone()),
            election: ElectionClient::new(channel),
        })
    }

    /// A new lease (one session's).
    async fn grant(&mut self) -> Result<i64, String> {
        let reply = self
            .lease
            .lease_grant(LeaseGrantRequest {
                ttl: LEASE_TTL,
                id: 0,
            })
            .await
            .map_err(err)?
            .into_inner();
        if reply.error.is_empty() {
            Ok(reply.id)
        } else {
            Err(format!("etcd refused a lease: {}", reply.error))
        }
    }

    /// Revokes `lease`, deleting whatever key is still attached to it.
    async fn revoke(&mut self, lease: i64) -> Result<(), String> {
        self.lease
            .lease_revoke(LeaseRevokeRequest { id: lease })
            .await
            .map_err(err)?;
        Ok(())
    }

    /// `Lock(name)` then `Unlock(key)`.
    async fn lock_unlock(&mut self, name: String, lease: i64) -> Result<(), String> {
        let key = self
            .lock
            .lock(LockRequest {
                name: name.into_bytes(),
                lease,
            })
            .await
            .map_err(err)?
            .into_inner()
            .key;
        self.lock.unlock(UnlockRequest { key }).await.map_err(err)?;
        Ok(())
    }
}

/// A prefix no earlier run or round shares: a crashed run's keys (held until their lease
/// expires) never stand in the way.
fn prefix(tag: &str, round: usize) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("locks-bench/{}-{nanos}/{tag}{round}", std::process::id())
}

/// `n` lock+unlock operations in one session, each timed.
pub async fn sequential(addr: String, round: usize, n: u64) -> Result<Sample, String> {
    let mut etcd = Etcd::connect(&addr).await?;
    let lease = etcd.grant().await?;
    let prefix = prefix("e1-", round);
    let mut lat = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        etcd.lock_unlock(format!("{prefix}/{i}"), lease).await?;
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let sample = Sample::new(n, start.elapsed(), lat);
    etcd.revoke(lease).await?;
    Ok(sample)
}

/// `sessions` sessions spread over [`fleet::connections`] connections, each doing
/// lock+unlock for `run_for`.
pub async fn concurrent(
    addr: String,
    round: usize,
    sessions: usize,
    run_for: Duration,
) -> Result<Sample, String> {
    let mut conns = Vec::new();
    for _ in 0..fleet::connections(sessions) {
        conns.push(Etcd::connect(&addr).await?);
    }
    let prefix = prefix("e1m-", round);
    fleet::run(sessions, run_for, |s, start| {
        let mut etcd = conns[s % conns.len()].clone();
        let prefix = prefix.clone();
        async move {
            let lease = etcd.grant().await?;
            let deadline = start.ready().await;
            let mut lat = Vec::new();
            let mut i = 0u64;
            let mut done = Instant::now();
            while done < deadline {
                let t = Instant::now();
                etcd.lock_unlock(format!("{prefix}/{s}/{i}"), lease).await?;
                done = Instant::now();
                lat.push((done - t).as_nanos() as u64);
                i += 1;
            }
            etcd.revoke(lease).await?;
            Ok((lat, done))
        }
    })
    .await
}

/// `n` elections won and resigned in one session, each timed.
pub async fn elections(addr: String, round: usize, n: u64) -> Result<Sample, String> {
    let mut etcd = Etcd::connect(&addr).await?;
    let lease = etcd.grant().await?;
    let name = prefix("e2-", round).into_bytes();
    let mut lat = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        let leader = etcd
            .election
            .campaign(CampaignRequest {
                name: name.clone(),
                lease,
                value: i.to_string().into_bytes(),
            })
            .await
            .map_err(err)?
            .into_inner()
            .leader
            .ok_or("etcd answered a campaign without its leader key")?;
        etcd.election
            .resign(ResignRequest {
                leader: Some(leader),
            })
            .await
            .map_err(err)?;
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let sample = Sample::new(n, start.elapsed(), lat);
    etcd.revoke(lease).await?;
    Ok(sample)
}

/// The spec of the Lock/Unlock row of `sessions` sessions, with the goal of the locks row
/// beside it where the issue sets one (decided by [`super::client::decide_goals`] once both
/// are measured).
pub fn spec(sessions: usize) -> Spec {
    let spec = Spec::rate(name(sessions), "op/s", Floor::Tcp);
    match sessions {
        1 => spec.goal(
            "goal: C1 grpc local lock+unlock >= 10x this rate",
            Check::AfterRounds,
        ),
        64 => spec.goal(
            "goal: C1 grpc 64 sessions >= 10x this rate",
            Check::AfterRounds,
        ),
        _ => spec,
    }
}

/// The spec of the Campaign/Resign row.
pub fn election_spec() -> Spec {
    Spec::rate("E2 etcd campaign+resign", "op/s", Floor::Tcp)
}
