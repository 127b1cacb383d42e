//! How the node prints grants, statuses and its lock table (the line formats the module docs
//! of the `node` binary list; tests parse them, so they change only with those tests).

use crate::say;
use locks_agent::{Transaction, TransactionStatus};
use locks_core::LockId;
use locks_core::proto::LockView;
use locks_server::{Node, TableSnapshot};

/// Prints `granted <txn> <path> <node@version,...>` and the deadlocks resolved so far.
pub async fn report_granted(t: &Transaction, txn: &str, path: &str) {
    match t.await_all_locks().await {
        Ok(result) => {
            say!("granted {txn} {path} {}", fencing(&result, path));
            if !result.deadlocks.is_empty() {
                let list: Vec<String> = result
                    .deadlocks
                    .iter()
                    .map(|d| format!("{}@{}", slash(&d.lock), d.node))
                    .collect();
                say!("deadlocks {txn} {}", list.join(","));
            }
        }
        Err(e) => say!("error {txn} {e}"),
    }
}

/// The fencing versions of the lock at `path`, as `node@version,...` (`-` if not held).
pub fn fencing(result: &locks_agent::LockResult, path: &str) -> String {
    let held = result.locks.iter().find(|g| slash(&g.lock) == path);
    match held {
        Some(g) if !g.nodes.is_empty() => g.versions().to_string(),
        _ => "-".to_owned(),
    }
}

/// The word `status` prints for a transaction status.
pub fn status_word(status: &TransactionStatus) -> String {
    match status {
        TransactionStatus::NoLocks => "no_locks".to_owned(),
        TransactionStatus::Waiting => "waiting".to_owned(),
        TransactionStatus::HaveAllLocks { .. } => "have_all_locks".to_owned(),
        TransactionStatus::CannotServe { .. } => "cannot_serve".to_owned(),
    }
}

/// A lock id as the command line writes it: its keys joined by `/` (the form the cluster's
/// wait-for graph uses too).
pub use locks_server::introspect::graph::slash;

/// Prints the lock table, one `lock ...` line per lock, then `end-table`.
pub async fn print_table(node: &Node) {
    match node.snapshot().await {
        Ok(snapshot) => {
            for line in table_lines(&snapshot) {
                say!("{line}");
            }
            say!("end-table");
        }
        Err(e) => say!("error - {e}"),
    }
}

/// The `lock ...` lines of a table snapshot.
pub fn table_lines(snapshot: &TableSnapshot) -> Vec<String> {
    snapshot
        .locks
        .iter()
        .map(|l| lock_line(&l.lock, &l.view()))
        .collect()
}

/// One lock as `table` prints it:
/// `lock <a/b> v<version> <group|-> granted=<agent:mode,...> converting=<agent:held>requested,...> waiting=<agent:mode,...>`.
pub fn lock_line(lock: &LockId, view: &LockView) -> String {
    let entries = |v: Vec<String>| v.join(",");
    format!(
        "lock {} v{} {} granted={} converting={} waiting={}",
        slash(lock),
        view.version,
        view.group.map_or("-".to_owned(), |m| m.to_string()),
        entries(
            view.granted
                .iter()
                .map(|e| format!("{}:{}", e.agent, e.mode))
                .collect()
        ),
        entries(
            view.converting
                .iter()
                .map(|c| format!("{}:{}>{}", c.agent, c.held, c.requested))
                .collect()
        ),
        entries(
            view.waiting
                .iter()
                .map(|e| format!("{}:{}", e.agent, e.mode))
                .collect()
        ),
    )
}
