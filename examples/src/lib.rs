//! Shared helpers for the example programs, and [`gdict`], the replicated dictionary on
//! `locks-leader`.

pub mod gdict;
