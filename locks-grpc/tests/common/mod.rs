//! What the gRPC tests share: a node with its server on loopback, sessions through the Rust
//! client or on the raw stream, and bounded waits for answers and pushed events.

#![allow(dead_code)]

use locks_grpc::client::{Client, ClientError, ClientOptions, LockSpec, Session};
use locks_grpc::pb::session_event::Kind;
use locks_grpc::{GrpcConfig, GrpcServer, pb, serve};
use locks_server::{Node, NodeConfig};
use locks_testing::wait::within;
use std::time::Duration;

pub const BOUND: Duration = Duration::from_secs(20);

pub async fn node_and_server(
    name: &str,
    config: impl FnOnce(&mut GrpcConfig),
) -> (Node, GrpcServer) {
    let node = Node::start(NodeConfig::new(name)).await.unwrap();
    let mut grpc = GrpcConfig::new("127.0.0.1:0".parse().unwrap());
    config(&mut grpc);
    let server = serve(&node, grpc).unwrap();
    (node, server)
}

pub async fn session(server: &GrpcServer, token: Option<&str>) -> Result<Session, ClientError> {
    let options = ClientOptions {
        token: token.map(str::to_owned),
        ..ClientOptions::default()
    };
    let mut client = Client::connect(&server.local_addr().to_string(), options).await?;
    client.session().await
}

pub fn version(locked: &pb::Locked) -> u64 {
    locked.grant.as_ref().unwrap().tokens[0].version
}

/// The next pushed event that `pick` selects, skipping the others.
pub async fn pushed<T>(session: &mut Session, mut pick: impl FnMut(Kind) -> Option<T>) -> T {
    within(BOUND, "a pushed event", async {
        loop {
            let event = session.next_event().await.expect("the session goes on");
            if let Some(t) = pick(event.unwrap().kind.unwrap()) {
                return t;
            }
        }
    })
    .await
}

/// Requests on the raw stream, to send several without waiting for answers.
pub async fn raw_session(
    server: &GrpcServer,
) -> (
    futures::channel::mpsc::Sender<pb::SessionRequest>,
    tonic::Streaming<pb::SessionEvent>,
) {
    let uri = format!("http://{}", server.local_addr());
    let mut client = pb::locks_client::LocksClient::connect(uri).await.unwrap();
    let (tx, rx) = futures::channel::mpsc::channel(16);
    let events = client.session(rx).await.unwrap().into_inner();
    (tx, events)
}

pub fn lock_request(request_id: u64, path: &str, wait_ms: Option<u64>) -> pb::SessionRequest {
    let mut spec = LockSpec::new(path, "X").0;
    spec.wait_ms = wait_ms;
    pb::SessionRequest {
        request_id,
        kind: Some(pb::session_request::Kind::Lock(spec)),
    }
}

/// The next event answering a request (pushed events skipped).
pub async fn answer(events: &mut tonic::Streaming<pb::SessionEvent>) -> pb::SessionEvent {
    within(BOUND, "an answer", async {
        loop {
            let event = events.message().await.unwrap().expect("the stream goes on");
            if event.request_id != 0 {
                return event;
            }
        }
    })
    .await
}
