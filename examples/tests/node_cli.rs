//! The node binary's `--mono` stamps, its `help` answer, its `leader` query, its `lock ...
//! wait=MS` and its plain logs in a pipe, on a node with no peers; and the `lost` line it
//! prints unasked when a peer holding part of a lock dies.

mod common;

use common::Proc;
use locks_testing::wait::Deadline;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Runs a lone node with `args`, feeds it `input`, and returns its stdout lines (the node exits
/// at the end of its stdin); fails after 20 s.
fn run(args: &[&str], input: &str) -> Vec<String> {
    run_bytes(args, input.as_bytes())
}

/// [`run`] with any bytes for input.
fn run_bytes(args: &[&str], input: &[u8]) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_node"))
        .args(["--name", "n1", "--exit-on-eof", "--no-data-dir"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the node binary starts");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Written from a thread: the node's answers could fill the pipe before it reads all.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let lines: Vec<String> = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect();
        let _ = tx.send(lines);
    });
    let lines = rx.recv_timeout(Duration::from_secs(20));
    let _ = writer.join();
    let _ = child.kill();
    let _ = child.wait();
    lines.expect("the node exits at the end of its stdin")
}

#[test]
fn mono_stamps_every_line_in_order_and_help_lists_the_commands() {
    let lines = run(&["--mono"], "help\nstatus t9\n");
    assert!(lines.len() >= 3, "{lines:?}");
    let mut last = 0u64;
    let mut texts = Vec::new();
    for line in &lines {
        let (t, text) = line.split_once(' ').expect("a stamp and a line");
        let t: u64 = t.parse().expect("the stamp is a number");
        assert!(t >= last, "stamps go backwards: {lines:?}");
        last = t;
        texts.push(text.to_owned());
    }
    for command in [
        "lock",
        "status",
        "end",
        "nodes",
        "table",
        "cluster-table",
        "cluster-graph",
        "help",
        "quit",
    ] {
        assert!(
            texts
                .iter()
                .any(|l| l.starts_with(&format!("help {command}"))),
            "help does not list {command}: {texts:?}"
        );
    }
    let end_help = texts
        .iter()
        .position(|l| l == "end-help")
        .expect("end-help");
    assert_eq!(texts[end_help + 1], "error t9 no such transaction");
}

/// Runs a lone node at log level info with its stderr in a pipe, as a service manager or a
/// `2> node.log` would, until the end of its stdin, and returns what it logged; fails after 20 s.
fn logs_of_a_node_in_a_pipe() -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_node"))
        .args(["--name", "n1", "--exit-on-eof", "--no-data-dir"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the node binary starts");
    drop(child.stdin.take());
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        let _ = tx.send(text);
    });
    let text = rx.recv_timeout(Duration::from_secs(20));
    let _ = child.kill();
    let _ = child.wait();
    text.expect("the node exits at the end of its stdin")
}

#[test]
fn logs_into_a_pipe_carry_no_colour_codes() {
    let logs = logs_of_a_node_in_a_pipe();
    assert!(logs.contains("node started"), "no start line in {logs:?}");
    assert!(!logs.contains('\x1b'), "colour codes in {logs:?}");
}

#[test]
fn without_mono_lines_are_unstamped() {
    let lines = run(&[], "status t9\n");
    assert_eq!(lines, vec!["error t9 no such transaction".to_owned()]);
}

#[test]
fn leader_answers_whom_the_replica_follows() {
    let deadline = Deadline::after(Duration::from_secs(20));
    let mut node = Proc::start("n1", &[], "node-cli-test", "warn", deadline);
    node.send("leader d");
    node.expect_line("error d no such dictionary");
    node.send("gdict d");
    node.expect_line("joined d");
    // Alone, the replica elects itself: the change line comes unasked.
    let elected = node.expect("n1 leads", |l| l.starts_with("leader d n1 "));
    node.send("leader d");
    node.expect_line(&format!("{elected} leading"));
    node.send("gdict e n1,n9");
    node.expect_line("joined e");
    // A majority of {n1, n9} needs n9, which is not there: no leader.
    node.send("leader e");
    node.expect_line("leader e none");
    node.send("gdict f n1 extra");
    node.expect_line("error f too many arguments");
}

#[test]
fn a_lock_with_a_bounded_wait_gives_up_and_is_withdrawn() {
    let deadline = Deadline::after(Duration::from_secs(20));
    let mut node = Proc::start("n1", &[], "node-cli-wait", "warn", deadline);
    node.send("lock t1 db/x");
    node.expect("t1 holds db/x", |l| l.starts_with("granted t1 db/x "));
    node.send("lock t2 db/x X wait=50");
    let gave_up = node.expect("t2 gives up", |l| l.starts_with("error t2 "));
    // The lock, the copy not granted, and the transaction it waited for (t1's agent).
    assert!(
        gave_up.starts_with("error t2 gave up waiting for ")
            && gave_up.contains("@n1; waiting for <n1."),
        "{gave_up}"
    );
    // Withdrawn: once t1 ends, t3 gets the lock, not t2.
    node.send("end t1");
    node.send("lock t3 db/x X n1 all wait=5000");
    node.expect("t3 holds db/x", |l| l.starts_with("granted t3 db/x "));
    node.send("lock t4 db/y X wait=x");
    node.expect("a bad wait", |l| l.starts_with("error t4 wait=MS"));
}

#[test]
fn a_lock_lost_with_its_node_is_printed_unasked() {
    let deadline = Deadline::after(Duration::from_secs(30));
    let mut n1 = Proc::start("n1", &[], "node-cli-lost", "warn", deadline);
    let a1 = n1.listen_addr();
    let mut n2 = Proc::start("n2", &[a1], "node-cli-lost", "warn", deadline);
    n2.expect_line("up n1");
    n2.send("lock t1 r/x X n1,n2 all");
    n2.expect("t1 granted", |l| l.starts_with("granted t1 r/x "));
    // n1 dies (SIGKILL): its connection ends, and n2 tells t1 at once.
    n1.child.kill().unwrap();
    let lost = n2.expect("t1 lost", |l| l.starts_with("lost t1 "));
    assert_eq!(lost, "lost t1 r/x n1 node-down");
}

#[test]
fn a_bad_stdin_line_is_an_error_for_that_line_and_lock_paths_are_escaped_tokens() {
    let mut input = b"\xff\xfe status t1\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', 70_000));
    input.extend_from_slice(b"\nlock t2 bad%zz\nstatus t1\n");
    let lines = run_bytes(&[], &input);
    assert!(
        lines.contains(&"error - line is not UTF-8; ignored".to_owned()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"error - line too long: 70000 bytes (at most 65536); ignored".to_owned()),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("error t2 bad %-escape")),
        "{lines:?}"
    );
    // The lines after the bad ones are still read.
    assert!(
        lines.contains(&"error t1 no such transaction".to_owned()),
        "{lines:?}"
    );
    // A key with a newline, a slash and a non-ASCII letter is one escaped token in the table,
    // read once the lock is granted (the grant is printed when the lock call returns).
    let deadline = Deadline::after(Duration::from_secs(20));
    let mut node = Proc::start("n1", &[], "node-cli-escape", "warn", deadline);
    node.send("lock t1 caf%C3%A9/a%0Ab%2Fc");
    node.expect("t1 holds it", |l| {
        l.starts_with("granted t1 caf%C3%A9/a%0Ab%2Fc ")
    });
    node.send("table");
    node.expect("the escaped lock in the table", |l| {
        l.starts_with("lock caf%C3%A9/a%0Ab%2Fc v")
    });
}
