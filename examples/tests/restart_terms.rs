//! Leader terms across a whole-group restart: three `node` processes with data directories run
//! a replica of the gdict dictionary `d` each (majority mode) and agree on a leader; all three
//! are killed with SIGKILL and started again with their clocks an hour behind (libfaketime's
//! `faketime`, when installed); the new leader's epoch is above the old one's. Bounded by
//! `DEADLINE`.

mod common;

use common::{Proc, TempDir, faketime, node_command};
use locks_testing::wait::Deadline;
use std::path::Path;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(90);
const COOKIE: &str = "restart-terms-test";

/// Starts node `name` with its data directory under `data`, dialing `peers`, under
/// `faketime -1h` when `behind`.
fn start(name: &str, data: &Path, peers: &[String], behind: bool, deadline: Deadline) -> Proc {
    let mut cmd = node_command(behind);
    cmd.args([
        "--name",
        name,
        "--listen",
        "127.0.0.1:0",
        "--cookie",
        COOKIE,
    ])
    .args(["--heartbeat-timeout-ms", "1000", "--exit-on-eof"])
    .arg("--data-dir")
    .arg(data.join(name))
    .env("RUST_LOG", "warn")
    .stderr(std::process::Stdio::null());
    for peer in peers {
        cmd.args(["--peer", peer]);
    }
    Proc::spawn(name, cmd, deadline)
}

/// Three nodes, each dialing those before it, each running a replica of `d`.
fn start_group(data: &Path, behind: bool, deadline: Deadline) -> Vec<Proc> {
    let mut procs: Vec<Proc> = Vec::new();
    let mut addrs = Vec::new();
    for name in ["r1", "r2", "r3"] {
        let mut p = start(name, data, &addrs, behind, deadline);
        addrs.push(p.listen_addr());
        procs.push(p);
    }
    for p in &mut procs {
        let me = p.name.clone();
        for other in ["r1", "r2", "r3"].into_iter().filter(|o| *o != me) {
            p.expect(other, |l| l == format!("up {other}"));
        }
        p.send("gdict d");
        p.expect("joined", |l| l == "joined d");
    }
    procs
}

/// Waits until every process's latest `leader d <node> <epoch>` line names the same leader;
/// returns it.
fn agreed(procs: &mut [Proc]) -> (String, u64) {
    let mut latest: Vec<Option<(String, u64)>> = vec![None; procs.len()];
    loop {
        for (i, p) in procs.iter_mut().enumerate() {
            while let Ok(line) = p.lines.recv_timeout(Duration::from_millis(5)) {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["leader", "d", "none"] => latest[i] = None,
                    ["leader", "d", node, epoch] => {
                        latest[i] = Some(((*node).to_owned(), epoch.parse().expect("an epoch")));
                    }
                    _ => {}
                }
            }
        }
        if let Some(l) = &latest[0]
            && latest.iter().all(|x| x.as_ref() == Some(l))
        {
            return l.clone();
        }
        procs[0]
            .deadline
            .check(|| format!("an agreed leader: {latest:?}"));
    }
}

#[test]
fn a_group_killed_and_restarted_with_clocks_behind_elects_a_leader_with_a_larger_term() {
    let deadline = Deadline::after(DEADLINE);
    let dir = TempDir::new("restart-terms");
    let mut procs = start_group(&dir.0, false, deadline);
    let (first, epoch) = agreed(&mut procs);
    // The leader has written with its term: a store answered by a majority.
    procs[0].send("store d k 1");
    procs[0].expect("stored", |l| l == "stored d k");
    for p in &mut procs {
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
    drop(procs);
    let behind = faketime();
    if !behind {
        eprintln!("faketime is not installed: restarting with the clocks as they are");
    }
    let mut procs = start_group(&dir.0, behind, deadline);
    let (second, epoch2) = agreed(&mut procs);
    assert!(epoch2 > epoch, "{second}@{epoch2} after {first}@{epoch}");
}
