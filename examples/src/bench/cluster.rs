//! W6: a cluster of three nodes on 127.0.0.1.
//!
//! Three nodes (`w6a`, `w6b`, `w6c`), each with its own thread, listening on ephemeral
//! loopback ports and connected pairwise. One client, a task on `w6a`'s thread, runs 5,000
//! transactions of `begin`, `lock_on([w6, i], write, [w6a, w6b, w6c], All)`, `end`; then
//! 5,000 more with `Majority`. Transactions/s and the p50/p99 of one transaction; the ratio is
//! that p50 over the p50 of the TCP loopback floor.
//!
//! `W6-tls`: the same three nodes in this process, measured in the same run right after, with
//! every link a mutually verified TLS session (rustls on ring; certificates made for the run).
//!
//! With `--processes`, the same again with `w6b` and `w6c` in two processes of their own: the
//! workspace's `node` program (`examples/src/bin/node.rs`, which must sit beside this program:
//! `cargo build --release -p examples --bin node`), started with `--listen 127.0.0.1:0`,
//! stopped by closing its stdin (and killed, by its handle, if it does not stop in 5 s).

use super::floors::Floor;
use super::rig::{ClientResult, Rig, err};
use super::stats::Sample;
use super::uncontended::{fail, id};
use super::{Check, Ctx, Row, Spec};
use locks_agent::{Options, Req, begin_transaction};
use locks_core::{Key, Mode, NodeId};
use locks_server::Node;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

async fn w6_client(node: Node, nodes: Vec<NodeId>, req: Req, n: u64) -> ClientResult<Sample> {
    let prefix = Key::from("w6");
    let mut lat = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        let txn = begin_transaction(&node, Options::default())
            .await
            .map_err(err)?;
        txn.lock_on(id(&prefix, i), Mode::WRITE, &nodes, req)
            .await
            .map_err(err)?;
        txn.end().await.map_err(err)?;
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Ok(Sample::new(n, start.elapsed(), lat))
}

fn w6_specs(variant: &str) -> Vec<Spec> {
    vec![
        // The original did about 3,500/s with a p50 of 284 µs; the issue sets no goal for it.
        Spec::rate(format!("W6 {variant} All"), "txn/s", Floor::Tcp),
        Spec::rate(format!("W6 {variant} Majority"), "txn/s", Floor::Tcp).goal(
            "orig 4.3k/s, p50 215us; goal p50 <= 2 TCP round trips",
            Check::FloorRatioAtMost(2.0),
        ),
    ]
}

fn measure(ctx: &mut Ctx, specs: &[Spec], rig: Result<Rig, String>) -> Vec<Row> {
    let rig = match rig {
        Ok(rig) => rig,
        Err(e) => return fail(specs, &e),
    };
    let nodes = rig.node_ids();
    let n = ctx.cfg.size(5_000, 500);
    let rows = ctx.run_rounds(specs, |_| {
        let mut samples = Vec::new();
        for req in [Req::All, Req::Majority] {
            let client = w6_client(rig.node().clone(), nodes.clone(), req, n);
            samples.push(rig.on_node(ctx, client)?);
        }
        Ok(samples)
    });
    rig.stop(ctx);
    rows
}

/// W6 in this process, and with `--processes` in three.
pub fn w6(ctx: &mut Ctx) -> Vec<Row> {
    let specs = w6_specs("3 nodes");
    let rig = Rig::start_cluster(ctx, &["w6a", "w6b", "w6c"], &[]);
    let mut rows = measure(ctx, &specs, rig);
    // The same rows over TLS (no goal of their own: they are read beside the rows above).
    let specs = vec![
        Spec::rate("W6-tls 3 nodes All", "txn/s", Floor::Tcp),
        Spec::rate("W6-tls 3 nodes Majority", "txn/s", Floor::Tcp),
    ];
    let rig = Rig::start_cluster_tls(ctx, &["w6a", "w6b", "w6c"], &[], true);
    rows.extend(measure(ctx, &specs, rig));
    if ctx.cfg.processes {
        let specs = w6_specs("3 procs");
        let started = ["w6b", "w6c"]
            .iter()
            .map(|name| NodeProcess::start(name))
            .collect::<Result<Vec<_>, String>>();
        rows.extend(match started {
            Err(e) => fail(&specs, &e),
            Ok(procs) => {
                let peers: Vec<SocketAddr> = procs.iter().map(|p| p.addr).collect();
                let rig = Rig::start_cluster(ctx, &["w6a"], &peers);
                let rows = measure(ctx, &specs, rig);
                drop(procs);
                rows
            }
        });
    }
    rows
}

/// A node in a process of its own, stopped when dropped.
pub(super) struct NodeProcess {
    child: Child,
    /// Where it listens for peers.
    pub(super) addr: SocketAddr,
    /// Where it serves clients, when started with `--client-listen`.
    pub(super) client_addr: Option<String>,
}

impl NodeProcess {
    /// The process's id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    fn start(name: &str) -> Result<NodeProcess, String> {
        NodeProcess::start_with(name, &[])
    }

    /// A node process with `args` added to its flags (its client address, when they ask for
    /// one, is read from its `client-listening` line before this returns).
    pub(super) fn start_with(name: &str, args: &[String]) -> Result<NodeProcess, String> {
        let exe = std::env::current_exe().map_err(err)?.with_file_name("node");
        if !exe.exists() {
            return Err(format!(
                "{} not found: cargo build --release -p examples --bin node",
                exe.display()
            ));
        }
        let mut child = Command::new(&exe)
            .args(["--name", name, "--listen", "127.0.0.1:0", "--exit-on-eof"])
            .arg("--no-data-dir")
            .args(["--cookie", super::rig::COOKIE])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        let (client_tx, client_rx) = std::sync::mpsc::channel();
        // Reads the addresses, then drains the node's event lines so it never blocks on them.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("listening ") {
                    let _ = tx.send(addr.trim().parse::<SocketAddr>());
                } else if let Some(addr) = line.strip_prefix("client-listening ") {
                    let _ = client_tx.send(addr.trim().to_owned());
                }
            }
        });
        let mut process = NodeProcess {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            client_addr: None,
        };
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(addr)) => process.addr = addr,
            Ok(Err(e)) => return Err(format!("node {name} printed a bad address: {e}")),
            Err(_) => return Err(format!("node {name} did not say where it listens")),
        }
        if args.iter().any(|a| a == "--client-listen") {
            match client_rx.recv_timeout(Duration::from_secs(10)) {
                Ok(addr) => process.client_addr = Some(addr),
                Err(_) => return Err(format!("node {name} did not say where it serves clients")),
            }
        }
        Ok(process)
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        // Closing stdin stops a node started with --exit-on-eof.
        drop(self.child.stdin.take());
        stop_child(&mut self.child, Instant::now() + Duration::from_secs(5));
    }
}

/// Waits until `child` (whose stdin is closed) exits, or kills it (our own child, by its
/// handle) at `deadline`.
pub(super) fn stop_child(child: &mut Child, deadline: Instant) {
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}
