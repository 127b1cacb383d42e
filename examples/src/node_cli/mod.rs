//! The parts of the `node` binary that are not about running a node: its configuration from
//! file and flags ([`config`]), the test certificates of `--gen-certs` ([`certs`]), how a line
//! is written to stdout ([`out`]), how tables, grants and statuses are printed
//! ([`print`](mod@print)), how the cluster's tables and wait-for graph are printed
//! ([`cluster`]), the transaction events it prints unasked ([`events`]), its Prometheus
//! endpoint ([`metrics`]), how it reads its command lines ([`stdin`]) and the settings of its
//! client API ([`client`]), and the thread that gives freed memory back to the system
//! ([`trim`]). The binary owns the commands; this module owns the text.

pub mod certs;
pub mod client;
pub mod cluster;
pub mod config;
pub mod events;
pub mod metrics;
pub mod out;
pub mod print;
pub mod stdin;
pub mod trim;

/// The commands the node reads on stdin, one per line, as `help` prints them.
pub const HELP: &[&str] = &[
    "lock <txn> <a/b/c> [mode] [node,node,...] [all|any|majority|all_alive|majority_alive] [wait=MS]",
    "status <txn>",
    "end <txn>",
    "nodes",
    "table",
    "cluster-table [max_locks] [timeout_ms]",
    "cluster-graph [dot] [timeout_ms]",
    "gdict <d> [node,node,...]",
    "store <d> <key> <int>",
    "fetch <d> <key>",
    "leader <d>",
    "help",
    "quit",
];
