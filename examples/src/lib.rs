//! Shared helpers for the example programs: the benchmark harness ([`bench`]) and [`gdict`], the
//! replicated dictionary on `locks-leader`; [`node_cli`], the `node` binary's configuration
//! and line protocol.

pub mod bench;
pub mod gdict;
pub mod node_cli;
