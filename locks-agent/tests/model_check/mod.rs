//! The exhaustive model checker of the lock protocol: the modelled world and its steps
//! ([`world`]), the properties checked ([`oracle`]), the breadth-first search ([`explore`]) and
//! the configurations ([`configs`]), and the renderings of traces ([`show`]). See `tests/model_check.rs` for how to run it.
#![allow(dead_code)]

pub mod configs;
pub mod explore;
pub mod oracle;
pub use locks_testing::seeded;
pub mod show;
pub mod world;
