//! Shared helpers for the example programs: the benchmark harness ([`bench`]) and [`gdict`], the
//! replicated dictionary on `locks-leader`.

pub mod bench;
pub mod gdict;
pub mod node_cli;
