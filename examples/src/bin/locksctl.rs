//! `locksctl`: a command-line client of a node's gRPC API (`locks.v1`, docs/grpc.md).
//!
//! ```sh
//! locksctl --node 127.0.0.1:7100 lock db/x --mode X --wait 5s -- ./migrate.sh
//! LOCKS_NODES=10.0.0.1:7100,10.0.0.2:7100 locksctl lock db/x --nodes a,b,c --majority -- ./job
//! locksctl --node 127.0.0.1:7100 status
//! locksctl --node 127.0.0.1:7100 campaign jobs -- ./scheduler
//! locksctl --node 127.0.0.1:7100 leader jobs
//! locksctl --node 127.0.0.1:7100 table
//! locksctl --node 127.0.0.1:7100 graph --dot | dot -Tsvg > waits.svg
//! ```
//!
//! `--node` (anywhere on the line; without it, the environment variable `LOCKS_NODES`) is a
//! comma list of client addresses, tried in turn until one connects: a node that refuses the
//! connection or does not answer within 5 s is skipped with a note on stderr, and exit 2 if none
//! connects. A lock taken without `--nodes` is a lock on the node that answered, so with several
//! addresses give the lock's `--nodes` too, or two clients may hold "the same" lock on two nodes.
//!
//! `lock` takes the lock, runs the command while it is held with the fencing versions in
//! `LOCKS_TOKENS` (`a@123,b@456`: node and version per granting node) and the lock in
//! `LOCKS_LOCK`, and ends the session when the command exits, with the command's exit code. If
//! the lock is lost (a node it depends on down or unreachable, the connection to the node gone),
//! it stops the command with SIGTERM, then SIGKILL after `--grace`, and exits 1.
//!
//! `campaign` runs the command while this client leads the group, with the term (a fencing
//! token) in `LOCKS_TERM`, and stops it the same way (exit 1) when the leadership is lost;
//! `leader` prints `leader <member> <node> <term>`.
//!
//! Signals (`SIGNALS_HELP`, in `locksctl lock --help`; the supervision is
//! `examples::locksctl::job`): `lock` and `campaign` catch SIGTERM, SIGINT, SIGHUP, SIGQUIT,
//! SIGUSR1 and SIGUSR2 from the start (`Signals`; one they were started with ignored stays
//! ignored, for the command too). One that comes before the command runs withdraws the
//! request or the campaign and exits 128+N. One that comes while it runs is passed on to the
//! command (`Job`), which runs in a process group of its own so that a shell's children get
//! it too, and the lock stays held until the command has exited: SIGKILL to the group if it
//! has not `--grace` after the first signal passed on, and the session ends
//! only once the command is reaped, so that a second `locksctl lock` of the lock cannot start
//! its command while this one's still runs. `locksctl` then exits with the command's status. The
//! command stays in `locksctl`'s group only when `locksctl` is its terminal's foreground job
//! (so that the command can read the terminal): the terminal's keys signal both, and SIGINT and
//! SIGQUIT are not passed on again.
//!
//! Exit codes: the command's own (128+N when signal N ended it), also when `locksctl` was
//! signalled; 1 lock or leadership lost; 2 bad usage, no node reached or request refused; 3 not
//! granted within `--wait`; 128+N signal N before the command started.
//!
//! `table` prints the lock tables of the node and of the nodes it reaches, `graph` the
//! cluster's wait-for graph (or its DOT with `--dot`), in the lines of the node's own
//! `cluster-table` and `cluster-graph` commands (`examples::locksctl`).
//!
//! The token comes from `--token` or the environment variable `LOCKS_TOKEN`. For a node that
//! serves the API over TLS: `--ca` (and `--server-name`, default `locks`), and `--cert` /
//! `--key` when it asks for client certificates.

