//! The cluster's tables and wait-for graph seen from a third node: real transactions on
//! in-process nodes (t1 of n1 holds x on n1, t2 of n2 waits for it), and the `node` binary's
//! `cluster-table` and `cluster-graph` commands on node processes, one of them paused with
//! SIGSTOP to be listed missing. Loopback only, ephemeral ports, every wait bounded.

mod common;

use common::Proc;
use examples::node_cli::cluster::{cluster_graph_lines, cluster_table_lines};
use locks_agent::{Options, Req, begin_transaction};
use locks_core::proto::EntryState;
use locks_core::{Mode, NodeId, lock_id};
use locks_server::{ClusterQuery, Node, NodeConfig};
use locks_testing::cluster::connected;
use locks_testing::wait::{Deadline, eventually, poll, within};
use std::net::SocketAddr;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(20);

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn config(name: &str) -> NodeConfig {
    NodeConfig::new(name)
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie("introspect-examples")
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .start_delay(Duration::ZERO)
}

async fn three() -> Vec<Node> {
    connected(["n1", "n2", "n3"].map(config), BOUND).await
}

/// The structure of a DOT text: balanced braces outside quotes, one edge line per edge.
fn check_dot(lines: &[String], edges: usize) {
    assert_eq!(lines.first().map(String::as_str), Some("digraph waits {"));
    assert_eq!(lines.last().map(String::as_str), Some("}"));
    let text = lines.join("\n");
    let (mut depth, mut quoted, mut escaped) = (0i32, false, false);
    for c in text.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '{' if !quoted => depth += 1,
            '}' if !quoted => depth -= 1,
            _ => {}
        }
        assert!(depth >= 0, "{text}");
    }
    assert_eq!((depth, quoted), (0, false), "{text}");
    assert_eq!(lines.iter().filter(|l| l.contains(" -> ")).count(), edges);
}

#[tokio::test]
async fn a_cross_node_wait_is_seen_from_a_third_node() {
    let nodes = three().await;
    let (n1, n2, n3) = (&nodes[0], &nodes[1], &nodes[2]);
    let t1 = begin_transaction(n1, Options::default()).await.unwrap();
    within(BOUND, "t1 locks x", t1.lock(lock_id!["x"], Mode::X))
        .await
        .unwrap();
    let t2 = begin_transaction(n2, Options::default()).await.unwrap();
    let (id1, id2) = (t1.id().clone(), t2.id().clone());
    let waiting = tokio::spawn(async move {
        let result = t2
            .lock_on(lock_id!["x"], Mode::X, &[n("n1")], Req::All)
            .await;
        (t2, result)
    });
    let (probe, waiter) = (n1.clone(), id2.clone());
    poll(
        BOUND,
        "t2 waits on n1",
        Duration::from_millis(5),
        move || {
            let (node, waiter) = (probe.clone(), waiter.clone());
            async move {
                let snap = node.snapshot().await.unwrap();
                match snap.state(&waiter, &lock_id!["x"]) {
                    EntryState::Waiting(_) => Ok(()),
                    other => Err(other),
                }
            }
        },
    )
    .await;

    let view = within(BOUND, "view", n3.cluster_view(ClusterQuery::default()))
        .await
        .unwrap();
    assert!(view.missing.is_empty());
    assert_eq!(view.nodes.len(), 3);
    let x = &view.nodes[&n("n1")].locks[0];
    assert_eq!(x.lock, lock_id!["x"]);
    assert!(x.view.holds(&id1));
    assert_eq!(x.view.waiting[0].agent, id2);

    let graph = view.wait_for_graph(n3.modes());
    let edge = format!("edge {id2} {id1} x@n1");
    assert_eq!(graph.text_lines(), std::slice::from_ref(&edge));
    let lines = cluster_graph_lines(&view, n3, false);
    assert_eq!(
        lines,
        [edge, "missing -".to_owned(), "truncated -".to_owned()]
    );
    let dot = cluster_graph_lines(&view, n3, true);
    check_dot(&dot, 1);
    assert!(
        dot.contains(&format!("  \"{id2}\" -> \"{id1}\" [label=\"x@n1\"];")),
        "{dot:#?}"
    );
    let table = cluster_table_lines(&view);
    assert!(
        table.contains(&"node n1 locks=1 total=1".to_owned()),
        "{table:#?}"
    );
    assert!(
        table.contains(&format!(
            "n1 lock x v{} X granted={id1}:X converting= waiting={id2}:X",
            x.view.version
        )),
        "{table:#?}"
    );

    // Once t1 ends, t2 gets x and the graph is empty.
    within(BOUND, "t1 ends", t1.end()).await.unwrap();
    let (t2, result) = within(BOUND, "t2 granted", waiting).await.unwrap();
    result.unwrap();
    let view = within(BOUND, "view", n3.cluster_view(ClusterQuery::default()))
        .await
        .unwrap();
    assert!(view.wait_for_graph(n3.modes()).edges.is_empty());
    drop(t2);
}

