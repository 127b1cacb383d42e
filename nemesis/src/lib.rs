//! `nemesis`: fault injection against real `node` processes in network namespaces, and a
//! checker of what their clients believed.
//!
//! The driver ([`net`], [`procs`], [`driver`]) builds a private network of Linux namespaces
//! (a bridge namespace and one per node, joined by veth pairs), runs a `node --mono` process in
//! each node namespace, runs one client per node that repeatedly takes an exclusive `Majority`
//! lock on all nodes and writes to a register guarded by a
//! [`Fence`](locks_core::fence::Fence), and injects faults ([`scenario`]): partitions (two-way
//! and one-way), flapping links, pauses and kills. Everything it sees and does goes into a
//! history stamped with `CLOCK_MONOTONIC` ([`history`], [`clock`]), which the pure
//! [`checker`] judges.
//!
//! Only the parts that touch the system (namespaces, processes, signals) are not unit-tested;
//! they are exercised by running the binary.

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
