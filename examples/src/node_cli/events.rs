//! The events a transaction pushes, printed unasked (`locks_agent::Transaction::events`):
//!
//! ```text
//! lost t1 db/x a,b node-down       a lock t1 was told it holds is gone: on which nodes, why
//! granted t1 db/x a@1050,b@981     granted again after such a loss, with the new versions
//! ```
//!
//! The first grant of a lock is printed by the `lock` command's answer, not here.

use crate::node_cli::print::slash;
use crate::say;
use locks_agent::{TransactionEvent, TransactionEvents};
use locks_core::LockId;
use std::collections::HashSet;

/// Prints the losses and re-grants of transaction `txn` until it ends.
pub async fn print_events(txn: String, mut events: TransactionEvents) {
    // Locks lost and not granted again since: their next grant is a re-grant.
    let mut lost: HashSet<LockId> = HashSet::new();
    while let Some(event) = events.recv().await {
        match event {
            TransactionEvent::Lost(l) => {
                let nodes: Vec<String> = l.nodes.iter().map(|n| n.to_string()).collect();
                let nodes = if nodes.is_empty() {
                    "-".to_owned()
                } else {
                    nodes.join(",")
                };
                say!("lost {txn} {} {nodes} {}", slash(&l.lock), l.cause);
                lost.insert(l.lock);
            }
            TransactionEvent::Granted(g) if lost.remove(&g.lock) => {
                say!("granted {txn} {} {}", slash(&g.lock), g.versions());
            }
            _ => {}
        }
    }
}
