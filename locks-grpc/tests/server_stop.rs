//! The server's own end: dropped, it closes its connections at once, and the sessions on them
//! end and release their locks; stopped, it waits for its sessions to end.

use locks_agent::{Options, begin_transaction};
use locks_core::{Mode, lock_id};
use locks_grpc::client::{Client, ClientOptions, LockSpec, Session};
use locks_grpc::{GrpcConfig, GrpcServer, serve};
use locks_server::{Node, NodeConfig};
use locks_testing::wait::within;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(20);

async fn node_and_session(name: &str) -> (Node, GrpcServer, Session) {
    let node = Node::start(NodeConfig::new(name)).await.unwrap();
    let server = serve(&node, GrpcConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    let addr = server.local_addr().to_string();
    let mut client = Client::connect(&addr, ClientOptions::default())
        .await
        .unwrap();
    let session = client.session().await.unwrap();
    (node, server, session)
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_server_ends_its_sessions_and_their_locks_are_released() {
    let (node, server, mut session) = node_and_session("stop1").await;
    within(BOUND, "lock", session.lock(LockSpec::new("db/x", "X")))
        .await
        .unwrap();
    drop(server);
    let end = within(BOUND, "the session's end", session.next_event()).await;
    assert!(!matches!(end, Some(Ok(_))), "the session went on: {end:?}");
    let txn = begin_transaction(&node, Options::default()).await.unwrap();
    within(BOUND, "the lock after the session", async {
        txn.lock(lock_id!["db", "x"], Mode::X).await
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_stopped_server_waits_for_its_open_sessions_to_end() {
    let (_node, server, mut session) = node_and_session("stop2").await;
    let stopped = tokio::spawn(server.stop());
    // The session still serves requests while the server stops.
    within(BOUND, "lock", session.lock(LockSpec::new("db/x", "X")))
        .await
        .unwrap();
    assert!(!stopped.is_finished());
    within(BOUND, "end", session.end()).await.unwrap();
    within(BOUND, "the stop", stopped).await.unwrap();
}
