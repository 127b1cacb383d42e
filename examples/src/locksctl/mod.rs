//! What the `locksctl` binary prints and how it runs its command.
//!
//! `locksctl table` and `locksctl graph` print the lines of the node's own `cluster-table`
//! and `cluster-graph` commands (docs/introspection.md), made from the gRPC API's
//! `TableReply` and `GraphReply`, so that a script reads either the same way. [`job`] holds
//! the supervision of the command that `locksctl lock` and `locksctl campaign` run.

pub mod job;

use locks_core::Key;
use locks_grpc::pb;
use locks_server::introspect::graph::slash_key;
use std::process::ExitCode;

/// Says `locksctl: {e}` on stderr and gives the exit code `code`.
pub fn fail(code: u8, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("locksctl: {e}");
    ExitCode::from(code)
}

/// A lock id of the API as the node writes it: its keys joined by `/`, each escaped as
/// [`slash_key`] does, so a path is always one token of a line.
pub fn path(keys: &[String]) -> String {
    let mut out = String::new();
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            out.push('/');
        }
        slash_key(&Key::from(key.as_str()), &mut out);
    }
    out
}

/// `a,b` (`-` when empty).
fn list(names: &[String]) -> String {
    if names.is_empty() {
        "-".to_owned()
    } else {
        names.join(",")
    }
}

fn entries(entries: &[pb::QueueEntry]) -> String {
    let all: Vec<String> = entries
        .iter()
        .map(|e| format!("{}:{}", e.agent, e.mode))
        .collect();
    all.join(",")
}

/// The lines of `locksctl table`: per node `node <n> locks=<listed> total=<all>` (with
/// ` truncated` when some were left out) and its
/// `<n> lock <a/b> v<version> <group|-> granted=<agent:mode,...> converting=<agent:held>requested,...> waiting=<agent:mode,...>`
/// lines, then `missing <a,b|->`.
pub fn table_lines(reply: &pb::TableReply) -> Vec<String> {
    let mut lines = Vec::new();
    for table in &reply.nodes {
        let listed = table.locks.len() as u64;
        lines.push(format!(
            "node {} locks={listed} total={}{}",
            table.node,
            table.total_locks,
            if listed < table.total_locks {
                " truncated"
            } else {
                ""
            }
        ));
        for l in &table.locks {
            let converting: Vec<String> = l
                .converting
                .iter()
                .map(|c| format!("{}:{}>{}", c.agent, c.held, c.requested))
                .collect();
            lines.push(format!(
                "{} lock {} v{} {} granted={} converting={} waiting={}",
                table.node,
                path(&l.id),
                l.version,
                if l.group.is_empty() { "-" } else { &l.group },
                entries(&l.granted),
                converting.join(","),
                entries(&l.waiting),
            ));
        }
    }
    lines.push(format!("missing {}", list(&reply.missing)));
    lines
}

/// The lines of `locksctl graph`: `edge <waiter> <blocker> <lock>@<node>` (with ` cycle` on a
/// cycle), then `missing <a,b|->` and `truncated <a,b|->`; or, with `dot`, the DOT text's.
pub fn graph_lines(reply: &pb::GraphReply, dot: bool) -> Vec<String> {
    if dot {
        return reply.dot.lines().map(str::to_owned).collect();
    }
    let mut lines: Vec<String> = reply
        .edges
        .iter()
        .map(|e| {
            format!(
                "edge {} {} {}@{}{}",
                e.waiter,
                e.blocker,
                path(&e.id),
                e.node,
                if e.in_cycle { " cycle" } else { "" }
            )
        })
        .collect();
    lines.push(format!("missing {}", list(&reply.missing)));
    lines.push(format!("truncated {}", list(&reply.truncated)));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(path: &[&str]) -> Vec<String> {
        path.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn tables_print_as_the_nodes_cluster_table() {
        let reply = pb::TableReply {
            nodes: vec![pb::NodeTable {
                node: "a".into(),
                total_locks: 2,
                locks: vec![pb::LockQueue {
                    id: keys(&["db", "x y/z"]),
                    version: 7,
                    group: "X".into(),
                    granted: vec![pb::QueueEntry {
                        agent: "a.1".into(),
                        mode: "X".into(),
                    }],
                    converting: vec![],
                    waiting: vec![pb::QueueEntry {
                        agent: "a.2".into(),
                        mode: "S".into(),
                    }],
                }],
            }],
            missing: vec!["b".into()],
        };
        assert_eq!(
            table_lines(&reply),
            [
                "node a locks=1 total=2 truncated",
                "a lock db/x%20y%2Fz v7 X granted=a.1:X converting= waiting=a.2:S",
                "missing b",
            ]
        );
    }

    #[test]
    fn graphs_print_as_the_nodes_cluster_graph() {
        let reply = pb::GraphReply {
            edges: vec![pb::WaitEdge {
                waiter: "a.2".into(),
                blocker: "a.1".into(),
                node: "a".into(),
                id: keys(&["db", "x"]),
                in_cycle: true,
            }],
            missing: vec![],
            truncated: vec![],
            dot: "digraph waits {\n}\n".into(),
        };
        assert_eq!(
            graph_lines(&reply, false),
            ["edge a.2 a.1 db/x@a cycle", "missing -", "truncated -"]
        );
        assert_eq!(graph_lines(&reply, true), ["digraph waits {", "}"]);
    }
}
