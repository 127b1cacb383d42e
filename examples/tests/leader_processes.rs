//! Leader election across node processes (the `node` binary) on 127.0.0.1: three processes run
//! a replica of a gdict dictionary each and agree on a leader; the leader's process is killed
//! with SIGKILL (no goodbye: its sockets just close), and the two survivors agree on a new
//! leader with a larger term, keep the dictionary's data and take writes. The processes are
//! driven through their stdin/stdout line protocol; the whole test is bounded by `DEADLINE`.

mod common;

use common::Proc;
use locks_testing::wait::Deadline;
use std::ops::{Deref, DerefMut};
use std::process::Command;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(60);
const COOKIE: &str = "leader-process-test";

/// One node process and the last leader it reported for `d`. Its `expect` notes the
/// `leader d ...` lines as they come instead of keeping them.
struct Member {
    proc: Proc,
    leader: Option<(String, u64)>,
}

impl Deref for Member {
    type Target = Proc;
    fn deref(&self) -> &Proc {
        &self.proc
    }
}

impl DerefMut for Member {
    fn deref_mut(&mut self) -> &mut Proc {
        &mut self.proc
    }
}

impl Member {
    /// Starts three members named `names` (see `Proc::start_three`).
    fn start_three(names: [&str; 3], deadline: Deadline) -> [Member; 3] {
        Proc::start_three(names, COOKIE, "warn", deadline).map(|proc| Member { proc, leader: None })
    }

    /// Starts three members named `names` and waits until each sees the other two up and has
    /// joined the dictionary `d` (in that order, one process after the other).
    fn start_joined(names: [&str; 3], deadline: Deadline) -> [Member; 3] {
        let mut members = Member::start_three(names, deadline);
        for (i, p) in members.iter_mut().enumerate() {
            for (_, other) in names.iter().enumerate().filter(|(j, _)| *j != i) {
                p.expect(other, |l| l == format!("up {other}"));
            }
            p.send("gdict d");
            p.expect("joined", |l| l == "joined d");
        }
        members
    }

    /// Notes a `leader d <node> <epoch>` line; keeps every other line.
    fn take(&mut self, line: String) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["leader", "d", "none"] => self.leader = None,
            ["leader", "d", node, epoch] => {
                self.leader = Some(((*node).to_owned(), epoch.parse().expect("an epoch")));
            }
            _ => self.proc.backlog.push(line),
        }
    }

    /// Reads what the process printed within `wait`.
    fn poll(&mut self, wait: Duration) {
        if let Ok(line) = self.proc.lines.recv_timeout(wait) {
            self.take(line);
        }
        while let Ok(line) = self.proc.lines.try_recv() {
            self.take(line);
        }
    }

    /// Waits for a line matching `pred` (other lines are kept) and returns it. (This, not
    /// `Proc::expect`, so that leader lines are noted while waiting.)
    fn expect(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        loop {
            if let Some(i) = self.backlog.iter().position(|l| pred(l)) {
                return self.proc.backlog.remove(i);
            }
            self.deadline.check(|| {
                format!(
                    "{}: a line for {what} (unconsumed: {:?})",
                    self.name, self.backlog
                )
            });
            self.poll(Duration::from_millis(20));
        }
    }
}

/// Waits until every process reports the same leader, satisfying `ok`; returns it.
fn agreed(procs: &mut [&mut Member], ok: impl Fn(&(String, u64)) -> bool) -> (String, u64) {
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
        procs[0].deadline.check(|| {
            let leaders: Vec<_> = procs.iter().map(|p| (&p.name, &p.leader)).collect();
            format!("an agreed leader: {leaders:?}")
        });
    }
}

/// The member named `leader`, and the other two in their order.
fn leader_and_others(members: [Member; 3], leader: &str) -> (Member, [Member; 2]) {
    let mut others = Vec::from(members);
    let at = others
        .iter()
        .position(|p| p.name == leader)
        .expect("the leader is one of the processes");
    let leader = others.remove(at);
    let others: [Member; 2] = others.try_into().ok().expect("two others");
    (leader, others)
}

/// Waits until `p`'s replica of `d` maps `key` to `value`.
fn eventually_value(p: &mut Member, key: &str, value: &str) {
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
    let deadline = Deadline::after(DEADLINE);
    let [mut n1, mut n2, mut n3] = Member::start_joined(["n1", "n2", "n3"], deadline);
    let (first, epoch) = agreed(&mut [&mut n1, &mut n2, &mut n3], |_| true);
    n1.send("store d k 7");
    n1.expect("stored", |l| l == "stored d k");
    for p in [&mut n1, &mut n2, &mut n3] {
        eventually_value(p, "k", "7");
    }

    // SIGKILL the leader's process.
    let (mut victim, [mut s1, mut s2]) = leader_and_others([n1, n2, n3], &first);
    let _ = victim.child.kill();
    let _ = victim.child.wait();
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
fn signal(p: &Member, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), p.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {}", p.name);
}

#[test]
fn a_hung_leader_process_is_replaced_after_the_heartbeat_timeout_and_rejoins() {
    let deadline = Deadline::after(DEADLINE);
    let [mut n1, mut n2, mut n3] = Member::start_joined(["h1", "h2", "h3"], deadline);
    let (first, epoch) = agreed(&mut [&mut n1, &mut n2, &mut n3], |_| true);
    let (mut frozen, [mut s1, mut s2]) = leader_and_others([n1, n2, n3], &first);

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
