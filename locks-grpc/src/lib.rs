//! `locks-grpc`: the gRPC API of a locks node (package `locks.v1`, in
//! `proto/locks/v1/locks.proto`), and a Rust client of it.
//!
//! A client opens a *session*, one bidirectional stream that is one transaction on the node
//! (`locks_agent::begin_transaction`): its requests lock, queue, unlock, ask for the status and
//! end; its events answer them and push what the transaction reports (grants with their fencing
//! tokens, losses with their cause, deadlocks resolved, status changes). gRPC clients and
//! in-process transactions are agents alike, so deadlocks across them are detected and resolved
//! the same way. A session ends when the client ends it or its connection is gone (the server's
//! HTTP/2 keepalive drops a silent connection within [`GrpcConfig::keepalive`]); nothing else
//! ends it.
//!
//! Leader election for services outside the process: `Campaign` runs a candidate member of a
//! `locks_leader` group for the client and streams every change of leader, with its term (a
//! fencing token) and value, until the client cancels (resigns); `Observe` streams them
//! without competing; `Proclaim` changes the leader's value without a new election. `Table` and
//! `Graph` read the lock tables of the cluster and its wait-for graph.
//!
//! [`serve`] runs the service for a node; [`client`] is the Rust client. Requests are checked
//! ([`wire`]) and bounded per client ([`Limits`]); refusals are logged at DEBUG, with at most
//! one INFO or WARN line per reason per interval, so a client cannot flood the log. The `.proto`
//! is compiled by protox in `build.rs`: the build needs no `protoc`.
//!
//! ```
//! use locks_grpc::client::{Client, ClientOptions, LockSpec};
//! use locks_grpc::{GrpcConfig, serve};
//! use locks_server::{Node, NodeConfig};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let node = Node::start(NodeConfig::new("doc")).await.unwrap();
//! let server = serve(&node, GrpcConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
//! let addr = server.local_addr().to_string();
//! let mut client = Client::connect(&addr, ClientOptions::default()).await.unwrap();
//! let mut session = client.session().await.unwrap();
//! let locked = session.lock(LockSpec::new("db/x", "X")).await.unwrap();
//! assert_eq!(locked.grant.unwrap().tokens[0].node, "doc");
//! session.end().await.unwrap();
//! # }
//! ```

#![forbid(unsafe_code)]

mod auth;
pub mod client;
mod election;
mod introspect;
mod limits;
mod on_node;
mod outbox;
mod port;
mod server;
mod session;
pub mod wire;

/// The `locks.v1` messages and service, generated from `proto/locks/v1/locks.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("locks.v1");
}

pub use limits::{GrpcConfig, Limits, PortLimits, ReleaseHook, ServerTls};
pub use server::{GrpcServer, ServeError, serve};
/// The gRPC crate the API is built on, for its `Code` and `Status` in client code.
pub use tonic;
