//! Three node processes (the `node` binary) on 127.0.0.1: take locks, kill one with SIGKILL, and
//! check that the others release its agents' locks, keep granting, and that `Majority` requests
//! stay exclusive. The nodes are driven through their stdin/stdout line protocol; blocking is
//! checked in the lock tables, never with timing. The whole test is bounded by `DEADLINE`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);
const COOKIE: &str = "process-test";

/// One node process and the lines it printed.
struct Proc {
    name: String,
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    /// Lines read but not consumed by an `expect`.
    backlog: Vec<String>,
    deadline: Instant,
}

impl Proc {
    fn start(name: &str, peers: &[String], deadline: Instant) -> Proc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_node"));
        cmd.args([
            "--name",
            name,
            "--listen",
            "127.0.0.1:0",
            "--cookie",
            COOKIE,
        ])
        .args(["--heartbeat-timeout-ms", "1000", "--exit-on-eof"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        for peer in peers {
            cmd.args(["--peer", peer]);
        }
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

    fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").expect("the node reads its stdin");
        self.stdin.flush().unwrap();
    }

    /// Waits for a line matching `pred` (earlier unmatched lines are kept) and returns it.
    fn expect(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        if let Some(i) = self.backlog.iter().position(|l| pred(l)) {
            return self.backlog.remove(i);
        }
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if pred(&line) => return line,
                Ok(line) => self.backlog.push(line),
                Err(_) => panic!(
                    "{}: no line for {what} (unconsumed: {:?})",
                    self.name, self.backlog
                ),
            }
        }
    }

    fn expect_line(&mut self, line: &str) {
        self.expect(line, |l| l == line);
    }

    /// The lines of the node's lock table.
    fn table(&mut self) -> Vec<String> {
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
    fn wait_table(&mut self, what: &str, done: impl Fn(&[String]) -> bool) {
        loop {
            let table = self.table();
            if done(&table) {
                return;
            }
            assert!(
                Instant::now() < self.deadline,
                "{}: {what} never happened; table: {table:#?}",
                self.name
            );
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

/// The table line of `lock`, if the lock exists.
fn lock_line<'a>(table: &'a [String], lock: &str) -> Option<&'a str> {
    let prefix = format!("lock {lock} ");
    table
        .iter()
        .find(|l| l.starts_with(&prefix))
        .map(String::as_str)
}

/// The `node@version` pairs at the end of a `granted` line.
fn fencing(granted: &str) -> Vec<(String, u64)> {
    let list = granted.rsplit(' ').next().unwrap_or("");
    list.split(',')
        .filter_map(|pair| {
            let (node, version) = pair.split_once('@')?;
            Some((node.to_owned(), version.parse().ok()?))
        })
        .collect()
}

/// Whether an agent of node `node` waits on `lock` (the part after `waiting=`).
fn waits(table: &[String], lock: &str, node: &str) -> bool {
    lock_line(table, lock).is_some_and(|l| {
        l.split("waiting=")
            .nth(1)
            .is_some_and(|w| w.contains(&format!("<{node}.")))
    })
}

#[test]
fn three_processes_survive_a_sigkill() {
    let deadline = Instant::now() + DEADLINE;
    let listen_addr = |p: &mut Proc| {
        p.expect("listening", |l| l.starts_with("listening "))
            .trim_start_matches("listening ")
            .to_owned()
    };
    let mut n1 = Proc::start("n1", &[], deadline);
    let a1 = listen_addr(&mut n1);
    let mut n2 = Proc::start("n2", std::slice::from_ref(&a1), deadline);
    let a2 = listen_addr(&mut n2);
    let mut n3 = Proc::start("n3", &[a1, a2], deadline);
    for (p, others) in [
        (&mut n1, ["n2", "n3"]),
        (&mut n2, ["n1", "n3"]),
        (&mut n3, ["n1", "n2"]),
    ] {
        for other in others {
            p.expect_line(&format!("up {other}"));
        }
    }

    // n3's transaction holds shared/a on n1 and n2, and a majority lock on all three.
    n3.send("lock k3 shared/a X n1,n2 all");
    let k3 = n3.expect("k3 granted", |l| l.starts_with("granted k3 shared/a "));
    n3.send("lock m3 maj/m X n1,n2,n3 majority");
    n3.expect("m3 granted", |l| l.starts_with("granted m3 maj/m "));
    // n1's transaction waits for shared/a behind it.
    n1.send("lock w1 shared/a X n1,n2 all");
    n1.wait_table("w1 waits", |t| waits(t, "shared/a", "n1"));

    // SIGKILL: no goodbye, the sockets just close.
    let _ = n3.child.kill();
    let _ = n3.child.wait();
    n1.expect_line("down n3");
    n2.expect_line("down n3");

    // n3's agents are released everywhere: n1's transaction gets shared/a.
    let w1 = n1.expect("w1 granted", |l| l.starts_with("granted w1 shared/a "));
    // Each node's fencing version grew with the new holder.
    let (k3, w1) = (fencing(&k3), fencing(&w1));
    assert_eq!(k3.len(), 2, "{k3:?}");
    for (node, version) in &k3 {
        let later = w1.iter().find(|(n, _)| n == node).map(|(_, v)| *v);
        assert!(later > Some(*version), "{node}: {k3:?} then {w1:?}");
    }
    for p in [&mut n1, &mut n2] {
        let table = p.table();
        assert!(
            table.iter().all(|l| !l.contains("<n3.")),
            "{}: no entry of n3's agents is left: {table:#?}",
            p.name
        );
    }
    // The survivors keep granting.
    n2.send("lock g2 other/b X n1,n2 all");
    n2.expect("g2 granted", |l| l.starts_with("granted g2 other/b "));

    // Majority on [n1, n2, n3] with n3 dead: n1 and n2 make a majority, for one holder at a
    // time.
    n1.send("lock m1 maj/m X n1,n2,n3 majority");
    n1.expect("m1 granted", |l| l.starts_with("granted m1 maj/m "));
    n2.send("lock m2 maj/m X n1,n2,n3 majority");
    n1.wait_table("m2 waits on n1", |t| waits(t, "maj/m", "n2"));
    n2.wait_table("m2 waits on n2", |t| waits(t, "maj/m", "n2"));
    n2.send("status m2");
    n2.expect_line("status m2 waiting");
    assert!(
        !n2.backlog.iter().any(|l| l.starts_with("granted m2")),
        "m2 was granted while m1 held the majority: {:?}",
        n2.backlog
    );
    n1.send("end m1");
    n1.expect_line("ended m1");
    n2.expect("m2 granted", |l| l.starts_with("granted m2 maj/m "));
    n1.send("quit");
    n2.send("quit");
    assert!(n1.child.wait().unwrap().success());
    assert!(n2.child.wait().unwrap().success());
}
