//! One `locks` node as a process: a lock server in a cluster, plus a small line protocol on
//! stdin/stdout to take locks from it and look at its lock table and the cluster's.
//!
//! ```sh
//! cargo run -p examples --bin node -- --config node.toml
//! cargo run -p examples --bin node -- --name a --listen 127.0.0.1:7001 --cookie secret \
//!     --peer 127.0.0.1:7002 --peer 127.0.0.1:7003
//! ```
//!
//! Its flags, its commands (one per line on stdin: `lock`, `status`, `end`, `nodes`, `table`,
//! `cluster-table`, `cluster-graph`, `gdict`, `store`, `fetch`, `leader`, `help`, `quit`) and
//! every line it prints on stdout are listed in one place, `docs/node.md`; the text of each line
//! is written by `examples::node_cli`, and `help` prints the commands. Logs go to stderr
//! (`RUST_LOG`, default `info`), without colour codes unless stderr is a terminal.

use clap::Parser;

/// jemalloc: less CPU per operation than glibc's malloc under many sessions; the node's
/// trimmer (`node_cli::trim`) purges its arenas once clients let go.
#[cfg(unix)]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
use examples::gdict::Gdict;
use examples::node_cli::certs::gen_certs;
use examples::node_cli::client::{ClientFlags, client_config};
use examples::node_cli::cluster::{
    graph_query, print_cluster_graph, print_cluster_table, table_query,
};
use examples::node_cli::config::{Overrides, metrics_addr, node_config};
use examples::node_cli::events::print_events;
use examples::node_cli::metrics::{Connected, serve as serve_metrics};
use examples::node_cli::print::{print_table, report_granted, status_word};
use examples::node_cli::stdin::{Line, Lines};
use examples::node_cli::trim::Trimmer;
use examples::node_cli::{HELP, out};
use examples::say;
use locks_agent::{Options, Req, Transaction, begin_transaction};
use locks_core::{Key, LockId, Mode, NodeId};
use locks_leader::GroupOptions;
use locks_server::NodeEvent;
use locks_server::introspect::graph::key_from_slash;
use locks_server::{Node, NodeConfig};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::BufReader;

