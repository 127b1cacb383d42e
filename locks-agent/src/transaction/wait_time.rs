//! The wait histogram of `lock` calls (`locks_wait_seconds`, see `locks_server::metrics`):
//! only the calls that go through the agent are timed; a fast-path grant does not wait.

use crate::error::Error;
use locks_server::Node;
use locks_server::embed::NodeInternals;
use std::future::Future;
use std::time::Instant;

/// `granted`, recording in `node`'s wait histogram how long it took from now when it succeeds.
pub(super) fn timed<T>(
    node: &Node,
    granted: impl Future<Output = Result<T, Error>> + Send + 'static,
) -> impl Future<Output = Result<T, Error>> + Send + 'static {
    let started = Instant::now();
    let histogram = node.router().metrics().wait_seconds.clone();
    async move {
        let result = granted.await;
        if result.is_ok() {
            histogram.record(started.elapsed());
        }
        result
    }
}
