//! The harness shared by the tests that run node processes (the `node` binary) on 127.0.0.1:
//! spawn one with a cookie and a log level, read its stdout lines on a thread, send it commands
//! on its stdin, and wait for lines until the test's deadline. A process is killed when its
//! `Proc` is dropped, so a failing test leaves none behind.

#![allow(dead_code)]

use locks_testing::wait::Deadline;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// One node process and the lines it printed.
pub struct Proc {
    pub name: String,
    pub child: Child,
    stdin: ChildStdin,
    /// The lines the reader thread has read, in order.
    pub lines: mpsc::Receiver<String>,
    /// Lines read but not consumed by an `expect`.
    pub backlog: Vec<String>,
    pub deadline: Deadline,
}

impl Proc {
    /// Starts node `name` listening on an ephemeral loopback port, dialing `peers`, with
    /// `cookie` and `RUST_LOG=rust_log`; every wait on it ends at `deadline`.
    pub fn start(
        name: &str,
        peers: &[String],
        cookie: &str,
        rust_log: &str,
        deadline: Deadline,
    ) -> Proc {
        Proc::start_with(
            name,
            peers,
            cookie,
            rust_log,
            deadline,
            &["--heartbeat-timeout-ms", "1000"],
        )
    }

    /// [`Proc::start`] with `flags` instead of its heartbeat flag: the heartbeat, lease and
    /// delay flags of the node binary, its TLS flags, or any other.
    pub fn start_with(
        name: &str,
        peers: &[String],
        cookie: &str,
        rust_log: &str,
        deadline: Deadline,
        flags: &[impl AsRef<std::ffi::OsStr>],
    ) -> Proc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_node"));
        cmd.args([
            "--name",
            name,
            "--listen",
            "127.0.0.1:0",
            "--cookie",
            cookie,
        ])
        .args(flags)
        .arg("--exit-on-eof")
        .env("RUST_LOG", rust_log)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        for peer in peers {
            cmd.args(["--peer", peer]);
        }
        // A test's nodes keep nothing on disk unless the test gives them a data directory.
        if !flags.iter().any(|f| f.as_ref() == "--data-dir") {
            cmd.arg("--no-data-dir");
        }
        Proc::spawn(name, cmd, deadline)
    }

    /// Runs `cmd` (a node binary, or a wrapper around one) with piped stdin and stdout.
    pub fn spawn(name: &str, mut cmd: Command, deadline: Deadline) -> Proc {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("the node binary starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            name: name.to_owned(),
            child,
            stdin,
            lines,
            backlog: Vec::new(),
            deadline,
        }
    }

    /// Starts three nodes named `names`, the second dialing the first and the third dialing
    /// both (each waits for the `listening` line of those it dials).
    pub fn start_three(
        names: [&str; 3],
        cookie: &str,
        rust_log: &str,
        deadline: Deadline,
    ) -> [Proc; 3] {
        let [x1, x2, x3] = names;
        let mut n1 = Proc::start(x1, &[], cookie, rust_log, deadline);
        let a1 = n1.listen_addr();
        let mut n2 = Proc::start(x2, std::slice::from_ref(&a1), cookie, rust_log, deadline);
        let a2 = n2.listen_addr();
        let n3 = Proc::start(x3, &[a1, a2], cookie, rust_log, deadline);
        [n1, n2, n3]
    }

    /// A node serving clients on an ephemeral loopback port (`--client-listen 127.0.0.1:0`,
    /// no start delay, log level `warn`), with `flags` added; and that port's address.
    pub fn start_serving(name: &str, deadline: Deadline, flags: &[&str]) -> (Proc, String) {
        let mut all = vec!["--start-delay-ms", "0", "--client-listen", "127.0.0.1:0"];
        all.extend_from_slice(flags);
        let mut node = Proc::start_with(name, &[], "cookie", "warn", deadline, &all);
        let addr = node.client_addr();
        (node, addr)
    }

    /// The address from the node's `client-listening <addr>` line.
    pub fn client_addr(&mut self) -> String {
        self.expect("client-listening", |l| l.starts_with("client-listening "))
            .trim_start_matches("client-listening ")
            .to_owned()
    }

    /// The address from the node's `listening <addr>` line.
    pub fn listen_addr(&mut self) -> String {
        self.expect("listening", |l| l.starts_with("listening "))
            .trim_start_matches("listening ")
            .to_owned()
    }

    pub fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").expect("the node reads its stdin");
        self.stdin.flush().unwrap();
    }

    /// Waits for a line matching `pred` (earlier unmatched lines are kept) and returns it.
    pub fn expect(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        if let Some(i) = self.backlog.iter().position(|l| pred(l)) {
            return self.backlog.remove(i);
        }
        loop {
            match self.lines.recv_timeout(self.deadline.left()) {
                Ok(line) if pred(&line) => return line,
                Ok(line) => self.backlog.push(line),
                Err(_) => panic!(
                    "{}: no line for {what} (unconsumed: {:?})",
                    self.name, self.backlog
                ),
            }
        }
    }

    pub fn expect_line(&mut self, line: &str) {
        self.expect(line, |l| l == line);
    }

    /// The lines of the node's lock table.
    pub fn table(&mut self) -> Vec<String> {
        self.send("table");
        let mut table = Vec::new();
        loop {
            let line = self.expect("table", |l| l.starts_with("lock ") || l == "end-table");
            if line == "end-table" {
                return table;
            }
            table.push(line);
        }
    }

    /// Asks for the table until `done` holds on it (bounded by the deadline).
    pub fn wait_table(&mut self, what: &str, done: impl Fn(&[String]) -> bool) {
        loop {
            let table = self.table();
            if done(&table) {
                return;
            }
            self.deadline
                .check(|| format!("{}: {what}; table: {table:#?}", self.name));
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh directory under the system's temporary directory, removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("locks-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("a temporary directory");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether libfaketime's `faketime` can run a program here.
pub fn faketime() -> bool {
    Command::new("faketime")
        .args(["-f", "-1h", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// The `node` binary, under `faketime -f -1h` (its wall clock an hour behind) when `behind`.
pub fn node_command(behind: bool) -> Command {
    let node = env!("CARGO_BIN_EXE_node");
    if behind {
        let mut cmd = Command::new("faketime");
        cmd.args(["-f", "-1h", node]);
        cmd
    } else {
        Command::new(node)
    }
}
