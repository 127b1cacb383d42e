//! A session's locks on three nodes (`Majority`), through the API of one of them: what the
//! client is told for each lock and unlock.

use locks_grpc::client::{Client, ClientOptions, LockSpec, Session};
use locks_grpc::pb::session_event::Kind;
use locks_grpc::pb::{self, Requirement};
use locks_grpc::{GrpcConfig, GrpcServer, serve};
use locks_server::{Node, NodeConfig};
use locks_testing::wait::within;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(20);

const NAMES: [&str; 3] = ["ma", "mb", "mc"];

/// Three connected nodes and the API served by the first.
async fn cluster() -> (Vec<Node>, GrpcServer) {
    let loopback = "127.0.0.1:0".parse().unwrap();
    let configs = NAMES.map(|n| {
        NodeConfig::new(n)
            .listen(loopback)
            .cookie("secret")
            .start_delay(Duration::ZERO)
    });
    let nodes = locks_testing::cluster::connected(configs, BOUND).await;
    let server = serve(&nodes[0], GrpcConfig::new(loopback)).unwrap();
    (nodes, server)
}

/// A client of the API `server` serves.
async fn client(server: &GrpcServer) -> Client {
    Client::connect(&server.local_addr().to_string(), ClientOptions::default())
        .await
        .unwrap()
}

fn status(kind: &Kind) -> Option<pb::TransactionStatus> {
    match kind {
        Kind::Status(s) => pb::TransactionStatus::try_from(s.status).ok(),
        _ => None,
    }
}

/// The pushed events up to and with the first status `last`.
async fn pushed_until(session: &mut Session, last: pb::TransactionStatus) -> Vec<Kind> {
    within(BOUND, "the pushed events", async {
        let mut seen = Vec::new();
        loop {
            let event = session.next_event().await.expect("the session goes on");
            let kind = event.unwrap().kind.unwrap();
            let done = status(&kind) == Some(last);
            seen.push(kind);
            if done {
                return seen;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "current_thread")]
async fn a_majority_lock_and_its_unlock_push_the_grant_and_the_status_changes_after_the_wait() {
    let (_nodes, server) = cluster().await;
    let mut client = client(&server).await;
    let mut s = client.session().await.unwrap();
    for i in 0..20 {
        let path = format!("m/{i}");
        let spec = LockSpec::new(&path, "X")
            .nodes(NAMES)
            .requirement(Requirement::Majority);
        let locked = within(BOUND, "lock", s.lock(spec)).await.unwrap();
        let grant = locked.grant.unwrap();
        assert!(grant.tokens.len() >= 2, "{grant:?}");
        s.unlock(&path).await.unwrap();
        // `Waiting` is not pushed while the call waits: the call says so. The grant, with the
        // tokens the answer carried, and every status change after the wait are.
        let seen = pushed_until(&mut s, pb::TransactionStatus::NoLocks).await;
        match &seen[..] {
            [Kind::Granted(g), have_all, no_locks] => {
                assert_eq!(*g, grant);
                assert_eq!(status(have_all), Some(pb::TransactionStatus::HaveAllLocks));
                assert_eq!(status(no_locks), Some(pb::TransactionStatus::NoLocks));
            }
            other => panic!("lock {i}: pushed {other:?}"),
        }
    }
    s.end().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_majority_request_queued_without_waiting_pushes_its_waiting_status() {
    let (_nodes, server) = cluster().await;
    let mut client = client(&server).await;
    let mut s = client.session().await.unwrap();
    let spec = LockSpec::new("n", "X")
        .nodes(NAMES)
        .requirement(Requirement::Majority);
    s.lock_nowait(spec).await.unwrap();
    // No call waits: the client hears that the transaction waits, then that it holds the lock.
    let seen = pushed_until(&mut s, pb::TransactionStatus::HaveAllLocks).await;
    match &seen[..] {
        [waiting, Kind::Granted(g), _] => {
            assert_eq!(status(waiting), Some(pb::TransactionStatus::Waiting));
            assert_eq!(g.id, vec!["n"]);
            assert!(g.tokens.len() >= 2, "{g:?}");
        }
        other => panic!("pushed {other:?}"),
    }
    s.end().await.unwrap();
}
