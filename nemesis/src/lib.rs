//! `nemesis`: fault injection against real `node` processes in network namespaces, and
//! checkers of what their clients believed.
//!
//! The drivers build a private network of Linux namespaces ([`net`]: a bridge namespace and one
//! per node, joined by veth pairs), run a `node --mono` process in each node namespace
//! ([`procs`], [`cluster`]) and inject faults against whoever holds the lock or leads
//! ([`scenario`]): partitions (two-way and one-way), flapping links, pauses and kills, and
//! restarts with the wall clock an hour behind (libfaketime) of one node or the whole cluster,
//! each node keeping its data directory.
//!
//! - [`driver`] runs one [`client`] per node that repeatedly takes an exclusive `Majority` lock
//!   on all nodes and writes to a register guarded by a [`Fence`](locks_core::fence::Fence);
//! - [`leader_driver`] runs a gdict replica (majority mode) per node and a writer through them.
//!
//! Everything they see and do goes into a history stamped with `CLOCK_MONOTONIC` ([`history`],
//! [`clock`]), which the pure [`checker`] judges. SIGINT and SIGTERM end a run through its
//! cleanup ([`interrupt`]).
//!
//! The pure parts (histories, checkers, the client's state machine, line parsing, profiles)
//! are unit-tested; the parts that touch the system (namespaces, processes, signals) are
//! exercised by running the binary.
//!
//! # Public surface
//!
//! The modules above, for this crate's binary and tests; it is no library for other programs
//! and uses only the public surface of the lock crates.

pub mod checker;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod driver;
pub mod history;
pub mod interrupt;
pub mod leader_driver;
pub mod net;
pub mod procs;
pub mod scenario;