use clap::{Parser, Subcommand};
use examples::locksctl::job::{Job, Signals, signalled_before};
use examples::locksctl::{fail, graph_lines, table_lines};
use locks_grpc::client::{
    Client, ClientError, ClientOptions, ClientTls, LockSpec, Session, tokens_text,
};
use locks_grpc::pb::{self, session_event::Kind};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// What `lock` and `campaign` do with signals, and the exit codes: the end of their help.
const SIGNALS_HELP: &str = "\
Signals: SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to locksctl
while the command runs are forwarded to the command's process group (the command
runs in a group of its own, so a shell's children get them too). The lock (or
the leadership) is held until the command has exited: if it has not exited
--grace after the first signal forwarded, locksctl sends SIGKILL to the group,
waits for the command, and only then releases the lock. A signal that comes
before the lock is granted (or the leadership won) withdraws the request, runs
nothing and exits 128+N. Started as its terminal's foreground job, the command
stays in locksctl's group so that it can read the terminal: Ctrl-C and Ctrl-\\
reach it directly (SIGINT and SIGQUIT are not forwarded again), and signals go
to the command alone.

Exit codes: the command's own, also when locksctl was signalled (128+N when
signal N ended the command: 143 for SIGTERM, 137 for SIGKILL); 1 the lock or
the leadership was lost (the command is stopped with SIGTERM, SIGKILL after
--grace); 2 bad usage, no node reached or the request refused; 3 not granted
within --wait; 128+N signal N came before the command started.";

