//! Helpers shared by the tests of `locks-leader`.
#![allow(dead_code)]

pub mod dict;

use std::future::Future;
use std::time::Duration;

/// The bound on every wait in the tests: long enough for a loaded CI machine, short enough to
/// fail a hung test.
pub const BOUND: Duration = Duration::from_secs(30);

/// Runs `f`, failing the test if it takes longer than [`BOUND`].
pub async fn bounded<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(BOUND, f)
        .await
        .expect("bounded wait exceeded")
}
