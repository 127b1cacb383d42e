//! Helpers shared by the tests that run transports, nodes and routers: tracing to the test's
//! output, a bound on every wait, node names, the loopback address, and a remote link that
//! records what it is sent.

use locks_core::NodeId;
use locks_core::proto::Envelope;
use locks_server::{RemoteLink, RouteError};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

/// Logs `locks_server` at debug level to the test's output (once per test binary).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("locks_server=debug")
        .try_init();
}

/// Awaits `f`, failing the test as `what` if it is not done within `bound`.
pub async fn within<F: Future>(bound: Duration, what: &str, f: F) -> F::Output {
    match tokio::time::timeout(bound, f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: not done within {bound:?}"),
    }
}

/// The node named `name`.
pub fn id(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

/// 127.0.0.1 with an ephemeral port.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A remote link that keeps every envelope it is sent, in order.
#[derive(Default)]
pub struct Captured(pub Mutex<Vec<Envelope>>);

impl RemoteLink for Captured {
    fn send(&self, envelope: Envelope) -> Result<(), RouteError> {
        self.0.lock().unwrap().push(envelope);
        Ok(())
    }
}
