//! `locksctl` against a real `node` process on loopback: the command runs with the fencing
//! tokens while the lock is held, and is stopped (and `locksctl` exits non-zero) when the node
//! it talks to is paused; `table` and `graph` print what the node's own `cluster-table` and
//! `cluster-graph` print. Every process is killed by pid when the test ends, also on failure.

mod common;

use common::{Proc, TempDir};
use locks_testing::wait::Deadline;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(30);

/// A node serving clients on an ephemeral port, with a client token; and that port.
fn node(name: &str, deadline: Deadline) -> (Proc, String) {
    Proc::start_serving(
        name,
        deadline,
        &["--client-token", "tk", "--client-keepalive-ms", "1000"],
    )
}

/// `locksctl` with the client token, no `--node` and no `LOCKS_NODES`; its stdin is not a
/// terminal (so its command always runs in a process group of its own).
fn locksctl_bare(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locksctl"));
    cmd.args(args)
        .env("LOCKS_TOKEN", "tk")
        .env_remove("LOCKS_NODES")
        .stdin(Stdio::null());
    cmd
}

fn locksctl(addr: &str, args: &[&str]) -> Command {
    let mut cmd = locksctl_bare(&["--node", addr, "--keepalive", "1s"]);
    cmd.args(args);
    cmd
}

/// Kills the processes it holds when dropped (the test's own children, and pids they printed
/// with the process groups those pids lead).
#[derive(Default)]
struct Guard {
    children: Vec<Child>,
    pids: Vec<i32>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for pid in &self.pids {
            // SAFETY: kill(2) touches no memory of this process; a pid or group that is gone
            // fails.
            unsafe {
                libc::kill(-*pid, libc::SIGKILL);
                libc::kill(*pid, libc::SIGKILL);
            }
        }
    }
}