/// A command-line client of a locks node.
#[derive(Debug, Parser)]
#[command(
    name = "locksctl",
    about = "Takes locks from a locks node (its gRPC client API)",
    after_help = SIGNALS_HELP
)]
struct Args {
    /// The nodes' client addresses (their --client-listen), `host:port`, comma-separated: tried
    /// in turn until one answers (default: the LOCKS_NODES environment variable). A lock
    /// without --nodes is one on the node that answers.
    #[arg(long, value_name = "ADDR,...", value_delimiter = ',', global = true)]
    node: Vec<String>,
    /// The node's client token (default: the LOCKS_TOKEN environment variable).
    #[arg(long)]
    token: Option<String>,
    /// Give the connection up as lost after this long without an answer from the node.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = duration)]
    keepalive: Duration,
    /// TLS: the CA the node's certificate must chain to (PEM); without it, plain HTTP/2.
    #[arg(long, value_name = "PATH")]
    ca: Option<PathBuf>,
    /// TLS: the name the node's certificate must carry.
    #[arg(long, default_value = "locks", requires = "ca")]
    server_name: String,
    /// TLS: this client's certificate chain (PEM), for a node that asks for one.
    #[arg(long, value_name = "PATH", requires_all = ["ca", "key"])]
    cert: Option<PathBuf>,
    /// TLS: this client's private key (PEM).
    #[arg(long, value_name = "PATH", requires = "cert")]
    key: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command while holding a lock.
    #[command(after_help = SIGNALS_HELP)]
    Lock {
        /// The lock, as a path: `db/x`.
        path: String,
        /// The mode: IS, IX, S, SIX, U or X (or read, write).
        #[arg(long, default_value = "X")]
        mode: String,
        /// The nodes that must grant it (default: the node talked to).
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        /// Held once a majority of the nodes grant it (default: all of them).
        #[arg(long, conflicts_with = "any")]
        majority: bool,
        /// Held once any of the nodes grants it.
        #[arg(long)]
        any: bool,
        /// Give up (exit 3) if not granted within this long (`500ms`, `5s`, `2m`).
        #[arg(long, value_parser = duration)]
        wait: Option<Duration>,
        /// How long the command has to exit after the first signal forwarded to it (or the
        /// SIGTERM of a loss) before SIGKILL.
        #[arg(long, default_value = "5s", value_parser = duration)]
        grace: Duration,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// The node's name and the nodes it reaches.
    Status,
    /// Who leads GROUP now (waits up to --wait for an election to end).
    Leader {
        /// The group.
        group: String,
        /// How long to wait for a leader.
        #[arg(long, default_value = "5s", value_parser = duration)]
        wait: Duration,
    },
    /// The lock tables of the node and of the nodes it reaches.
    Table {
        /// The most locks listed per node.
        #[arg(long, default_value_t = 1000)]
        max_locks: u32,
        /// How long to wait for the other nodes' tables.
        #[arg(long, default_value = "2s", value_parser = duration)]
        wait: Duration,
    },
    /// The cluster's wait-for graph: who waits for whom, on which lock and node.
    Graph {
        /// Print Graphviz DOT instead of one line per edge.
        #[arg(long)]
        dot: bool,
        /// How long to wait for the other nodes' tables.
        #[arg(long, default_value = "2s", value_parser = duration)]
        wait: Duration,
    },
    /// Campaign for the leadership of GROUP and run a command while leading.
    #[command(after_help = SIGNALS_HELP)]
    Campaign {
        /// The group.
        group: String,
        /// The group's nodes (default: those its members learn of).
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        /// How long the command has to exit after the first signal forwarded to it (or the
        /// SIGTERM of a loss) before SIGKILL.
        #[arg(long, default_value = "5s", value_parser = duration)]
        grace: Duration,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

/// `500ms`, `5s`, `2m`, or a number of seconds.
fn duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("bad duration {text:?}: give 500ms, 5s or 2m"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("bad duration {text:?}: give 500ms, 5s or 2m")),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    // The commands that run a command catch the signals from the start: one that comes before
    // the command runs gives up (128 + N), one that comes after is passed on to it.
    let runs_a_command = matches!(
        args.command,
        Command::Lock { .. } | Command::Campaign { .. }
    );
    let mut signals = if runs_a_command {
        match Signals::catch() {
            Ok(signals) => signals,
            Err(e) => return fail(2, e),
        }
    } else {
        Signals::none()
    };
    let tls = match client_tls(&args) {
        Ok(tls) => tls,
        Err(e) => return fail(2, e),
    };
    let options = ClientOptions {
        token: args
            .token
            .clone()
            .or_else(|| std::env::var("LOCKS_TOKEN").ok()),
        keepalive: args.keepalive,
        tls,
        ..ClientOptions::default()
    };
    let nodes = node_list(&args.node, std::env::var("LOCKS_NODES").ok().as_deref());
    if nodes.is_empty() {
        return fail(2, "no node given: --node ADDR[,ADDR...] or LOCKS_NODES");
    }
    let connected = tokio::select! {
        connected = connect(&nodes, &options) => connected,
        signal = signals.next() => return signalled_before(signal),
    };
    let mut client = match connected {
        Ok(client) => client,
        Err(code) => return code,
    };
    match args.command {
        Command::Status => match client.info().await {
            Ok(info) => {
                println!("node {}", info.node);
                println!("nodes {}", info.nodes.join(" "));
                ExitCode::SUCCESS
            }
            Err(e) => fail(2, e),
        },
        Command::Leader { group, wait } => leader(&mut client, &group, wait).await,
        Command::Table { max_locks, wait } => {
            let request = pb::TableRequest {
                max_locks_per_node: max_locks,
                timeout_ms: millis(wait),
            };
            print_lines(client.table(request).await.map(|r| table_lines(&r)))
        }
        Command::Graph { dot, wait } => {
            let request = pb::GraphRequest {
                timeout_ms: millis(wait),
            };
            print_lines(client.graph(request).await.map(|r| graph_lines(&r, dot)))
        }
        Command::Campaign {
            group,
            nodes,
            grace,
            command,
        } => campaign(&mut client, &group, &nodes, grace, &command, &mut signals).await,
        Command::Lock {
            path,
            mode,
            nodes,
            majority,
            any,
            wait,
            grace,
            command,
        } => {
            let mut spec = LockSpec::new(&path, &mode).nodes(nodes);
            if majority {
                spec = spec.requirement(pb::Requirement::Majority);
            } else if any {
                spec = spec.requirement(pb::Requirement::Any);
            }
            if let Some(wait) = wait {
                spec = spec.wait(wait);
            }
            let keepalive = args.keepalive;
            run_locked(
                &mut client,
                &path,
                spec,
                grace,
                keepalive,
                &command,
                &mut signals,
            )
            .await
        }
    }
}

/// The nodes to try: those of `--node`, or else those of `LOCKS_NODES` (both comma lists).
fn node_list(flag: &[String], env: Option<&str>) -> Vec<String> {
    fn listed<'a>(nodes: impl Iterator<Item = &'a str>) -> Vec<String> {
        nodes
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect()
    }
    let given = listed(flag.iter().map(String::as_str));
    if given.is_empty() {
        listed(env.unwrap_or_default().split(','))
    } else {
        given
    }
}

/// Connects to the first of `nodes` that answers, saying on stderr which could not be reached;
/// exit 2 if none.
async fn connect(nodes: &[String], options: &ClientOptions) -> Result<Client, ExitCode> {
    for (i, node) in nodes.iter().enumerate() {
        match Client::connect(node, options.clone()).await {
            Ok(client) => return Ok(client),
            // Not the node's fault: the next would refuse it the same way.
            Err(e @ ClientError::BadToken) => return Err(fail(2, e)),
            Err(e) if i + 1 < nodes.len() => {
                eprintln!(
                    "locksctl: cannot reach {node}: {e}; trying {}",
                    nodes[i + 1]
                );
            }
            Err(e) => {
                let tried = if nodes.len() > 1 {
                    format!(" (nor {})", nodes[..i].join(", "))
                } else {
                    String::new()
                };
                return Err(fail(2, format_args!("cannot reach {node}{tried}: {e}")));
            }
        }
    }
    Err(fail(2, "no node given"))
}

/// The TLS settings of the flags, with their files read.
fn client_tls(args: &Args) -> Result<Option<ClientTls>, String> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let Some(ca) = &args.ca else {
        return Ok(None);
    };
    let identity = match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
        _ => None,
    };
    Ok(Some(ClientTls {
        ca: read(ca)?,
        server_name: args.server_name.clone(),
        identity,
    }))
}

