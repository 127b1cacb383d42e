//! MEM: resident bytes per held lock.
//!
//! Each size is measured in a fresh child process (this same program, started with the hidden
//! flag `--mem-child N`), because memory freed by an earlier workload stays resident in the
//! allocator and would hide the growth. The child starts a node, warms up by taking and releasing
//! 1,000 locks in one transaction, reads its resident set (`VmRSS` of `/proc/self/status`), then
//! one transaction (client on the node's thread) queues `N` write locks `[mem, i]` with
//! `lock_objects`, waits for them with `await_all_locks`, and the resident set is read again while
//! they are held. Bytes per lock = (held - before) / N: everything the lock costs in the whole
//! process (lock table, agent, lock ids, mailboxes), like the Erlang figure. The prefix key
//! `mem` is one shared `Arc` (as an atom would be); the integer key is inline.
//!
//! Not repeated in rounds: one child per size (memory does not vary like time does). The locks
//! are queued with `lock_objects` (one burst of requests), the quickest way to take many.

use super::rig::{self, err};
use super::uncontended::id;
use super::{Ctx, Measured, Outcome, Row, stats::RankBy};
use locks_agent::{Options, Transaction, begin_transaction};
use locks_core::{Key, Mode};
use locks_server::{Node, NodeConfig};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The resident set of this process in bytes.
pub fn resident_bytes() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("MEM needs /proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kb| kb * 1024)
        .ok_or_else(|| "no VmRSS in /proc/self/status".to_string())
}

async fn hold(node: Node, n: u64, prefix: &'static str) -> Result<Transaction, String> {
    let prefix = Key::from(prefix);
    let txn = begin_transaction(&node, Options::default())
        .await
        .map_err(err)?;
    txn.lock_objects((0..n).map(|i| (id(&prefix, i), Mode::WRITE)))
        .await
        .map_err(err)?;
    txn.await_all_locks().await.map_err(err)?;
    Ok(txn)
}

/// The child's side: measures `n` held locks in this process and prints one line,
/// `MEM <n> <rss before> <rss held> <ns to take them>`.
pub fn child(n: u64) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    rt.block_on(async {
        let node = Node::start(NodeConfig::new("mem")).await.map_err(err)?;
        let warm = node
            .spawn(hold(node.clone(), 1_000, "warm"))
            .await
            .map_err(err)??;
        warm.end().await.map_err(err)?;
        let before = resident_bytes()?;
        let started = Instant::now();
        let txn = node
            .spawn(hold(node.clone(), n, "mem"))
            .await
            .map_err(err)??;
        let took = started.elapsed();
        let held = resident_bytes()?;
        println!("MEM {n} {before} {held} {}", took.as_nanos());
        txn.end().await.map_err(err)?;
        node.shutdown().await;
        Ok(())
    })
}

fn run_child(n: u64, limit: Duration) -> Result<(u64, u64, u64), String> {
    let exe = std::env::current_exe().map_err(err)?;
    let mut child = Command::new(exe)
        .arg("--mem-child")
        .arg(n.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the MEM child: {e}"))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(err)? {
            break status;
        }
        if started.elapsed() > limit {
            // Our own child, by its handle.
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "taking {n} locks did not finish within {} s (the time budget)",
                limit.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_string(&mut out).map_err(err)?;
    }
    if !status.success() {
        return Err(format!("the MEM child failed ({status})"));
    }
    let line = out
        .lines()
        .find(|l| l.starts_with("MEM "))
        .ok_or("the MEM child printed no result")?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    match f[..] {
        [_, before, held, took] => Ok((before, held, took)),
        _ => Err(format!("bad MEM child line {line:?}")),
    }
}

/// MEM at growing sizes: 10,000 (a check that the path works at all), then the issue's
/// 100,000 and 1,000,000 (quick: 1,000 and 10,000). A size that does not finish within half the
/// time budget skips the larger ones.
pub fn run(ctx: &mut Ctx) -> Vec<Row> {
    let sizes: &[u64] = if ctx.cfg.quick {
        &[1_000, 10_000]
    } else {
        &[10_000, 100_000, 1_000_000]
    };
    let mut blocked = rig::lock_path(ctx).err();
    let mut rows = Vec::new();
    for &n in sizes {
        let name = format!("MEM {}k locks held", n / 1000);
        if let Some(e) = &blocked {
            rows.push(Row::failed(name, "B/lock", e.clone()));
            continue;
        }
        // Half the budget: a path that takes longer has a problem MEM does not need to wait for.
        match run_child(n, ctx.cfg.budget / 2) {
            Err(e) => {
                blocked = Some(format!("skipped: {} locks did not finish", n));
                rows.push(Row::failed(name, "B/lock", e));
            }
            Ok((before, held, took)) => rows.push(row(name, n, before, held, took)),
        }
    }
    rows
}

fn row(name: String, n: u64, before: u64, held: u64, took: u64) -> Row {
    let per_lock = held.saturating_sub(before) as f64 / n as f64;
    let rate = n as f64 / (took as f64 / 1e9);
    Row {
        name,
        unit: "B/lock",
        outcome: Outcome::Measured(Measured {
            value: per_lock,
            rank: RankBy::Rate,
            min: per_lock,
            max: per_lock,
            p50_ns: None,
            p99_ns: None,
            ops: n,
            rounds: 1,
            floor: None,
            // The goal is for the sizes; smaller ones are checks (at 1,000 locks the
            // memory freed by the warm-up is reused, which hides part of the cost).
            goal: (n >= 100_000).then_some(("orig ~1,200 B/lock; goal <=200", per_lock <= 200.0)),
            notes: vec![
                format!("rss before={:.1}MB", before as f64 / 1e6),
                format!("held={:.1}MB", held as f64 / 1e6),
                format!("taken at={}/s", super::report::short_number(rate)),
            ],
        }),
    }
}
