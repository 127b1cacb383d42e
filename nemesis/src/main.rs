//! The nemesis binary: runs every fault scenario of a profile against real `node` processes in
//! network namespaces of its own (lock scenarios, then leader scenarios) and prints what the
//! checkers found.
//!
//! ```sh
//! cargo build -p examples --bin node && cargo run -p nemesis            # short profile
//! NEMESIS_PROFILE=long cargo run -p nemesis                             # >= 200 injections
//! ```
//!
//! Needs root (it creates network namespaces). Without them it fails, unless
//! `NEMESIS_ALLOW_SKIP=1`, with which it says it skipped and exits 0. `NEMESIS_NODE` names the
//! `node` binary (default: `node` next to this binary). Exits 1 when any scenario broke an
//! assertion.

use nemesis::checker::Bounds;
use nemesis::clock::{Ns, ms, now};
use nemesis::driver::Driver;
use nemesis::leader_driver::LeaderDriver;
use nemesis::net::{Net, remove_stale};
use nemesis::procs::NodeSpec;
use nemesis::scenario::{Fault, Profile};
use std::path::PathBuf;
use std::process::ExitCode;

const NODES: usize = 3;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("nemesis: {e}");
            ExitCode::FAILURE
        }
    }
}

fn node_binary() -> Result<PathBuf, String> {
    let path = match std::env::var_os("NEMESIS_NODE") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find this binary: {e}"))?
            .with_file_name("node"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "no node binary at {} (build it: cargo build -p examples --bin node, or set \
             NEMESIS_NODE)",
            path.display()
        ))
    }
}

fn stats(list: &[Option<Ns>]) -> String {
    let mut got: Vec<Ns> = list.iter().flatten().copied().collect();
    got.sort_unstable();
    if got.is_empty() {
        return format!("0/{}", list.len());
    }
    format!(
        "{}/{} median {} ms max {} ms",
        got.len(),
        list.len(),
        ms(got[got.len() / 2]),
        ms(got[got.len() - 1])
    )
}

/// The first ten violations and problems of a scenario, indented.
fn print_problems(violations: &[String], problems: &[String]) {
    for m in violations.iter().chain(problems).take(10) {
        println!("  {m}");
    }
    if violations.len() + problems.len() > 10 {
        println!("  ... {} more", violations.len() + problems.len() - 10);
    }
}

fn run() -> Result<bool, String> {
    let profile = Profile::from_env(std::env::var("NEMESIS_PROFILE").ok().as_deref())?;
    let binary = node_binary()?;
    nemesis::interrupt::install();
    for ns in remove_stale() {
        println!("removed stale namespace {ns}");
    }
    let pid = std::process::id();
    let net = match Net::create(pid, NODES) {
        Ok(net) => net,
        Err(e) if std::env::var("NEMESIS_ALLOW_SKIP").as_deref() == Ok("1") => {
            println!("nemesis: SKIPPED, cannot create network namespaces: {e}");
            return Ok(true);
        }
        Err(e) => {
            return Err(format!(
                "cannot create network namespaces (root needed; NEMESIS_ALLOW_SKIP=1 skips): {e}"
            ));
        }
    };
    let bounds = Bounds {
        clients: NODES,
        unavailable: profile.heartbeat_timeout + profile.lock_delay + profile.slack,
    };
    println!(
        "nemesis: profile {} ({} injections), heartbeat timeout {} ms, lock delay {} ms, \
         bound {} ms",
        profile.name,
        profile.total_injections(),
        ms(profile.heartbeat_timeout),
        ms(profile.lock_delay),
        ms(bounds.unavailable)
    );
    let log_dir = std::env::temp_dir().join(format!("nemesis-{pid}"));
    let started = now();
    let mut all_ok = true;
    let (mut faults, mut overlaps) = (0, 0);
    for kind in Fault::ALL {
        let spec = NodeSpec {
            binary: binary.clone(),
            count: NODES,
            heartbeat_timeout_ms: profile.heartbeat_timeout / 1_000_000,
            lock_delay_ms: profile.lock_delay / 1_000_000,
            cookie: format!("nemesis-{pid}"),
            log_dir: log_dir.join(kind.name()),
            data_dir: log_dir.join(kind.name()).join("data"),
        };
        net.heal_all()?;
        let mut driver = Driver::start(&net, spec)?;
        for _ in 0..profile.injections {
            driver.inject(kind, &profile)?;
        }
        let (v, problems) = driver.finish(bounds);
        if nemesis::interrupt::interrupted() {
            return Err("interrupted".to_owned());
        }
        faults += v.faults;
        overlaps += v.overlaps.len();
        let ok = v.passed() && problems.is_empty();
        all_ok &= ok;
        println!(
            "scenario {:<13} {} faults={} overlaps={} (longest {} ms) writes accepted={} \
             refused={} told={} unavailable={}",
            kind.name(),
            if ok { "ok  " } else { "FAIL" },
            v.faults,
            v.overlaps.len(),
            ms(v.overlaps.iter().map(|o| o.2).max().unwrap_or(0)),
            v.writes.0,
            v.writes.1,
            stats(&v.told),
            stats(&v.unavailable)
        );
        print_problems(&v.violations, &problems);
    }
    for kind in Fault::LEADER {
        let spec = NodeSpec {
            binary: binary.clone(),
            count: NODES,
            heartbeat_timeout_ms: profile.heartbeat_timeout / 1_000_000,
            lock_delay_ms: profile.lock_delay / 1_000_000,
            cookie: format!("nemesis-{pid}"),
            log_dir: log_dir.join(format!("leader-{}", kind.name())),
            data_dir: log_dir.join(format!("leader-{}", kind.name())).join("data"),
        };
        net.heal_all()?;
        let mut driver = LeaderDriver::start(&net, spec)?;
        for _ in 0..profile.injections {
            driver.inject(kind, &profile)?;
        }
        let (v, problems) = driver.finish();
        if nemesis::interrupt::interrupted() {
            return Err("interrupted".to_owned());
        }
        faults += v.faults;
        overlaps += v.overlaps.len();
        let ok = v.passed() && problems.is_empty();
        all_ok &= ok;
        println!(
            "scenario leader-{:<6} {} faults={} two-leaders={} (longest {} ms) confirmed \
             writes={} lost={} failover={}",
            kind.name(),
            if ok { "ok  " } else { "FAIL" },
            v.faults,
            v.overlaps.len(),
            ms(v.overlaps.iter().map(|o| o.2).max().unwrap_or(0)),
            v.confirmed,
            v.lost,
            stats(&v.failover)
        );
        print_problems(&v.violations, &problems);
    }
    println!(
        "nemesis: {} faults injected, {} overlaps (of lock owners and of leaders), {} s, {} (node logs in {})",
        faults,
        overlaps,
        (now() - started) / 1_000_000_000,
        if all_ok { "PASSED" } else { "FAILED" },
        log_dir.display()
    );
    Ok(all_ok)
}
