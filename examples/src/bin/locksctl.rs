//! `locksctl`: a command-line client of a node's gRPC API (`locks.v1`, docs/grpc.md).
//!
//! ```sh
//! locksctl --node 127.0.0.1:7100 lock db/x --mode X --wait 5s -- ./migrate.sh
//! locksctl --node 127.0.0.1:7100 lock db/x --nodes a,b,c --majority -- ./job
//! locksctl --node 127.0.0.1:7100 status
//! locksctl --node 127.0.0.1:7100 campaign jobs -- ./scheduler
//! locksctl --node 127.0.0.1:7100 leader jobs
//! locksctl --node 127.0.0.1:7100 table
//! locksctl --node 127.0.0.1:7100 graph --dot | dot -Tsvg > waits.svg
//! ```
//!
//! `lock` takes the lock, runs the command while it is held with the fencing tokens in
//! `LOCKS_TOKENS` (`a@123,b@456`: node and version per granting node) and the lock in
//! `LOCKS_LOCK`, and ends the session when the command exits, with the command's exit code. If
//! the lock is lost (a node it depends on down or unreachable, the connection to the node gone),
//! it stops the command with SIGTERM, then SIGKILL after `--grace`, and exits 1. Exit codes: the
//! command's own; 1 lock lost; 2 bad usage, no connection or request refused; 3 not granted
//! within `--wait`.
//!
//! `campaign` runs the command while this client leads the group, with the term (a fencing
//! token) in `LOCKS_TERM`, and stops it the same way (exit 1) when the leadership is lost;
//! `leader` prints `leader <member> <node> <term>`.
//!
//! `table` prints the lock tables of the node and of the nodes it reaches, `graph` the
//! cluster's wait-for graph (or its DOT with `--dot`), in the lines of the node's own
//! `cluster-table` and `cluster-graph` commands (`examples::locksctl`).
//!
//! The token comes from `--token` or the environment variable `LOCKS_TOKEN`. For a node that
//! serves the API over TLS: `--ca` (and `--server-name`, default `locks`), and `--cert` /
//! `--key` when it asks for client certificates.

use clap::{Parser, Subcommand};
use examples::locksctl::{graph_lines, table_lines};
use locks_grpc::client::{Client, ClientError, ClientOptions, ClientTls, LockSpec, tokens_text};
use locks_grpc::pb::{self, session_event::Kind};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// A command-line client of a locks node.
#[derive(Debug, Parser)]
#[command(
    name = "locksctl",
    about = "Takes locks from a locks node (its gRPC client API)"
)]
struct Args {
    /// The node's client address (its --client-listen), `host:port`.
    #[arg(long, value_name = "ADDR")]
    node: String,
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
        /// After SIGTERM, how long the command has before SIGKILL.
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
    Campaign {
        /// The group.
        group: String,
        /// The group's nodes (default: those its members learn of).
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        /// After SIGTERM, how long the command has before SIGKILL.
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
    let mut client = match Client::connect(&args.node, options).await {
        Ok(client) => client,
        Err(e) => return fail(2, format_args!("cannot reach {}: {e}", args.node)),
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
        } => campaign(&mut client, &group, &nodes, grace, &command).await,
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
            run_locked(&mut client, &path, spec, grace, &command).await
        }
    }
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

fn fail(code: u8, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("locksctl: {e}");
    ExitCode::from(code)
}

/// Takes the lock, runs `command` while it is held, and stops it if the lock is lost.
async fn run_locked(
    client: &mut Client,
    path: &str,
    spec: LockSpec,
    grace: Duration,
    command: &[String],
) -> ExitCode {
    let mut session = match client.session().await {
        Ok(session) => session,
        Err(e) => return fail(2, e),
    };
    let locked = match session.lock(spec).await {
        Ok(locked) => locked,
        Err(ClientError::Refused {
            code: locks_grpc::tonic::Code::DeadlineExceeded,
            message,
        }) => return fail(3, message),
        Err(e) => return fail(2, e),
    };
    let tokens = locked.grant.as_ref().map(tokens_text).unwrap_or_default();
    let mut child = match spawn(command, &[("LOCKS_TOKENS", &tokens), ("LOCKS_LOCK", path)]) {
        Ok(child) => child,
        Err(code) => return code,
    };
    let lost = loop {
        tokio::select! {
            status = child.wait() => {
                let _ = session.end().await;
                return match status {
                    Ok(status) => ExitCode::from(exit_code(status)),
                    Err(e) => fail(2, e),
                };
            }
            event = session.next_event() => match event {
                Some(Ok(pb::SessionEvent { kind: Some(Kind::Lost(l)), .. })) => {
                    let cause = pb::LossCause::try_from(l.cause)
                        .map(|c| c.as_str_name())
                        .unwrap_or("unknown");
                    break format!("lock {path} lost on {} ({cause})", l.nodes.join(","));
                }
                Some(Ok(_)) => {}
                Some(Err(status)) => break format!("connection to the node lost: {}", status.message()),
                None => break "the session ended".to_owned(),
            }
        }
    };
    eprintln!("locksctl: {lost}; stopping the command");
    stop(&mut child, grace).await;
    ExitCode::from(1)
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
) -> ExitCode {
    let mut stream = match client.campaign(group, nodes).await {
        Ok(stream) => stream,
        Err(e) => return fail(2, e),
    };
    let term = loop {
        match stream.message().await {
            Ok(Some(e)) if e.is_this_campaign => break e.term,
            Ok(Some(_)) => {}
            Ok(None) => return fail(2, "the node ended the campaign"),
            Err(status) => return fail(2, status.message()),
        }
    };
    let term_text = term.to_string();
    let mut child = match spawn(
        command,
        &[("LOCKS_TERM", &term_text), ("LOCKS_GROUP", group)],
    ) {
        Ok(child) => child,
        Err(code) => return code,
    };
    let lost = loop {
        tokio::select! {
            status = child.wait() => {
                return match status {
                    Ok(status) => ExitCode::from(exit_code(status)),
                    Err(e) => fail(2, e),
                };
            }
            event = stream.message() => match event {
                Ok(Some(e)) if e.is_this_campaign && e.term == term => {}
                Ok(Some(e)) if e.has_leader => break format!("{} leads {group} now (term {})", e.leader, e.term),
                Ok(Some(_)) => break format!("no leader of {group} now"),
                Ok(None) => break "the node ended the campaign".to_owned(),
                Err(status) => break format!("connection to the node lost: {}", status.message()),
            }
        }
    };
    eprintln!("locksctl: leadership lost: {lost}; stopping the command");
    stop(&mut child, grace).await;
    ExitCode::from(1)
}

/// Starts `command` with `env` added, or says why not (exit 2).
fn spawn(command: &[String], env: &[(&str, &str)]) -> Result<tokio::process::Child, ExitCode> {
    tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .envs(env.iter().copied())
        .spawn()
        .map_err(|e| fail(2, format_args!("cannot run {}: {e}", command[0])))
}

/// SIGTERM, then SIGKILL after `grace`; waits for the command to exit.
async fn stop(child: &mut tokio::process::Child, grace: Duration) {
    if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: kill(2) with a pid of a child not yet waited for (so not reused) and a valid
        // signal number; it touches no memory of this process.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            return;
        }
    }
    let _ = child.kill().await;
}

/// The exit code of a command: its own, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::duration;
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
}
