//! The `node` binary with TLS, as `docs/tls.md` runs it: `--gen-certs` writes a CA and a
//! certificate per node, three node processes on 127.0.0.1 started with `--tls-cert`,
//! `--tls-key` and `--tls-ca` connect, grant a lock on all three, and see a killed node go down.
//! The whole test is bounded by `DEADLINE`; nothing is timed.

mod common;

use common::Proc;
use locks_testing::wait::Deadline;
use std::process::Command;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(30);
const COOKIE: &str = "tls-process-test";

#[test]
fn three_tls_processes_from_generated_certificates() {
    let deadline = Deadline::after(DEADLINE);
    let dir = std::env::temp_dir().join(format!("node-tls-processes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let status = Command::new(env!("CARGO_BIN_EXE_node"))
        .arg("--gen-certs")
        .arg(&dir)
        .args(["--names", "t1,t2,t3"])
        .status()
        .expect("node --gen-certs runs");
    assert!(status.success(), "node --gen-certs failed: {status}");
    let flags = |name: &str| -> Vec<String> {
        let path = |file: String| dir.join(file).to_string_lossy().into_owned();
        vec![
            "--heartbeat-timeout-ms".to_owned(),
            "1000".to_owned(),
            "--tls-cert".to_owned(),
            path(format!("{name}.pem")),
            "--tls-key".to_owned(),
            path(format!("{name}.key")),
            "--tls-ca".to_owned(),
            path("ca.pem".to_owned()),
        ]
    };
    let mut n1 = Proc::start_with("t1", &[], COOKIE, "info", deadline, &flags("t1"));
    let a1 = n1.listen_addr();
    let mut n2 = Proc::start_with(
        "t2",
        std::slice::from_ref(&a1),
        COOKIE,
        "info",
        deadline,
        &flags("t2"),
    );
    let a2 = n2.listen_addr();
    let mut n3 = Proc::start_with("t3", &[a1, a2], COOKIE, "info", deadline, &flags("t3"));
    for (p, others) in [
        (&mut n1, ["t2", "t3"]),
        (&mut n2, ["t1", "t3"]),
        (&mut n3, ["t1", "t2"]),
    ] {
        for other in others {
            p.expect_line(&format!("up {other}"));
        }
    }
    n1.send("lock k1 tls/a X t1,t2,t3 all");
    n1.expect("k1 granted on all three", |l| {
        l.starts_with("granted k1 tls/a ") && ["t1@", "t2@", "t3@"].iter().all(|n| l.contains(n))
    });
    n3.child.kill().expect("kill t3");
    n1.expect_line("down t3");
    n2.expect_line("down t3");
    n1.send("end k1");
    n1.expect_line("ended k1");
    std::fs::remove_dir_all(&dir).unwrap();
}
