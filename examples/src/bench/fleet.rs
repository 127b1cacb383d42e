//! Many clients at once, timed fairly: every client first opens what it needs (a session, a
//! lease, a connection), all of them start together, and each runs whole cycles until the
//! common deadline. The round's time is from the start to the end of the last cycle, so
//! opening sessions (which differs between the systems compared) is never counted, and every
//! counted cycle was waited for to its end.
//!
//! The clients of one fleet are spread over connections as a real client fleet is: at most
//! [`PER_CONNECTION`] clients share one (an HTTP/2 connection multiplexes them).

use super::Ctx;
use super::stats::Sample;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Barrier;

/// At most this many clients of a fleet share one connection.
pub const PER_CONNECTION: usize = 16;

/// The connections `clients` clients are spread over.
pub fn connections(clients: usize) -> usize {
    clients.div_ceil(PER_CONNECTION).max(1)
}

/// The start line of a fleet: every client waits at it once it is ready.
#[derive(Clone)]
pub struct Start {
    barrier: Arc<Barrier>,
    run_for: Duration,
}

impl Start {
    /// Waits until every client (and the timer) is ready; the deadline of this client's
    /// cycles.
    pub async fn ready(&self) -> Instant {
        self.barrier.wait().await;
        Instant::now() + self.run_for
    }
}

/// Runs `clients` clients made by `client(index, start)` on the current runtime, each
/// returning the latencies of its cycles (in ns) and when its last cycle ended (what it does
/// after, such as ending its session, is not timed), and the sample of all of them. Each must
/// call [`Start::ready`] exactly once, before its first cycle (an error before it is reported,
/// and the others are not kept waiting: the round fails).
pub async fn run<F>(
    clients: usize,
    run_for: Duration,
    mut client: impl FnMut(usize, Start) -> F,
) -> Result<Sample, String>
where
    F: Future<Output = Result<(Vec<u64>, Instant), String>> + Send + 'static,
{
    let start = Start {
        barrier: Arc::new(Barrier::new(clients + 1)),
        run_for,
    };
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..clients {
        tasks.spawn(client(i, start.clone()));
    }
    // The timer is the last to arrive, or a client failed before it was ready.
    let began = tokio::select! {
        _ = start.barrier.wait() => Instant::now(),
        Some(joined) = tasks.join_next() => {
            return Err(match joined {
                Ok(Err(e)) => e,
                Ok(Ok(_)) => "a client ended before the start".to_owned(),
                Err(e) => e.to_string(),
            });
        }
    };
    let mut all = Vec::new();
    let mut last = began;
    while let Some(joined) = tasks.join_next().await {
        let (lat, done) = joined.map_err(|e| e.to_string())??;
        all.extend(lat);
        last = last.max(done);
    }
    Ok(Sample::new(all.len() as u64, last - began, all))
}

/// How long one round of a fleet runs.
pub fn fleet_time(ctx: &Ctx) -> Duration {
    Duration::from_millis(ctx.cfg.size(1_000, 200))
}
