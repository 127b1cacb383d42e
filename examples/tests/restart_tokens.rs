//! Fencing versions across restarts of a `node` process with a data directory: a node started
//! again with its clock an hour behind (libfaketime's `faketime`, when installed) grants a lock
//! at a larger version than it did before; without a data directory it grants a lower one,
//! which is what the data directory is for. Bounded by `DEADLINE`.

mod common;

use common::{Proc, TempDir, faketime, node_command};
use locks_testing::wait::Deadline;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(60);

/// The `node` binary with `args`, under `faketime -1h` when `behind`.
fn node(behind: bool, args: &[&str]) -> Command {
    let mut cmd = node_command(behind);
    cmd.args(args).env("RUST_LOG", "warn");
    cmd
}

/// Starts node `solo` (with `data_dir`, or none), takes `a/b` in `X` and quits; returns the
/// token's version.
fn token(data_dir: Option<&Path>, behind: bool, deadline: Deadline) -> u64 {
    let dir = data_dir.map(|d| d.display().to_string());
    let mut args = vec!["--name", "solo"];
    match &dir {
        Some(dir) => args.extend(["--data-dir", dir]),
        None => args.push("--no-data-dir"),
    }
    let mut p = Proc::spawn("solo", node(behind, &args), deadline);
    p.send("lock t1 a/b X");
    let line = p.expect("granted", |l| l.starts_with("granted t1 a/b solo@"));
    p.send("quit");
    assert!(p.child.wait().unwrap().success(), "solo quits");
    line.rsplit('@')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("a version in {line:?}"))
}

#[test]
fn a_restart_with_the_clock_an_hour_behind_grants_larger_tokens_with_a_data_directory() {
    let deadline = Deadline::after(DEADLINE);
    let dir = TempDir::new("restart-tokens");
    let data = dir.0.join("solo");
    let behind = faketime();
    if !behind {
        eprintln!("faketime is not installed: restarting with the clock as it is");
    }
    let first = token(Some(&data), false, deadline);
    let second = token(Some(&data), behind, deadline);
    assert!(second > first, "solo@{second} after solo@{first}");
    // And again: every restart starts above the one before.
    let third = token(Some(&data), behind, deadline);
    assert!(third > second, "solo@{third} after solo@{second}");
}

#[test]
fn without_a_data_directory_a_clock_behind_hands_out_lower_tokens() {
    if !faketime() {
        eprintln!("faketime is not installed: nothing to show");
        return;
    }
    let deadline = Deadline::after(DEADLINE);
    let first = token(None, false, deadline);
    let second = token(None, true, deadline);
    assert!(second < first, "solo@{second} after solo@{first}");
}

/// Runs the node binary with `args` and its stdin closed; returns whether it succeeded and its
/// stderr.
fn run(args: &[&str], data: &Path) -> (bool, String) {
    let out = node(false, args)
        .arg("--data-dir")
        .arg(data)
        .arg("--exit-on-eof")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the node binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), stderr)
}

#[test]
fn a_foreign_or_corrupt_data_directory_stops_the_node_with_an_error_that_says_so() {
    let dir = TempDir::new("corrupt-data");
    let data = dir.0.join("solo");
    let _ = token(Some(&data), false, Deadline::after(DEADLINE));
    let (ok, stderr) = run(&["--name", "other"], &data);
    assert!(
        !ok && stderr.contains("belongs to node \"solo\""),
        "{stderr}"
    );
    let record = data.join("node");
    let mut bytes = std::fs::read(&record).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&record, bytes).unwrap();
    let (ok, stderr) = run(&["--name", "solo"], &data);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("corrupt") && stderr.contains(&record.display().to_string()),
        "{stderr}"
    );
}
