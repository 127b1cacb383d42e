//! Three node processes (the `node` binary) on 127.0.0.1: take locks, kill one with SIGKILL, and
//! check that the others release its agents' locks, keep granting, and that `Majority` requests
//! stay exclusive. The nodes are driven through their stdin/stdout line protocol; blocking is
//! checked in the lock tables, never with timing. The whole test is bounded by `DEADLINE`.

mod common;

use common::Proc;
use locks_testing::wait::{Deadline, eventually};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(30);
const COOKIE: &str = "process-test";

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
    let deadline = Deadline::after(DEADLINE);
    let [mut n1, mut n2, mut n3] = Proc::start_three(["n1", "n2", "n3"], COOKIE, "info", deadline);
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
    // majority_alive on [n1, n3] with n3 dead: n1 is all of the live nodes, a majority of them
    // (a plain majority of two needs both).
    n1.send("lock a1 alive/m X n1,n3 majority_alive");
    n1.expect("a1 granted", |l| l.starts_with("granted a1 alive/m "));

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

/// SIGTERM (what `kill`, systemd and container runtimes send to stop a process) is a clean
/// stop: the node tells its peers to release its agents' locks before it closes its
/// connections, so they pass on at once. The survivor's lock-delay is ten minutes here, so only
/// the release can grant the lock before the deadline, not a SIGKILL-like end of the process.
#[test]
fn a_sigterm_stops_a_node_cleanly_and_its_locks_pass_on_at_once() {
    let deadline = Deadline::after(DEADLINE);
    let flags = [
        "--heartbeat-timeout-ms",
        "1000",
        "--lock-delay-ms",
        "600000",
        "--start-delay-ms",
        "0",
    ];
    let mut t1 = Proc::start_with("t1", &[], COOKIE, "info", deadline, &flags);
    let a1 = t1.listen_addr();
    let mut t2 = Proc::start_with("t2", &[a1], COOKIE, "info", deadline, &flags);
    t1.expect_line("up t2");
    t2.expect_line("up t1");
    // t2's transaction holds term/a on t1; t1's own transaction waits behind it.
    t2.send("lock k2 term/a X t1 all");
    t2.expect("k2 granted", |l| l.starts_with("granted k2 term/a "));
    t1.send("lock w1 term/a X t1 all");
    t1.wait_table("w1 waits", |t| waits(t, "term/a", "t1"));

    let pid = t2.child.id() as i32;
    // SAFETY: kill(2) with the pid of a child this test started and still owns.
    let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(sent, 0, "SIGTERM to t2");
    t1.expect("w1 granted", |l| l.starts_with("granted w1 term/a "));
    // And the process ends, cleanly.
    let mut status = None;
    eventually(deadline.left(), "t2 ends", || {
        status = t2.child.try_wait().expect("t2's status");
        status.is_some()
    });
    let status = status.expect("t2 ended");
    assert!(status.success(), "t2 ended with {status}");
}
