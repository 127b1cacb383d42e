//! Bounded waits: every wait of a test has a time bound, past which the test fails with what
//! it was waiting for, so that a broken build fails fast instead of hanging. The bound is the
//! caller's (each suite keeps its own, sized for its slowest step); nothing here asserts a
//! duration.

#[cfg(feature = "tokio")]
use std::fmt::Debug;
#[cfg(feature = "tokio")]
use std::future::Future;
use std::time::{Duration, Instant};

/// A current-thread runtime with every driver the workspace's features enable, for a plain
/// `#[test]` that drives nodes itself (`rt.block_on`).
#[cfg(feature = "tokio")]
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread tokio runtime")
}

/// Awaits `f`, failing the test as `what` if it is not done within `bound`.
#[cfg(feature = "tokio")]
pub async fn within<F: Future>(bound: Duration, what: &str, f: F) -> F::Output {
    match tokio::time::timeout(bound, f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: not done within {bound:?}"),
    }
}

/// Calls `probe` every `interval` until it returns `Ok`, and returns that value; fails the test
/// as `what`, with the last `Err` the probe returned, if that takes longer than `bound`.
#[cfg(feature = "tokio")]
pub async fn poll<T, E, Fut>(
    bound: Duration,
    what: &str,
    interval: Duration,
    mut probe: impl FnMut() -> Fut,
) -> T
where
    E: Debug,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let last = match tokio::time::timeout_at(deadline, probe()).await {
            Ok(Ok(value)) => return value,
            Ok(Err(last)) => last,
            Err(_) => panic!("{what}: not done within {bound:?} (a probe hung)"),
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not done within {bound:?}; last seen: {last:#?}"
        );
        tokio::time::sleep(interval).await;
    }
}

/// Calls the async `condition` every `interval` until it is true; fails the test as `what` if
/// that takes longer than `bound`.
#[cfg(feature = "tokio")]
pub async fn until<Fut>(
    bound: Duration,
    what: &str,
    interval: Duration,
    mut condition: impl FnMut() -> Fut,
) where
    Fut: Future<Output = bool>,
{
    poll(bound, what, interval, || {
        let done = condition();
        async move { if done.await { Ok(()) } else { Err("not yet") } }
    })
    .await
}

/// Blocks the thread until `condition` holds, yielding between checks; fails the test as
/// `what` if that takes longer than `bound`. For tests without an async runtime.
pub fn eventually(bound: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Deadline::after(bound);
    while !condition() {
        deadline.check(|| what.to_owned());
        std::thread::yield_now();
    }
}

/// The instant at which every wait of a test ends (a test driving processes line by line
/// waits in many places, all under one bound).
#[derive(Clone, Copy, Debug)]
pub struct Deadline(Instant);

impl Deadline {
    /// `bound` from now.
    pub fn after(bound: Duration) -> Deadline {
        Deadline(Instant::now() + bound)
    }

    /// What is left of it (zero once passed), to bound a blocking receive.
    pub fn left(&self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    /// Fails the test, with what it was waiting for, once the deadline has passed.
    pub fn check(&self, what: impl FnOnce() -> String) {
        if Instant::now() >= self.0 {
            panic!("timed out waiting for: {}", what());
        }
    }
}
