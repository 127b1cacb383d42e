//! Test support shared by the test suites of the workspace; a dev-dependency only, never
//! published, never a dependency of a library crate.
//!
//! - [`wait`]: the bounded waits every suite that waits uses, so that a broken build fails
//!   fast instead of hanging (the async ones with the feature `tokio`);
//! - `recorded` (feature `metrics`): what a node recorded through the `metrics` facade, read
//!   back from a `DebuggingRecorder`;
//! - `cluster` (feature `cluster`): in-process nodes, every pair connected;
//! - `forged_peer` (feature `cluster`): a peer that speaks the wire protocol by hand, to send a node
//!   what a misbehaving member could;
//! - [`seeded`]: the seeded generator and seed ranges of the simulations;
//! - `sim` (feature `sim`): the deterministic simulation harness shared by
//!   the agent simulations, the model checker and the leader simulations: the in-memory
//!   network of FIFO channels, the real lock tables of the simulated nodes, and the scheduling
//!   of one step. Each simulation keeps only its actors (agent cores, leader members) and its
//!   oracles.
//!
//! - `certs` (feature `tls`): a test CA and node certificates made at test time (rcgen), for
//!   the TLS tests;
//!
//! Without features the crate has no dependency, which lets `locks-core`'s own tests use the
//! waits.

#[cfg(feature = "tls")]
pub mod certs;
#[cfg(feature = "cluster")]
pub mod cluster;
#[cfg(feature = "cluster")]
pub mod forged_peer;
#[cfg(feature = "metrics")]
pub mod recorded;
pub mod seeded;
#[cfg(feature = "sim")]
pub mod sim;
pub mod wait;

pub use seeded::{Rng, seeds_from_env};
