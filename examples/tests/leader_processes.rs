//! Leader election across node processes (the `node` binary) on 127.0.0.1: three processes run
//! a replica of a gdict dictionary each and agree on a leader; the leader's process is killed
//! with SIGKILL (no goodbye: its sockets just close), and the two survivors agree on a new
//! leader with a larger term, keep the dictionary's data and take writes. The processes are
//! driven through their stdin/stdout line protocol; the whole test is bounded by `DEADLINE`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);
const COOKIE: &str = "leader-process-test";

/// One node process, the lines it printed, and the last leader it reported for `d`.
struct Proc {
    name: String,
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    backlog: Vec<String>,
    leader: Option<(String, u64)>,
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
        .env("RUST_LOG", "warn")
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
            leader: None,
            deadline,
        }
    }

    fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").expect("the node reads its stdin");
        self.stdin.flush().unwrap();
    }

    /// Notes a `leader d <node> <epoch>` line; keeps every other line.
    fn take(&mut self, line: String) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["leader", "d", "none"] => self.leader = None,
            ["leader", "d", node, epoch] => {
                self.leader = Some(((*node).to_owned(), epoch.parse().expect("an epoch")));
            }
            _ => self.backlog.push(line),
        }
    }

    /// Reads what the process printed within `wait`.
    fn poll(&mut self, wait: Duration) {
        if let Ok(line) = self.lines.recv_timeout(wait) {
            self.take(line);
        }
        while let Ok(line) = self.lines.try_recv() {
            self.take(line);
        }
    }

    /// Waits for a line matching `pred` (other lines are kept) and returns it.
    fn expect(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        loop {
            if let Some(i) = self.backlog.iter().position(|l| pred(l)) {
                return self.backlog.remove(i);
            }
            assert!(
                Instant::now() < self.deadline,
                "{}: no line for {what} (unconsumed: {:?})",
                self.name,
                self.backlog
            );
            self.poll(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until every process reports the same leader, satisfying `ok`; returns it.
fn agreed(procs: &mut [&mut Proc], ok: impl Fn(&(String, u64)) -> bool) -> (String, u64) {
    loop {
        for p in procs.iter_mut() {
            p.poll(Duration::from_millis(5));
        }
        let first = procs[0].leader.clone();
        if let Some(l) = &first
            && ok(l)
            && procs.iter().all(|p| p.leader.as_ref() == Some(l))
        {
            return l.clone();
        }
        assert!(
            Instant::now() < procs[0].deadline,
            "no agreed leader: {:?}",
            procs
                .iter()
                .map(|p| (&p.name, &p.leader))
                .collect::<Vec<_>>()
        );
    }
}

/// Waits until `p`'s replica of `d` maps `key` to `value`.
fn eventually_value(p: &mut Proc, key: &str, value: &str) {
    let want = format!("value d {key} {value}");
    loop {
        p.send(&format!("fetch d {key}"));
        let got = p.expect("value", |l| l.starts_with(&format!("value d {key} ")));
        if got == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_sigkilled_leader_process_is_replaced_by_one_with_a_larger_term() {
    let deadline = Instant::now() + DEADLINE;
    let listen = |p: &mut Proc| {
        p.expect("listening", |l| l.starts_with("listening "))
            .trim_start_matches("listening ")
            .to_owned()
    };
    let mut n1 = Proc::start("n1", &[], deadline);
    let a1 = listen(&mut n1);
    let mut n2 = Proc::start("n2", std::slice::from_ref(&a1), deadline);
    let a2 = listen(&mut n2);
    let mut n3 = Proc::start("n3", &[a1, a2], deadline);
    for (p, others) in [
        (&mut n1, ["n2", "n3"]),
        (&mut n2, ["n1", "n3"]),
        (&mut n3, ["n1", "n2"]),
    ] {
        for other in others {
            p.expect(other, |l| l == format!("up {other}"));
        }
        p.send("gdict d");
        p.expect("joined", |l| l == "joined d");
    }
    let (first, epoch) = agreed(&mut [&mut n1, &mut n2, &mut n3], |_| true);
    n1.send("store d k 7");
    n1.expect("stored", |l| l == "stored d k");
    for p in [&mut n1, &mut n2, &mut n3] {
        eventually_value(p, "k", "7");
    }

    // SIGKILL the leader's process.
    let mut procs = vec![n1, n2, n3];
    let dead = procs
        .iter()
        .position(|p| p.name == first)
        .expect("the leader is one of the processes");
    let mut victim = procs.remove(dead);
    let _ = victim.child.kill();
    let _ = victim.child.wait();
    let (mut s1, mut s2) = {
        let mut it = procs.into_iter();
        (it.next().unwrap(), it.next().unwrap())
    };
    for p in [&mut s1, &mut s2] {
        p.expect("down", |l| l == format!("down {first}"));
    }
    let (second, epoch2) = agreed(&mut [&mut s1, &mut s2], |(node, _)| node != &first);
    assert!(epoch2 > epoch, "{second}@{epoch2} after {first}@{epoch}");
    // The data survived the leader, and the new leader takes writes.
    for p in [&mut s1, &mut s2] {
        eventually_value(p, "k", "7");
    }
    s2.send("store d k2 8");
    s2.expect("stored", |l| l == "stored d k2");
    for p in [&mut s1, &mut s2] {
        eventually_value(p, "k2", "8");
    }
    s1.send("quit");
    s2.send("quit");
    assert!(s1.child.wait().unwrap().success());
    assert!(s2.child.wait().unwrap().success());
}

/// Sends `signal` (`STOP`, `CONT`) to a process with the `kill` command.
fn signal(p: &Proc, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), p.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {}", p.name);
}

#[test]
fn a_hung_leader_process_is_replaced_after_the_heartbeat_timeout_and_rejoins() {
    let deadline = Instant::now() + DEADLINE;
    let listen = |p: &mut Proc| {
        p.expect("listening", |l| l.starts_with("listening "))
            .trim_start_matches("listening ")
            .to_owned()
    };
    let mut n1 = Proc::start("h1", &[], deadline);
    let a1 = listen(&mut n1);
    let mut n2 = Proc::start("h2", std::slice::from_ref(&a1), deadline);
    let a2 = listen(&mut n2);
    let mut n3 = Proc::start("h3", &[a1, a2], deadline);
    for (p, others) in [
        (&mut n1, ["h2", "h3"]),
        (&mut n2, ["h1", "h3"]),
        (&mut n3, ["h1", "h2"]),
    ] {
        for other in others {
            p.expect(other, |l| l == format!("up {other}"));
        }
        p.send("gdict d");
        p.expect("joined", |l| l == "joined d");
    }
    let (first, epoch) = agreed(&mut [&mut n1, &mut n2, &mut n3], |_| true);
    let mut procs = vec![n1, n2, n3];
    let hung = procs
        .iter()
        .position(|p| p.name == first)
        .expect("the leader is one of the processes");
    let mut frozen = procs.remove(hung);
    let (mut s1, mut s2) = {
        let mut it = procs.into_iter();
        (it.next().unwrap(), it.next().unwrap())
    };

    // The leader hangs: its connections stay open, but it answers nothing. The others declare
    // it down when its heartbeats stop, and elect a new leader.
    signal(&frozen, "STOP");
    for p in [&mut s1, &mut s2] {
        p.expect("down", |l| l == format!("down {first}"));
    }
    let (second, epoch2) = agreed(&mut [&mut s1, &mut s2], |(node, _)| node != &first);
    assert!(epoch2 > epoch, "{second}@{epoch2} after {first}@{epoch}");
    s1.send("store d while_hung 1");
    s1.expect("stored", |l| l == "stored d while_hung");

    // It wakes up, finds itself cut off, reconnects: one leader for all three again, and its
    // replica gets what was written while it hung.
    signal(&frozen, "CONT");
    let (third, _) = agreed(&mut [&mut s1, &mut s2, &mut frozen], |_| true);
    for p in [&mut s1, &mut s2, &mut frozen] {
        eventually_value(p, "while_hung", "1");
    }
    assert!(!third.is_empty());
    for p in [&mut s1, &mut s2, &mut frozen] {
        p.send("quit");
    }
    for p in [&mut s1, &mut s2, &mut frozen] {
        assert!(p.child.wait().unwrap().success());
    }
}
