//! The benchmark harness: the standard workloads, the floors of this machine measured
//! in the same run, and (with `--redis`) the Redis mutex beside them.
//!
//! ```sh
//! cargo run --release -p examples --bin bench -- [workloads...] [--quick] [--json FILE] [--redis ADDR]
//!     [--etcd ADDR] [--python PATH] [--processes] [--rounds N] [--round-limit SECS]
//!     [--soak-secs SECS]
//! ```
//!
//! Prints a progress line per workload on stderr, then the table, the comparison with Redis and
//! the goals on stdout. See BENCHMARKS.md for what every workload measures.

use clap::Parser;
use examples::bench::{self, Config, Workload, report};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The locks benchmark harness.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Workloads to run (default: all but `scale`, which starts up to 64 processes). The floors
    /// always run.
    #[arg(value_enum)]
    workloads: Vec<Workload>,
    /// A smoke run: small sizes, one round, no warm-up.
    #[arg(long)]
    quick: bool,
    /// Write the rows as JSON (one object per row) to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also run the Redis mutex against this server (one you started; nothing else is contacted).
    #[arg(long, value_name = "ADDR")]
    redis: Option<String>,
    /// With the CLIENT workload, also measure etcd's Lock/Unlock and Campaign/Resign against
    /// this server (one you started, `host:port`; nothing else is contacted).
    #[arg(long, value_name = "ADDR")]
    etcd: Option<String>,
    /// With the CLIENT workload, also measure the Python client through this interpreter (one
    /// with the `locks-client` package installed, such as a virtualenv's `bin/python`).
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// W6 also with two of its three nodes in processes of their own (needs the `node`
    /// program built beside this one).
    #[arg(long)]
    processes: bool,
    /// Timed rounds per workload (default 5; 1 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds one round of a lock workload may take before it is reported as failed.
    #[arg(long, value_name = "SECS")]
    round_limit: Option<u64>,
    /// Give every in-process node a data directory under DIR (`DIR/<node name>`), to measure
    /// what keeping one costs.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// How long the SOAK workload runs its attacks, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    soak_secs: u64,
    /// Only put C1's load on the node serving clients at ADDR (one you started): `--sessions`
    /// sessions doing lock+unlock for `--seconds`, then print the rate (for profiling the
    /// node under a steady load, see BENCHMARKS.md).
    #[arg(long, value_name = "ADDR")]
    load: Option<String>,
    /// Sessions of `--load`.
    #[arg(long, default_value_t = 64)]
    sessions: usize,
    /// Seconds of `--load`.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// With `--load`: C2's lock instead, `Majority` on these nodes (names, comma-separated).
    #[arg(long, value_delimiter = ',')]
    majority: Vec<String>,
    /// Worker threads of `--load`'s runtime (0: a current-thread runtime).
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// With `--load`: wait for each unlock's answer (two round trips per lock+unlock) instead
    /// of sending it with the next lock (one).
    #[arg(long)]
    await_unlock: bool,
    /// With `--load`: lock one-level ids (`c1m-S-I`) instead of the rows' three-level ones
    /// (`c1m/S/I`), to see what the ancestors' entries cost.
    #[arg(long)]
    flat: bool,
    /// Internal: measure MEM for this many locks in this process and print the result.
    #[arg(long, hide = true, value_name = "N")]
    mem_child: Option<u64>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(n) = args.mem_child {
        return match bench::mem::child(n) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("MEM child: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(addr) = args.load {
        let run_for = Duration::from_secs(args.seconds);
        return match bench::client::load(
            &addr,
            args.sessions,
            run_for,
            args.workers,
            &args.majority,
            if args.await_unlock {
                bench::client::Cycle::Awaited
            } else {
                bench::client::Cycle::Pipelined
            },
            if args.flat {
                bench::client::Ids::Flat
            } else {
                bench::client::Ids::Deep
            },
        ) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("load: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut cfg = Config::new(args.quick);
    if let Some(rounds) = args.rounds {
        cfg.rounds = rounds.max(1);
    }
    if let Some(secs) = args.round_limit {
        cfg.round_limit = Duration::from_secs(secs.max(1));
    }
    cfg.redis = args.redis;
    cfg.etcd = args.etcd;
    cfg.python = args.python;
    cfg.processes = args.processes;
    cfg.data_dir = args.data_dir;
    cfg.soak_secs = args.soak_secs.max(1);
    cfg.workloads = args.workloads;
    if cfg.redis.is_none() && cfg.workloads == [Workload::Redis] {
        eprintln!("the redis workload needs --redis ADDR");
        return ExitCode::FAILURE;
    }
    let quick = cfg.quick;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let busy = bench::busy_fraction(Duration::from_millis(500))
        .map_or_else(|| "unknown".to_string(), |b| format!("{:.0}%", b * 100.0));
    let machine = format!(
        "{cpus} CPUs, {busy} busy in the 0.5 s before the run; {} warm-up + {} timed rounds{}",
        cfg.warmup,
        cfg.rounds,
        if quick { " (quick)" } else { "" }
    );
    eprintln!("machine: {machine}");
    let rows = match bench::run(cfg) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("\nmachine: {machine}");
    print!("{}", report::table(&rows));
    for section in [
        report::redis_comparison(&rows),
        report::etcd_comparison(&rows),
        report::goals(&rows),
    ] {
        if !section.is_empty() {
            println!();
            print!("{section}");
        }
    }
    if let Some(path) = args.json {
        if let Err(e) = std::fs::write(&path, report::json(&rows, quick)) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        eprintln!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