/// Runs one locks node.
#[derive(Debug, Parser)]
#[command(
    name = "node",
    about = "Runs one node of a locks cluster",
    after_help = "TLS: node --gen-certs DIR --names a,b,c writes a test CA and one certificate \
                  and key per node into DIR; start each node with --tls-cert DIR/a.pem \
                  --tls-key DIR/a.key --tls-ca DIR/ca.pem (docs/tls.md)."
)]
struct Args {
    /// A TOML configuration file (see `NodeConfig::from_toml_file`); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The node's name (required without --config).
    #[arg(long)]
    name: Option<String>,
    /// Accept peers on this address (port 0 picks one; it is printed).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Dial this peer, and again whenever it is lost (repeatable).
    #[arg(long)]
    peer: Vec<SocketAddr>,
    /// The cluster cookie.
    #[arg(long)]
    cookie: Option<String>,
    /// TLS: this node's certificate chain (PEM). With --tls-key and --tls-ca, every link is a
    /// mutually verified TLS session.
    #[arg(long, value_name = "PATH")]
    tls_cert: Option<PathBuf>,
    /// TLS: this node's private key (PEM).
    #[arg(long, value_name = "PATH")]
    tls_key: Option<PathBuf>,
    /// TLS: the CA certificate(s) every peer's certificate must chain to (PEM).
    #[arg(long, value_name = "PATH")]
    tls_ca: Option<PathBuf>,
    /// Write a test CA and one certificate and key per node (--names) into this directory,
    /// then exit.
    #[arg(long, value_name = "DIR")]
    gen_certs: Option<PathBuf>,
    /// The node names of --gen-certs, comma-separated.
    #[arg(long, value_delimiter = ',', requires = "gen_certs")]
    names: Vec<String>,
    /// Heartbeat timeout in milliseconds (the ping interval is a quarter of it).
    #[arg(long)]
    heartbeat_timeout_ms: Option<u64>,
    /// How long a claim on a peer stays valid after the send time of its latest answered ping
    /// (default: three quarters of the heartbeat timeout; see `locks_server::lease`).
    #[arg(long)]
    lease_ms: Option<u64>,
    /// How long the locks of a peer declared down stay held by nobody (default: the heartbeat
    /// timeout; at least the lease plus 1 %).
    #[arg(long)]
    lock_delay_ms: Option<u64>,
    /// How long the node grants nothing after it starts (default: the lock delay).
    #[arg(long)]
    start_delay_ms: Option<u64>,
    /// Print the lock table every this many seconds.
    #[arg(long)]
    print_table_every: Option<u64>,
    /// Stop when stdin ends (for scripts and tests; otherwise the node runs until `quit`,
    /// SIGINT or SIGTERM, each a clean stop).
    #[arg(long)]
    exit_on_eof: bool,
    /// Transactions begun here abort instead of surrendering a lock they were told they hold.
    #[arg(long)]
    abort_on_deadlock: bool,
    /// Transactions begun here wait for lost nodes to return instead of failing.
    #[arg(long)]
    await_nodes: bool,
    /// Prefix every stdout line with the CLOCK_MONOTONIC time in nanoseconds (one clock for
    /// all processes of the machine), so a driver can put several nodes on one time line.
    #[arg(long)]
    mono: bool,
    /// Serve the Prometheus text format of the node's metrics on http://ADDR/metrics
    /// (`ip:port`; port 0 picks one; the line `metrics <addr>` says which). Also the TOML key
    /// `metrics`; the flag overrides it.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Serve the gRPC client API (`locks.v1`, docs/grpc.md) on ADDR (`ip:port`; port 0 picks
    /// one; the line `client-listening <addr>` says which). Also the TOML key `client_listen`.
    #[arg(long, value_name = "ADDR")]
    client_listen: Option<String>,
    /// The bearer token every client call must carry (`authorization: Bearer <token>`). Also
    /// the TOML key `client_token` (which keeps it out of the process list).
    #[arg(long, value_name = "TOKEN")]
    client_token: Option<String>,
    /// A client whose connection is silent this long loses its sessions (default 10000).
    /// Also the TOML key `client_keepalive_ms`.
    #[arg(long, value_name = "MS")]
    client_keepalive_ms: Option<u64>,
    /// TLS for the client API: the server's certificate chain (PEM), with --client-tls-key.
    /// Also the TOML key `client_tls_cert`.
    #[arg(long, value_name = "PATH")]
    client_tls_cert: Option<PathBuf>,
    /// TLS for the client API: the server's private key (PEM). Also `client_tls_key`.
    #[arg(long, value_name = "PATH")]
    client_tls_key: Option<PathBuf>,
    /// TLS for the client API: every client must present a certificate that chains to this CA
    /// (PEM). Also `client_tls_ca`.
    #[arg(long, value_name = "PATH")]
    client_tls_ca: Option<PathBuf>,
    /// Keep the node's data directory here, so that a restart hands out larger fencing versions
    /// and terms whatever the clock says (default: the file's `data_dir`, else
    /// $XDG_STATE_HOME/locks/NAME, else $HOME/.local/state/locks/NAME).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Run without a data directory: a restart with the clock behind then hands out lower
    /// fencing versions and terms.
    #[arg(long, conflicts_with = "data_dir")]
    no_data_dir: bool,
}

fn config(args: &Args) -> Result<NodeConfig, String> {
    let overrides = Overrides {
        name: args.name.clone(),
        listen: args.listen,
        peers: args.peer.clone(),
        cookie: args.cookie.clone(),
        heartbeat_timeout_ms: args.heartbeat_timeout_ms,
        lease_ms: args.lease_ms,
        lock_delay_ms: args.lock_delay_ms,
        start_delay_ms: args.start_delay_ms,
        tls_cert: args.tls_cert.clone(),
        tls_key: args.tls_key.clone(),
        tls_ca: args.tls_ca.clone(),
        data_dir: args.data_dir.clone(),
        no_data_dir: args.no_data_dir,
    };
    node_config(args.config.as_deref(), &overrides)
}

type Txns = Arc<Mutex<HashMap<String, Arc<Transaction>>>>;