/// Waits for `child` to exit, within the deadline.
fn wait_exit(child: &mut Child, deadline: &Deadline) -> std::process::ExitStatus {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        deadline.check(|| "locksctl exits".to_owned());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn token_of(stdout: &[u8], node: &str) -> u64 {
    let text = String::from_utf8_lossy(stdout);
    let tokens = text.lines().next().expect("the command printed its tokens");
    tokens
        .strip_prefix(&format!("{node}@"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("tokens {tokens:?}"))
}

#[test]
fn the_command_runs_with_the_fencing_tokens_and_its_exit_code_is_returned() {
    let deadline = Deadline::after(BOUND);
    let (_node, addr) = node("c1", deadline);
    let run = |code: &str| {
        let script = format!("echo \"$LOCKS_TOKENS\"; test \"$LOCKS_LOCK\" = db/x && exit {code}");
        let mut child = locksctl(&addr, &["lock", "db/x", "--mode", "X", "--wait", "10s"])
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let status = wait_exit(&mut child, &deadline);
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut child.stdout.take().unwrap(), &mut out).unwrap();
        (status.code(), token_of(&out, "c1"))
    };
    let (code, first) = run("7");
    assert_eq!(code, Some(7));
    let (code, second) = run("0");
    assert_eq!(code, Some(0));
    assert!(second > first, "{second} after {first}");
    // A bad request: exit 2, saying why.
    let out = locksctl(&addr, &["lock", "db/x", "--mode", "Q", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mode"));
}

#[test]
fn a_paused_node_makes_locksctl_stop_the_command_and_exit_non_zero() {
    let deadline = Deadline::after(BOUND);
    let (node, addr) = node("c2", deadline);
    let node_pid = i32::try_from(node.child.id()).unwrap();
    let mut guard = Guard {
        children: vec![],
        pids: vec![],
    };
    let child = locksctl(&addr, &["lock", "job", "--grace", "1s"])
        .args(["--", "sh", "-c", "echo pid $$; exec sleep 60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    guard.children.push(child);
    let stdout = guard.children[0].stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = lines
        .recv_timeout(deadline.left())
        .expect("the command runs");
    let pid: i32 = line.trim_start_matches("pid ").parse().unwrap();
    guard.pids.push(pid);
    // The node stops answering: locksctl's keepalive gives the connection up.
    // SAFETY: kill(2) touches no memory of this process.
    unsafe {
        libc::kill(node_pid, libc::SIGSTOP);
    }
    let status = wait_exit(&mut guard.children[0], &deadline);
    assert_eq!(status.code(), Some(1), "{status:?}");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut guard.children[0].stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("lost"), "{err}");
    // The command was stopped (and reaped by locksctl).
    // SAFETY: signal 0 only checks that the pid exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    assert!(!alive, "the command {pid} still runs");
    drop(node);
}

#[test]
fn over_tls_with_client_certificates_locksctl_gets_in_only_with_its_certificate() {
    let deadline = Deadline::after(BOUND);
    let dir = std::env::temp_dir().join(format!("locksctl-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let made = Command::new(env!("CARGO_BIN_EXE_node"))
        .arg("--gen-certs")
        .arg(&dir)
        .args(["--names", "c3,client"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let mut node = Proc::start_with(
        "c3",
        &[],
        "cookie",
        "warn",
        deadline,
        &[
            "--start-delay-ms".to_owned(),
            "0".to_owned(),
            "--client-listen".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--client-tls-cert".to_owned(),
            file("c3.pem"),
            "--client-tls-key".to_owned(),
            file("c3.key"),
            "--client-tls-ca".to_owned(),
            file("ca.pem"),
        ],
    );
    let addr = node.client_addr();
    let run = |extra: &[String]| {
        let mut cmd = locksctl(&addr, &["--ca", &file("ca.pem")]);
        cmd.args(extra)
            .args(["lock", "tls/x", "--", "true"])
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let status = wait_exit(&mut child, &deadline);
        status.code()
    };
    let with_cert = run(&[
        "--cert".to_owned(),
        file("client.pem"),
        "--key".to_owned(),
        file("client.key"),
    ]);
    let without = run(&[]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(with_cert, Some(0));
    assert_eq!(without, Some(2));
}

/// Reads a child's stdout lines on a thread.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    lines
}

#[test]
fn two_campaigners_elect_one_leader_and_the_other_takes_over_when_it_is_killed() {
    let deadline = Deadline::after(BOUND);
    let (_node, addr) = node("c4", deadline);
    let mut guard = Guard {
        children: vec![],
        pids: vec![],
    };
    let script = "echo $$ $LOCKS_TERM; exec sleep 60";
    let mut campaigner = || {
        let mut child = locksctl(&addr, &["campaign", "jobs", "--grace", "1s"])
            .args(["--", "sh", "-c", script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = lines_of(&mut child);
        guard.children.push(child);
        lines
    };
    let first = campaigner();
    let line = first
        .recv_timeout(deadline.left())
        .expect("the first leads");
    let (pid, term) = line.split_once(' ').unwrap();
    let (pid, term): (i32, u64) = (pid.parse().unwrap(), term.parse().unwrap());
    let second = campaigner();
    guard.pids.push(pid);
    let out = locksctl(&addr, &["leader", "jobs"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("leader ") && text.trim_end().ends_with(&format!(" c4 {term}")),
        "{text}"
    );
    // The leader's client dies: the other campaigner leads, with a larger term.
    guard.children[0].kill().unwrap();
    let line = second
        .recv_timeout(deadline.left())
        .expect("the second leads");
    let (pid, next) = line.split_once(' ').unwrap();
    guard.pids.push(pid.parse().unwrap());
    assert!(next.parse::<u64>().unwrap() > term, "{next} after {term}");
}

/// The lines `command` prints on the node's stdin protocol, up to its end marker.
fn node_lines(node: &mut Proc, command: &str, end: &str) -> Vec<String> {
    node.send(command);
    let mut lines = Vec::new();
    loop {
        let line = node.expect(command, |l| {
            !l.starts_with("client-") && !l.starts_with("listening") && !l.starts_with("up ")
        });
        if line == end {
            return lines;
        }
        lines.push(line);
    }
}

fn stdout_lines(cmd: &mut Command) -> Vec<String> {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn table_and_graph_print_what_the_nodes_own_commands_print() {
    let deadline = Deadline::after(BOUND);
    let (mut node, addr) = node("c4", deadline);
    let mut guard = Guard {
        children: vec![],
        pids: vec![],
    };
    let holder = locksctl(&addr, &["lock", "db/x"])
        .args(["--", "sh", "-c", "echo held; exec sleep 60"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.children.push(holder);
    let mut held = BufReader::new(guard.children[0].stdout.take().unwrap());
    let mut line = String::new();
    held.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "held");
    let waiter = locksctl(&addr, &["lock", "db/x", "--mode", "S", "--wait", "30s"])
        .args(["--", "true"])
        .spawn()
        .unwrap();
    guard.children.push(waiter);
    // The waiter's request reaches the table: the graph shows it waiting for the holder.
    let edges = loop {
        let lines = stdout_lines(&mut locksctl(&addr, &["graph"]));
        if lines.iter().any(|l| l.starts_with("edge ")) {
            break lines;
        }
        deadline.check(|| "the wait shows in the graph".to_owned());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(edges[0].ends_with(" db/x@c4"), "{edges:?}");
    assert_eq!(
        edges,
        node_lines(&mut node, "cluster-graph", "end-cluster-graph")
    );
    let dot = stdout_lines(&mut locksctl(&addr, &["graph", "--dot"]));
    assert_eq!(dot[0], "digraph waits {", "{dot:?}");
    let table = stdout_lines(&mut locksctl(&addr, &["table"]));
    assert!(
        table
            .iter()
            .any(|l| l.starts_with("c4 lock db/x ") && l.contains("waiting=")),
        "{table:?}"
    );
    assert_eq!(
        table,
        node_lines(&mut node, "cluster-table", "end-cluster-table")
    );
    drop(guard);
}

fn signal(pid: u32, signal: i32) {
    let pid = i32::try_from(pid).unwrap();
    // SAFETY: kill(2) touches no memory of this process.
    let sent = unsafe { libc::kill(pid, signal) };
    assert_eq!(sent, 0, "kill({pid}, {signal})");
}

/// Whether `pid` has exited (gone, or a zombie that its new parent has not reaped yet).
fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which ends at the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// Waits until `pid` has exited, within the deadline.
fn wait_gone(pid: i32, deadline: &Deadline) {
    while !exited(pid) {
        deadline.check(|| format!("process {pid} exits"));
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The lines of `path` (none while it does not exist).
fn file_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until `path` has a line `line`, within the deadline.
fn wait_line(path: &std::path::Path, line: &str, deadline: &Deadline) {
    while !file_lines(path).iter().any(|l| l == line) {
        deadline.check(|| format!("{line:?} in {}", path.display()));
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads a child's stderr to the end.
fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    }
    err
}

#[test]
fn a_terminated_locksctl_holds_the_lock_until_its_command_has_exited() {
    let deadline = Deadline::after(BOUND);
    let (_node, addr) = node("c5", deadline);
    let dir = TempDir::new("locksctl-overlap");
    let log = dir.0.join("log");
    let mut guard = Guard::default();
    // The first command ignores SIGTERM and goes on for a while after it.
    let first = "trap '' TERM; echo $$ > \"$LOG.pid\"; echo 'first start' >> \"$LOG\"; \
                 sleep 3; echo 'first end' >> \"$LOG\"";
    let child = locksctl(&addr, &["lock", "jobs/1", "--grace", "30s"])
        .args(["--", "sh", "-c", first])
        .env("LOG", &log)
        .spawn()
        .unwrap();
    guard.children.push(child);
    wait_line(&log, "first start", &deadline);
    let pid_file = dir.0.join("log.pid");
    guard.pids.push(
        std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap(),
    );
    signal(guard.children[0].id(), libc::SIGTERM);
    let second = "echo 'second start' >> \"$LOG\"; echo 'second end' >> \"$LOG\"";
    let child = locksctl(&addr, &["lock", "jobs/1", "--wait", "30s"])
        .args(["--", "sh", "-c", second])
        .env("LOG", &log)
        .spawn()
        .unwrap();
    guard.children.push(child);
    let second_status = wait_exit(&mut guard.children[1], &deadline);
    assert_eq!(
        file_lines(&log),
        ["first start", "first end", "second start", "second end"],
        "the second command ran while the first still did"
    );
    assert_eq!(second_status.code(), Some(0), "{second_status:?}");
    // The first command ignored SIGTERM and exited 0: so does its locksctl.
    let first_status = wait_exit(&mut guard.children[0], &deadline);
    assert_eq!(first_status.code(), Some(0), "{first_status:?}");
}

#[test]
fn sigterm_is_passed_to_the_commands_process_group_and_its_status_returned() {
    let deadline = Deadline::after(BOUND);
    let (_node, addr) = node("c6", deadline);
    let mut guard = Guard::default();
    for how in [&["lock", "jobs/2"][..], &["campaign", "jobs"][..]] {
        // A shell with a child of its own: both get the signal. (The command's stderr is not
        // locksctl's pipe, which the test reads to its end.)
        let mut child = locksctl(&addr, how)
            .args(["--", "sh", "-c", "exec 2>&-; sleep 60 & echo $$ $!; wait"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = lines_of(&mut child);
        guard.children.push(child);
        let line = lines
            .recv_timeout(deadline.left())
            .expect("the command runs");
        let (shell, sleep) = line.split_once(' ').unwrap();
        let (shell, sleep): (i32, i32) = (shell.parse().unwrap(), sleep.parse().unwrap());
        guard.pids.extend([shell, sleep]);
        let ctl = guard.children.last_mut().unwrap();
        signal(ctl.id(), libc::SIGTERM);
        let status = wait_exit(ctl, &deadline);
        let err = stderr_of(ctl);
        assert_eq!(status.code(), Some(143), "{how:?}: {status:?} {err}");
        assert!(
            exited(shell),
            "{how:?}: the shell was reaped before locksctl exited"
        );
        wait_gone(sleep, &deadline);
    }
}

#[test]
fn a_command_that_ignores_sigterm_gets_sigkill_after_the_grace() {
    let deadline = Deadline::after(BOUND);
    let (_node, addr) = node("c7", deadline);
    let mut guard = Guard::default();
    let mut child = locksctl(&addr, &["lock", "jobs/3", "--grace", "1s"])
        .args([
            "--",
            "sh",
            "-c",
            "exec 2>&-; trap '' TERM; echo $$; exec sleep 60",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    guard.children.push(child);
    let line = lines
        .recv_timeout(deadline.left())
        .expect("the command runs");
    let pid: i32 = line.parse().unwrap();
    guard.pids.push(pid);
    // SIGTERM twice: the second is passed on too, and the grace runs from the first.
    signal(guard.children[0].id(), libc::SIGTERM);
    signal(guard.children[0].id(), libc::SIGTERM);
    let status = wait_exit(&mut guard.children[0], &deadline);
    let err = stderr_of(&mut guard.children[0]);
    assert_eq!(status.code(), Some(137), "{status:?} {err}");
    assert!(err.contains("SIGKILL"), "{err}");
    assert!(exited(pid), "the command was reaped before locksctl exited");
}

#[test]
fn a_signal_before_the_grant_withdraws_the_request_and_runs_nothing() {
    let deadline = Deadline::after(BOUND);
    let (_node, addr) = node("c8", deadline);
    let dir = TempDir::new("locksctl-withdraw");
    let log = dir.0.join("log");
    let mut guard = Guard::default();
    let mut holder = locksctl(&addr, &["lock", "jobs/4"])
        .args(["--", "sh", "-c", "echo $$; exec sleep 60"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let held = lines_of(&mut holder);
    guard.children.push(holder);
    let pid = held.recv_timeout(deadline.left()).expect("the holder runs");
    guard.pids.push(pid.parse().unwrap());
    let waiter = locksctl(&addr, &["lock", "jobs/4", "--wait", "30s"])
        .args(["--", "sh", "-c", "echo ran >> \"$LOG\""])
        .env("LOG", &log)
        .spawn()
        .unwrap();
    guard.children.push(waiter);
    let waiting = |lines: &[String]| lines.iter().any(|l| l.starts_with("edge "));
    while !waiting(&stdout_lines(&mut locksctl(&addr, &["graph"]))) {
        deadline.check(|| "the waiter shows in the graph".to_owned());
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(guard.children[1].id(), libc::SIGINT);
    let status = wait_exit(&mut guard.children[1], &deadline);
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(!log.exists(), "the command ran");
    // The request is gone from the node's table.
    while waiting(&stdout_lines(&mut locksctl(&addr, &["graph"]))) {
        deadline.check(|| "the withdrawn request leaves the graph".to_owned());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_nodes_are_tried_in_turn_from_the_flag_anywhere_or_from_locks_nodes() {
    let deadline = Deadline::after(BOUND);
    let (_node, addr) = node("c9", deadline);
    // A loopback port nothing listens on any more: connecting to it is refused.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let both = format!("{dead},{addr}");
    let out = locksctl_bare(&["lock", "jobs/5", "--node", &both, "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(&dead), "the skipped node is named: {err}");
    let out = locksctl_bare(&["status"])
        .env("LOCKS_NODES", &both)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("node c9\n"),
        "{out:?}"
    );
    // No node answers: exit 2; no node given: exit 2.
    let out = locksctl_bare(&["status", "--node", &dead])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = locksctl_bare(&["status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