/// A wait in whole milliseconds (at least 1: 0 would ask for the default).
fn millis(wait: Duration) -> u32 {
    u32::try_from(wait.as_millis()).unwrap_or(u32::MAX).max(1)
}

/// Prints the lines of an answer, or fails with exit 2.
fn print_lines(lines: Result<Vec<String>, ClientError>) -> ExitCode {
    match lines {
        Ok(lines) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(2, e),
    }
}

/// Takes the lock, runs `command` while it is held, and stops it if the lock is lost. A signal
/// before the grant withdraws the request (within `keepalive`); one after it is passed on to
/// the command, with SIGKILL `grace` later.
async fn run_locked(
    client: &mut Client,
    path: &str,
    spec: LockSpec,
    grace: Duration,
    keepalive: Duration,
    command: &[String],
    signals: &mut Signals,
) -> ExitCode {
    let mut session = match client.session().await {
        Ok(session) => session,
        Err(e) => return fail(2, e),
    };
    let locked = tokio::select! {
        locked = session.lock(spec) => locked,
        signal = signals.next() => {
            // Withdraws the request: ending the session ends its transaction.
            let _ = tokio::time::timeout(keepalive, session.end()).await;
            return signalled_before(signal);
        }
    };
    let locked = match locked {
        Ok(locked) => locked,
        Err(ClientError::Refused {
            code: locks_grpc::tonic::Code::DeadlineExceeded,
            message,
        }) => return fail(3, message),
        Err(e) => return fail(2, e),
    };
    let tokens = locked.grant.as_ref().map(tokens_text).unwrap_or_default();
    let mut job = match Job::spawn(command, &[("LOCKS_TOKENS", &tokens), ("LOCKS_LOCK", path)]) {
        Ok(job) => job,
        Err(code) => return code,
    };
    let end = job.run(signals, grace, lock_lost(&mut session, path)).await;
    if end.lost {
        return ExitCode::from(1);
    }
    let _ = session.end().await;
    end.code()
}