/// The gdict replicas this node runs, by dictionary name.
type Dicts = Arc<Mutex<HashMap<String, Gdict<i64>>>>;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    out::set_mono(args.mono);
    if let Some(dir) = &args.gen_certs {
        match gen_certs(dir, &args.names) {
            Ok(files) => {
                for file in files {
                    say!("wrote {}", file.display());
                }
                return;
            }
            Err(e) => {
                eprintln!("node: {e}");
                std::process::exit(2);
            }
        }
    }
    let config = match config(&args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("node: {e}");
            std::process::exit(2);
        }
    };
    // The recorder goes in before the node starts: the node's handles bind to it then. Its
    // link series are shown for the peers connected to the node, once it runs.
    let connected = Connected::default();
    match metrics_addr(args.config.as_deref(), args.metrics.as_deref()) {
        Ok(None) => {}
        Ok(Some(addr)) => match serve_metrics(addr, connected.clone()).await {
            Ok(bound) => say!("metrics {bound}"),
            Err(e) => {
                eprintln!("node: {e}");
                std::process::exit(2);
            }
        },
        Err(e) => {
            eprintln!("node: {e}");
            std::process::exit(2);
        }
    }
    let node = match Node::start(config).await {
        Ok(node) => node,
        Err(e) => {
            eprintln!("node: cannot start: {e}");
            std::process::exit(1);
        }
    };
    connected.watch(&node);
    if let Some(addr) = node.local_addr() {
        say!("listening {addr}");
    }
    // Memory freed when clients' sessions end, or a peer's agents are released, is given back
    // from a thread of its own (see `node_cli::trim`).
    let trimmer = match Trimmer::start() {
        Ok(trimmer) => trimmer,
        Err(e) => {
            eprintln!("node: cannot start the trimming thread: {e}");
            std::process::exit(1);
        }
    };
    // Kept until the process exits: dropping it stops the client API.
    let _client_api = match serve_clients(&args, &node, &trimmer) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("node: {e}");
            std::process::exit(2);
        }
    };
    let mut events = node.subscribe_nodes();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                NodeEvent::Up(n) => say!("up {n}"),
                NodeEvent::Down(n) => {
                    say!("down {n}");
                    trimmer.nudge();
                }
            }
        }
    });
    if let Some(secs) = args.print_table_every {
        let node = node.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(secs.max(1)));
            loop {
                tick.tick().await;
                print_table(&node).await;
            }
        });
    }
    let options = Options {
        abort_on_deadlock: args.abort_on_deadlock,
        await_nodes: args.await_nodes,
    };
    let txns: Txns = Arc::default();
    let dicts: Dicts = Arc::default();
    let mut lines = Lines::new(BufReader::new(tokio::io::stdin()));
    // Made once, before anything waits: from here on SIGTERM is only delivered to it.
    let mut stop = StopSignals::new();
    loop {
        let line = tokio::select! {
            line = lines.next() => line,
            () = stop.recv() => break,
        };
        match line {
            Ok(bad @ (Line::TooLong(_) | Line::NotUtf8)) => {
                say!("{}", bad.error().unwrap_or_default())
            }
            Ok(Line::Text(line)) => {
                if dict_command(&node, &dicts, line.trim()).await {
                    continue;
                }
                if !command(&node, &txns, &options, line.trim()).await {
                    break;
                }
            }
            Ok(Line::End) | Err(_) if args.exit_on_eof => break,
            Ok(Line::End) | Err(_) => {
                // Stdin is closed (run in the background): serve until a signal.
                stop.recv().await;
                break;
            }
        }
    }
    txns.lock().map(|mut t| t.clear()).ok();
    dicts.lock().map(|mut d| d.clear()).ok();
    node.shutdown().await;
    // Exit here: a read of stdin may still be blocked in tokio's blocking pool (the loop was
    // left on a signal while it waited for a line), and the runtime would wait for it on the
    // way out, until the next line or the end of stdin.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::process::exit(0);
}

/// Starts the client API if the flags or the file ask for it.
fn serve_clients(
    args: &Args,
    node: &Node,
    trimmer: &Trimmer,
) -> Result<Option<locks_grpc::GrpcServer>, String> {
    let flags = ClientFlags {
        listen: args.client_listen.clone(),
        token: args.client_token.clone(),
        keepalive_ms: args.client_keepalive_ms,
        tls_cert: args.client_tls_cert.clone(),
        tls_key: args.client_tls_key.clone(),
        tls_ca: args.client_tls_ca.clone(),
    };
    let Some(mut config) = client_config(args.config.as_deref(), &flags)? else {
        return Ok(None);
    };
    let trimmer = trimmer.clone();
    config.on_release = Some(locks_grpc::ReleaseHook::new(move || trimmer.nudge()));
    let server = locks_grpc::serve(node, config).map_err(|e| e.to_string())?;
    say!("client-listening {}", server.local_addr());
    Ok(Some(server))
}