/// Lines from `cmd`'s answer on `node` up to `end` (excluded).
fn answer(node: &mut Proc, cmd: &str, end: &str) -> Vec<String> {
    node.send(cmd);
    let mut lines = Vec::new();
    loop {
        let line = node.expect(end, |_| true);
        if line == end {
            return lines;
        }
        if line.starts_with("up ") || line.starts_with("granted ") {
            // Unasked lines that may come in between.
            continue;
        }
        lines.push(line);
    }
}

/// Whether every thread of process `pid` is stopped (state `T` in `/proc/<pid>/task/*/stat`).
fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command name, which is in parentheses.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    })
}

/// Resumes a process paused with SIGSTOP, also when the test fails.
struct Paused(i32);

impl Drop for Paused {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a pid of a child this test started and still owns.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

#[test]
fn the_node_binary_prints_the_cluster_table_and_graph() {
    let deadline = Deadline::after(Duration::from_secs(60));
    // A heartbeat timeout longer than the test: the paused node stays connected, so it is
    // asked, and missing, rather than down.
    let timing = ["--heartbeat-timeout-ms", "60000", "--start-delay-ms", "0"];
    let cookie = "introspect-cli";
    let mut n1 = Proc::start_with("n1", &[], cookie, "warn", deadline, &timing);
    let a1 = n1.listen_addr();
    let mut n2 = Proc::start_with(
        "n2",
        std::slice::from_ref(&a1),
        cookie,
        "warn",
        deadline,
        &timing,
    );
    let a2 = n2.listen_addr();
    let mut n3 = Proc::start_with("n3", &[a1, a2], cookie, "warn", deadline, &timing);
    n3.expect_line("up n1");
    n3.expect_line("up n2");
    n2.expect_line("up n1");

    n1.send("lock t1 r/x X n1");
    n1.expect("t1 granted", |l| l.starts_with("granted t1 r/x "));
    n2.send("lock t2 r/x X n1");
    n1.wait_table("t2 waits", |t| {
        t.iter()
            .any(|l| l.starts_with("lock r/x ") && !l.ends_with("waiting="))
    });

    let table = answer(&mut n3, "cluster-table", "end-cluster-table");
    assert!(
        table.contains(&"node n1 locks=2 total=2".to_owned()),
        "{table:#?}"
    );
    assert!(
        table.contains(&"node n2 locks=0 total=0".to_owned()),
        "{table:#?}"
    );
    assert!(
        table.contains(&"node n3 locks=0 total=0".to_owned()),
        "{table:#?}"
    );
    let x = table
        .iter()
        .find(|l| l.starts_with("n1 lock r/x "))
        .expect("r/x of n1");
    assert!(
        x.contains(" granted=<n1.") && x.contains(" waiting=<n2."),
        "{x}"
    );
    assert_eq!(table.last().map(String::as_str), Some("missing -"));

    let truncated = answer(&mut n3, "cluster-table 1", "end-cluster-table");
    assert!(
        truncated.contains(&"node n1 locks=1 total=2 truncated".to_owned()),
        "{truncated:#?}"
    );

    let graph = answer(&mut n3, "cluster-graph", "end-cluster-graph");
    assert_eq!(graph.len(), 3, "{graph:#?}");
    assert!(
        graph[0].starts_with("edge <n2.")
            && graph[0].contains(" <n1.")
            && graph[0].ends_with(" r/x@n1"),
        "{graph:#?}"
    );
    assert_eq!(graph[1..], ["missing -", "truncated -"]);
    let dot = answer(&mut n3, "cluster-graph dot", "end-cluster-graph");
    check_dot(&dot, 1);

    let bad = answer(&mut n3, "cluster-table many\nnodes", "nodes n1 n2 n3");
    assert_eq!(
        bad,
        ["error - cluster-table: max_locks must be a number, not \"many\""]
    );

    // n1 paused: asked, and not answering within the query's timeout.
    let pid = i32::try_from(n1.child.id()).expect("a pid");
    // SAFETY: kill(2) with the pid of a child this test started and still owns.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let paused = Paused(pid);
    // The signal is delivered asynchronously: wait until every thread of n1 has stopped.
    eventually(BOUND, "n1 stopped", || all_threads_stopped(pid));
    let table = answer(&mut n3, "cluster-table 10 300", "end-cluster-table");
    assert_eq!(
        table.last().map(String::as_str),
        Some("missing n1"),
        "{table:#?}"
    );
    assert!(
        !table.iter().any(|l| l.starts_with("node n1 ")),
        "{table:#?}"
    );
    let graph = answer(&mut n3, "cluster-graph 300", "end-cluster-graph");
    assert_eq!(graph, ["missing n1", "truncated -"]);
    drop(paused);
    let table = answer(&mut n3, "cluster-table", "end-cluster-table");
    assert_eq!(
        table.last().map(String::as_str),
        Some("missing -"),
        "{table:#?}"
    );
}
