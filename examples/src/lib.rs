//! Shared helpers for the example programs.

pub mod bench;
