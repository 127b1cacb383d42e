//! Shared helpers for the example programs: the benchmark harness ([`bench`](mod@bench)) and [`gdict`], the
//! replicated dictionary on `locks-leader`; [`node_cli`], the `node` binary's configuration
//! and line protocol; [`locksctl`], what the `locksctl` binary prints and its supervision of
//! the command it runs; [`sees`], which the multi-node examples wait on.
//!
//! # Public surface
//!
//! The modules and [`sees`] above, for this crate's examples, binaries and tests; it is no
//! library for other programs. It uses only the public surface of the lock crates (the graph
//! benchmark: `locks_agent::state_machine::ViewGraph`).

pub mod bench;
pub mod gdict;
pub mod locksctl;
pub mod node_cli;

use locks_server::Node;
use std::time::Duration;

/// Waits until `node` sees exactly the nodes `names` (itself included, sorted), for at most
/// 10 s; panics if the cluster does not settle by then (an example has nothing better to do).
pub async fn sees(node: &Node, names: &[&str]) {
    let mut events = node.subscribe_nodes();
    let settled = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let have: Vec<String> = node.nodes().iter().map(|n| n.to_string()).collect();
            if have.iter().map(String::as_str).eq(names.iter().copied()) {
                return;
            }
            events.recv().await;
        }
    })
    .await;
    settled.expect("the cluster settles");
}