/// The signals that stop the node cleanly (its peers are told to release its agents' locks
/// first): SIGINT (Ctrl-C) and SIGTERM, what `kill`, systemd and container runtimes send.
struct StopSignals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn new() -> StopSignals {
        StopSignals {
            #[cfg(unix)]
            term: match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => Some(term),
                Err(e) => {
                    eprintln!("cannot listen for SIGTERM ({e}); it will stop the node uncleanly");
                    None
                }
            },
        }
    }

    /// Waits for the next stop signal.
    async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some(term) = self.term.as_mut() {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs a gdict command; returns whether `line` was one.
async fn dict_command(node: &Node, dicts: &Dicts, line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    let get = |name: &str| dicts.lock().ok().and_then(|d| d.get(name).cloned());
    match words.as_slice() {
        ["gdict", name, rest @ ..] => match gdict_options(rest) {
            Err(e) => say!("error {name} {e}"),
            Ok(options) => match Gdict::<i64>::with_options(node, name, options).await {
                Ok(d) => {
                    let mut changes = d.member().changes();
                    if let Ok(mut all) = dicts.lock() {
                        all.insert((*name).to_owned(), d);
                    }
                    say!("joined {name}");
                    let name = (*name).to_owned();
                    tokio::spawn(async move {
                        loop {
                            let term = changes.current();
                            say!("{}", leader_line(&name, term));
                            if changes.changed().await.is_err() {
                                break;
                            }
                        }
                    });
                }
                Err(e) => say!("error {name} {e}"),
            },
        },
        ["store", name, key, value] => match (get(name), value.parse::<i64>()) {
            (Some(d), Ok(v)) => {
                let (name, key) = ((*name).to_owned(), (*key).to_owned());
                tokio::spawn(async move {
                    match d.store(key.clone(), v).await {
                        Ok(()) => say!("stored {name} {key}"),
                        Err(e) => say!("error {name} {e}"),
                    }
                });
            }
            _ => say!("error {name} no such dictionary or bad value"),
        },
        ["leader", name] => match get(name) {
            Some(d) => {
                // Whether it may act as leader at this instant (majority mode checks the
                // leases at the call), not only the term it last accepted.
                let me = if d.member().is_leader() {
                    "leading"
                } else {
                    "following"
                };
                match d.member().leader() {
                    Some(t) => say!("leader {name} {} {} {me}", t.leader.node(), t.epoch),
                    None => say!("leader {name} none"),
                }
            }
            None => say!("error {name} no such dictionary"),
        },
        ["fetch", name, key] => match get(name) {
            Some(d) => match d.fetch(*key).await {
                Ok(Some(v)) => say!("value {name} {key} {v}"),
                Ok(None) => say!("value {name} {key} none"),
                Err(e) => say!("error {name} {e}"),
            },
            None => say!("error {name} no such dictionary"),
        },
        _ => return false,
    }
    true
}

/// The options of `gdict <d> [node,node,...]`: majority mode, over the nodes if given.
fn gdict_options(rest: &[&str]) -> Result<GroupOptions, String> {
    match rest {
        [] => Ok(GroupOptions::majority()),
        [list] => {
            let nodes = list
                .split(',')
                .map(NodeId::new)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            Ok(GroupOptions::majority().nodes(nodes))
        }
        _ => Err("too many arguments".to_owned()),
    }
}

/// `leader <d> <node> <epoch>` (or `leader <d> none`): whom the replica of `d` follows.
fn leader_line(name: &str, term: Option<locks_leader::Term>) -> String {
    match term {
        Some(t) => format!("leader {name} {} {}", t.leader.node(), t.epoch),
        None => format!("leader {name} none"),
    }
}

/// Runs one command; returns `false` on `quit`.
async fn command(node: &Node, txns: &Txns, options: &Options, line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [] => {}
        ["quit"] => return false,
        ["help"] => {
            for usage in HELP {
                say!("help {usage}");
            }
            say!("end-help");
        }
        ["nodes"] => {
            let names: Vec<String> = node.nodes().iter().map(|n| n.to_string()).collect();
            say!("nodes {}", names.join(" "));
        }
        ["table"] => print_table(node).await,
        ["cluster-table", args @ ..] => match table_query(args) {
            Ok(query) => print_cluster_table(node, query).await,
            Err(e) => say!("error - cluster-table: {e}"),
        },
        ["cluster-graph", args @ ..] => match graph_query(args) {
            Ok((dot, query)) => print_cluster_graph(node, dot, query).await,
            Err(e) => say!("error - cluster-graph: {e}"),
        },
        ["status", txn] => match get(txns, txn) {
            Some(t) => match t.status().await {
                Ok(status) => say!("status {txn} {}", status_word(&status)),
                Err(e) => say!("error {txn} {e}"),
            },
            None => say!("error {txn} no such transaction"),
        },
        ["end", txn] => {
            let t = txns.lock().ok().and_then(|mut t| t.remove(*txn));
            match t {
                // Pending `lock` calls hold clones of the handle: ending it stops the agent
                // either way, so they fail instead of waiting.
                Some(t) => match Arc::try_unwrap(t) {
                    Ok(t) => match t.end().await {
                        Ok(()) => say!("ended {txn}"),
                        Err(e) => say!("error {txn} {e}"),
                    },
                    Err(shared) => {
                        drop(shared);
                        say!("ended {txn}");
                    }
                },
                None => say!("error {txn} no such transaction"),
            }
        }
        ["lock", txn, path, rest @ ..] => {
            let request = match parse_lock(node, path, rest) {
                Ok(r) => r,
                Err(e) => {
                    say!("error {txn} {e}");
                    return true;
                }
            };
            let t = match get(txns, txn) {
                Some(t) => t,
                None => match begin_transaction(node, options.clone()).await {
                    Ok(t) => {
                        tokio::spawn(print_events((*txn).to_owned(), t.events()));
                        let t = Arc::new(t);
                        if let Ok(mut all) = txns.lock() {
                            all.insert((*txn).to_owned(), t.clone());
                        }
                        t
                    }
                    Err(e) => {
                        say!("error {txn} {e}");
                        return true;
                    }
                },
            };
            let (txn, path) = ((*txn).to_owned(), (*path).to_owned());
            tokio::spawn(async move {
                let (lock, mode, nodes, req, wait) = request;
                let locked = match wait {
                    Some(wait) => t.lock_on_timeout(lock, mode, &nodes, req, wait).await,
                    None => t.lock_on(lock, mode, &nodes, req).await,
                };
                match locked {
                    Ok(_) => report_granted(&t, &txn, &path).await,
                    Err(e) => say!("error {txn} {e}"),
                }
            });
        }
        _ => say!("error - unknown command: {line}"),
    }
    true
}

