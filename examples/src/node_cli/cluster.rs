//! How the node prints the cluster's lock tables and wait-for graph (`cluster-table`,
//! `cluster-graph`): the line formats the `node` binary's module docs list and
//! `docs/introspection.md` explains; tests parse them, so they change only with those tests.

use crate::node_cli::print::lock_line;
use crate::say;
use locks_core::NodeId;
use locks_server::{ClusterQuery, ClusterView, Node};
use std::time::Duration;

/// The arguments of `cluster-table [max_locks] [timeout_ms]` (defaults: [`ClusterQuery`]'s).
pub fn table_query(args: &[&str]) -> Result<ClusterQuery, String> {
    let mut query = ClusterQuery::default();
    match args {
        [] => {}
        [max] => query.max_locks_per_node = number(max, "max_locks")?,
        [max, ms] => {
            query.max_locks_per_node = number(max, "max_locks")?;
            query.timeout = Duration::from_millis(number(ms, "timeout_ms")?);
        }
        _ => return Err("too many arguments".to_owned()),
    }
    Ok(query)
}

/// The arguments of `cluster-graph [dot] [timeout_ms]`: whether to print DOT, and the query.
pub fn graph_query(args: &[&str]) -> Result<(bool, ClusterQuery), String> {
    let (dot, rest) = match args {
        ["dot", rest @ ..] => (true, rest),
        rest => (false, rest),
    };
    let mut query = ClusterQuery::default();
    match rest {
        [] => {}
        [ms] => query.timeout = Duration::from_millis(number(ms, "timeout_ms")?),
        _ => return Err("too many arguments".to_owned()),
    }
    Ok((dot, query))
}

fn number<T: std::str::FromStr>(word: &str, what: &str) -> Result<T, String> {
    word.parse()
        .map_err(|_| format!("{what} must be a number, not {word:?}"))
}

/// `a,b` (`-` when empty).
fn list<'a>(nodes: impl IntoIterator<Item = &'a NodeId>) -> String {
    let names: Vec<&str> = nodes.into_iter().map(NodeId::as_str).collect();
    if names.is_empty() {
        "-".to_owned()
    } else {
        names.join(",")
    }
}

/// The lines of `cluster-table`: per node (by name) `node <n> locks=<listed> total=<all>`
/// (with ` truncated` when some were left out) and its `<n> lock ...` lines, then
/// `missing <a,b|->`; without the end marker.
pub fn cluster_table_lines(view: &ClusterView) -> Vec<String> {
    let mut lines = Vec::new();
    for (node, table) in &view.nodes {
        lines.push(format!(
            "node {node} locks={} total={}{}",
            table.locks.len(),
            table.total_locks,
            if table.truncated() { " truncated" } else { "" }
        ));
        for l in &table.locks {
            lines.push(format!("{node} {}", lock_line(&l.lock, &l.view)));
        }
    }
    lines.push(format!("missing {}", list(&view.missing)));
    lines
}

/// The lines of `cluster-graph`: the edges (`edge <waiter> <blocker> <lock>@<node> [cycle]`),
/// then `missing <a,b|->` and `truncated <a,b|->`; or, with `dot`, the DOT text's lines.
/// Without the end marker.
pub fn cluster_graph_lines(view: &ClusterView, node: &Node, dot: bool) -> Vec<String> {
    let graph = view.wait_for_graph(node.modes());
    if dot {
        return graph.to_dot().lines().map(str::to_owned).collect();
    }
    let mut lines = graph.text_lines();
    lines.push(format!("missing {}", list(&graph.missing)));
    lines.push(format!("truncated {}", list(&graph.truncated)));
    lines
}

/// Runs `cluster-table`: the lines of [`cluster_table_lines`], then `end-cluster-table`.
pub async fn print_cluster_table(node: &Node, query: ClusterQuery) {
    match node.cluster_view(query).await {
        Ok(view) => {
            for line in cluster_table_lines(&view) {
                say!("{line}");
            }
            say!("end-cluster-table");
        }
        Err(e) => say!("error - {e}"),
    }
}

/// Runs `cluster-graph`: the lines of [`cluster_graph_lines`], then `end-cluster-graph`.
pub async fn print_cluster_graph(node: &Node, dot: bool, query: ClusterQuery) {
    match node.cluster_view(query).await {
        Ok(view) => {
            for line in cluster_graph_lines(&view, node, dot) {
                say!("{line}");
            }
            say!("end-cluster-graph");
        }
        Err(e) => say!("error - {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked() {
        let q = table_query(&["5", "250"]).unwrap();
        assert_eq!(
            (q.max_locks_per_node, q.timeout),
            (5, Duration::from_millis(250))
        );
        assert_eq!(table_query(&[]).unwrap(), ClusterQuery::default());
        assert!(table_query(&["x"]).unwrap_err().contains("max_locks"));
        assert!(table_query(&["1", "2", "3"]).is_err());
        assert_eq!(
            graph_query(&["dot", "100"]).unwrap(),
            (
                true,
                ClusterQuery {
                    timeout: Duration::from_millis(100),
                    ..ClusterQuery::default()
                }
            )
        );
        assert!(!graph_query(&[]).unwrap().0);
        assert!(graph_query(&["svg"]).unwrap_err().contains("timeout_ms"));
    }
}
