//! The parts of the `node` binary's line protocol that are not about running a node: how a
//! line is written to stdout ([`out`]), and how tables, grants and statuses are printed
//! ([`print`]). The binary owns the commands; this module owns the text.

pub mod config;
pub mod out;
pub mod print;

/// The commands the node reads on stdin, one per line, as `help` prints them.
pub const HELP: &[&str] = &[
    "lock <txn> <a/b/c> [mode] [node,node,...] [all|any|majority|all_alive|majority_alive]",
    "status <txn>",
    "end <txn>",
    "nodes",
    "table",
    "gdict <d>",
    "store <d> <key> <int>",
    "fetch <d> <key>",
    "leader <d>",
    "help",
    "quit",
];