/// Waits for the session's lock to be lost; says how.
async fn lock_lost(session: &mut Session, path: &str) -> String {
    loop {
        match session.next_event().await {
            Some(Ok(pb::SessionEvent {
                kind: Some(Kind::Lost(l)),
                ..
            })) => {
                let cause = pb::LossCause::try_from(l.cause)
                    .map(|c| c.as_str_name())
                    .unwrap_or("unknown");
                return format!("lock {path} lost on {} ({cause})", l.nodes.join(","));
            }
            Some(Ok(_)) => {}
            Some(Err(status)) => {
                return format!("connection to the node lost: {}", status.message());
            }
            None => return "the session ended".to_owned(),
        }
    }
}

/// Prints who leads `group`: `leader <member> <node> <term>`, or exits 3 if no leader
/// shows within `wait`.
async fn leader(client: &mut Client, group: &str, wait: Duration) -> ExitCode {
    let mut stream = match client.observe(group, &[]).await {
        Ok(stream) => stream,
        Err(e) => return fail(2, e),
    };
    let found = tokio::time::timeout(wait, async {
        loop {
            match stream.message().await {
                Ok(Some(event)) if event.has_leader => return Ok(event),
                Ok(Some(_)) => {}
                Ok(None) => return Err("the node ended the stream".to_owned()),
                Err(status) => return Err(status.message().to_owned()),
            }
        }
    })
    .await;
    match found {
        Ok(Ok(e)) => {
            println!("leader {} {} {}", e.leader, e.leader_node, e.term);
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => fail(2, e),
        Err(_) => fail(3, format_args!("no leader of {group} within {wait:?}")),
    }
}

/// Campaigns for `group`; once leading, runs `command` with the term in `LOCKS_TERM`, and
/// stops it (exit 1) if the leadership is lost.
async fn campaign(
    client: &mut Client,
    group: &str,
    nodes: &[String],
    grace: Duration,
    command: &[String],
    signals: &mut Signals,
) -> ExitCode {
    let mut stream = match client.campaign(group, nodes).await {
        Ok(stream) => stream,
        Err(e) => return fail(2, e),
    };
    let term = loop {
        // A signal withdraws the campaign: the stream is dropped on return.
        let message = tokio::select! {
            message = stream.message() => message,
            signal = signals.next() => return signalled_before(signal),
        };
        match message {
            Ok(Some(e)) if e.is_this_campaign => break e.term,
            Ok(Some(_)) => {}
            Ok(None) => return fail(2, "the node ended the campaign"),
            Err(status) => return fail(2, status.message()),
        }
    };
    let term_text = term.to_string();
    let mut job = match Job::spawn(
        command,
        &[("LOCKS_TERM", &term_text), ("LOCKS_GROUP", group)],
    ) {
        Ok(job) => job,
        Err(code) => return code,
    };
    let lost = async {
        let why = loop {
            match stream.message().await {
                Ok(Some(e)) if e.is_this_campaign && e.term == term => {}
                Ok(Some(e)) if e.has_leader => {
                    break format!("{} leads {group} now (term {})", e.leader, e.term);
                }
                Ok(Some(_)) => break format!("no leader of {group} now"),
                Ok(None) => break "the node ended the campaign".to_owned(),
                Err(status) => break format!("connection to the node lost: {}", status.message()),
            }
        };
        format!("leadership lost: {why}")
    };
    let end = job.run(signals, grace, lost).await;
    if end.lost {
        return ExitCode::from(1);
    }
    end.code()
}

#[cfg(test)]
mod tests {
    use super::{duration, node_list};
    use std::time::Duration;

    #[test]
    fn durations_read_with_their_unit() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("7"), Ok(Duration::from_secs(7)));
        assert!(duration("5h").is_err());
        assert!(duration("x").is_err());
    }

    #[test]
    fn nodes_come_from_the_flag_or_else_locks_nodes() {
        let flag = ["a:1".to_owned(), " b:2".to_owned(), String::new()];
        assert_eq!(node_list(&flag, Some("c:3")), ["a:1", "b:2"]);
        assert_eq!(node_list(&[], Some("c:3, d:4,")), ["c:3", "d:4"]);
        assert!(node_list(&[], None).is_empty());
        assert!(node_list(&[String::new()], Some("")).is_empty());
    }
}