fn get(txns: &Txns, name: &str) -> Option<Arc<Transaction>> {
    txns.lock().ok().and_then(|t| t.get(name).cloned())
}

/// A `lock` command: the lock, mode, nodes, requirement and bounded wait (`wait=MS`).
type LockRequest = (LockId, Mode, Vec<NodeId>, Req, Option<Duration>);

fn parse_lock(node: &Node, path: &str, rest: &[&str]) -> Result<LockRequest, String> {
    // `wait=MS`, last: give up after that many milliseconds (the request is withdrawn).
    let (rest, wait) = match rest.split_last() {
        Some((last, before)) if last.starts_with("wait=") => {
            let ms = last["wait=".len()..]
                .parse::<u64>()
                .map_err(|e| format!("wait=MS: {e}"))?;
            (before, Some(Duration::from_millis(ms)))
        }
        _ => (rest, None),
    };
    let keys = path.split('/').map(key_from_slash);
    let lock = LockId::new(keys.collect::<Result<Vec<Key>, _>>()?).map_err(|e| e.to_string())?;
    let mode = match rest.first() {
        Some(m) => m.parse::<Mode>().map_err(|e| e.to_string())?,
        None => Mode::X,
    };
    let nodes = match rest.get(1) {
        Some(list) => list
            .split(',')
            .map(NodeId::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?,
        None => vec![node.id().clone()],
    };
    // Every name `Req` displays (all, any, majority, all_alive, majority_alive).
    let req = match rest.get(2) {
        None => Req::All,
        Some(name) => name.parse::<Req>().map_err(|e| e.to_string())?,
    };
    if rest.len() > 3 {
        return Err("too many arguments".to_owned());
    }
    Ok((lock, mode, nodes, req, wait))
}
