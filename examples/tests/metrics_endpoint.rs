//! The node binary's `--metrics` endpoint, end to end: a node started with
//! `--metrics 127.0.0.1:0` prints where it serves, `/metrics` answers a plain HTTP/1.1 GET on
//! loopback with the Prometheus text format, and after a workload on the node's stdin (two
//! transactions, then two that deadlock) the counters moved by exactly what the workload did;
//! with a peer connected, the peers-up gauge, the link's counters and its round trip follow. Every wait
//! ends at the test's deadline; the processes are killed when the test ends, also on failure.

mod common;

use common::Proc;
use locks_testing::wait::Deadline;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const COOKIE: &str = "metrics-cookie";

/// `GET /metrics` on `addr`; the samples of the body by `name{labels}` as printed.
fn scrape(addr: SocketAddr, deadline: &Deadline) -> HashMap<String, f64> {
    let mut stream = TcpStream::connect_timeout(&addr, deadline.left()).expect("connects");
    stream.set_read_timeout(Some(deadline.left())).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain"), "{head}");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The value of `key` (`name{labels}` as the exporter prints it), 0 if absent.
fn value(samples: &HashMap<String, f64>, key: &str) -> f64 {
    samples.get(key).copied().unwrap_or(0.0)
}

/// Scrapes until `done` holds on the samples, up to the deadline.
fn scrape_until(
    addr: SocketAddr,
    deadline: &Deadline,
    what: &str,
    done: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    loop {
        let samples = scrape(addr, deadline);
        if done(&samples) {
            return samples;
        }
        deadline.check(|| format!("{what}; samples: {samples:#?}"));
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn metrics_addr(node: &mut Proc) -> SocketAddr {
    node.expect("metrics", |l| l.starts_with("metrics "))
        .trim_start_matches("metrics ")
        .parse()
        .expect("an address")
}

#[test]
fn the_endpoint_counts_a_workload_and_a_deadlock() {
    let deadline = Deadline::after(Duration::from_secs(60));
    let extra = ["--heartbeat-timeout-ms", "1000", "--metrics", "127.0.0.1:0"];
    let mut n1 = Proc::start_with("n1", &[], COOKIE, "warn", deadline, &extra);
    let at = metrics_addr(&mut n1);
    let listen = n1.listen_addr();
    let before = scrape(at, &deadline);
    let key = |name: &str, labels: &str| format!("{name}{{node=\"n1\"{labels}}}");
    let begun = key("locks_transactions_begun_total", "");
    let ended = key("locks_transactions_ended_total", "");
    assert_eq!(value(&before, &begun), 0.0, "{before:#?}");

    // Two transactions, each a lock and an end.
    n1.send("lock t1 a/b");
    n1.expect("t1 granted", |l| l.starts_with("granted t1 a/b"));
    n1.send("lock t2 a/c S");
    n1.expect("t2 granted", |l| l.starts_with("granted t2 a/c"));
    n1.send("end t1");
    n1.expect_line("ended t1");
    n1.send("end t2");
    n1.expect_line("ended t2");

    // A deadlock: t4 (the larger agent) is the victim and surrenders d/2.
    n1.send("lock t3 d/1");
    n1.expect("t3 d/1", |l| l.starts_with("granted t3 d/1"));
    n1.send("lock t4 d/2");
    n1.expect("t4 d/2", |l| l.starts_with("granted t4 d/2"));
    n1.send("lock t3 d/2");
    n1.send("lock t4 d/1");
    n1.expect("t4 loses d/2", |l| {
        l.starts_with("lost t4 d/2") && l.ends_with("surrendered")
    });
    n1.expect("t3 d/2", |l| l.starts_with("granted t3 d/2"));
    n1.send("end t3");
    n1.expect_line("ended t3");
    n1.expect("t4 d/1", |l| l.starts_with("granted t4 d/1"));
    n1.send("end t4");
    n1.expect_line("ended t4");

    // Handles are dropped by tasks of the binary a little after `ended`: wait for all four.
    let after = scrape_until(at, &deadline, "four transactions ended", |s| {
        value(s, &ended) >= 4.0
    });
    let moved = |k: &str| value(&after, k) - value(&before, k);
    assert_eq!(moved(&begun), 4.0);
    assert_eq!(moved(&ended), 4.0);
    assert_eq!(moved(&key("locks_deadlocks_resolved_total", "")), 1.0);
    assert!(moved(&key("locks_deadlocks_detected_total", "")) >= 1.0);
    let surrenders = key("locks_surrenders_total", ",kind=\"deadlock\"");
    assert_eq!(moved(&surrenders), 1.0, "{after:#?}");
    let lost = |cause: &str| key("locks_lost_total", &format!(",cause=\"{cause}\""));
    assert_eq!(moved(&lost("surrendered")), 1.0);
    assert_eq!(moved(&lost("node-down")), 0.0);
    assert_eq!(moved(&key("locks_aborts_total", "")), 0.0);
    // Nothing is held any more (sampled once a second).
    scrape_until(at, &deadline, "nothing granted", |s| {
        value(s, &key("locks_granted", ",mode=\"X\"")) == 0.0
    });

    // A peer: the gauge of peers up and the link's counters follow.
    let mut n2 = Proc::start(
        "n2",
        std::slice::from_ref(&listen),
        COOKIE,
        "warn",
        deadline,
    );
    n1.expect_line("up n2");
    n2.expect_line("up n1");
    let bytes = key(
        "locks_link_bytes_total",
        ",peer=\"n2\",direction=\"received\"",
    );
    scrape_until(at, &deadline, "one peer up, bytes from it", |s| {
        value(s, &key("locks_peers_up", "")) == 1.0 && value(s, &bytes) > 0.0
    });
    // A lock on both nodes sends envelopes to n2; the heartbeat measures a round trip.
    n1.send("lock t5 x X n1,n2");
    n1.expect("t5 x", |l| l.starts_with("granted t5 x"));
    let sent = key(
        "locks_link_messages_total",
        ",peer=\"n2\",direction=\"sent\"",
    );
    let rtts = key("locks_link_rtt_seconds_count", ",peer=\"n2\"");
    scrape_until(at, &deadline, "messages to n2 and a round trip", |s| {
        value(s, &sent) > 0.0 && value(s, &rtts) > 0.0
    });
}

#[test]
fn a_bad_metrics_address_is_a_clear_error() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_node"))
        .args([
            "--name",
            "bad",
            "--metrics",
            "not-an-address",
            "--exit-on-eof",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the node binary runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad metrics address"), "{stderr}");
}

#[test]
fn idle_sockets_held_open_do_not_keep_a_scraper_out() {
    let deadline = Deadline::after(Duration::from_secs(30));
    let extra = ["--metrics", "127.0.0.1:0"];
    let mut n1 = Proc::start_with("n1", &[], COOKIE, "warn", deadline, &extra);
    let addr = metrics_addr(&mut n1);
    // Three times the endpoint's connections, connected and silent, kept open.
    let idle: Vec<TcpStream> = (0..48)
        .map(|_| TcpStream::connect_timeout(&addr, deadline.left()).expect("connects"))
        .collect();
    for _ in 0..10 {
        let samples = scrape(addr, &deadline);
        assert!(
            samples
                .keys()
                .any(|k| k.starts_with("locks_transactions_begun_total"))
        );
    }
    drop(idle);
}

#[test]
fn link_series_are_shown_for_the_peers_connected_now() {
    let deadline = Deadline::after(Duration::from_secs(60));
    let extra = ["--heartbeat-timeout-ms", "1000", "--metrics", "127.0.0.1:0"];
    let mut n1 = Proc::start_with("n1", &[], COOKIE, "warn", deadline, &extra);
    let at = metrics_addr(&mut n1);
    let listen = n1.listen_addr();
    let names = ["p1", "p2", "p3", "p4", "p5"];
    let mut peers: Vec<Option<Proc>> = names
        .iter()
        .map(|name| {
            let peer = Proc::start(
                name,
                std::slice::from_ref(&listen),
                COOKIE,
                "warn",
                deadline,
            );
            n1.expect_line(&format!("up {name}"));
            Some(peer)
        })
        .collect();
    let heard_from = |s: &HashMap<String, f64>, name: &str| {
        let key =
            format!("locks_link_bytes_total{{node=\"n1\",peer=\"{name}\",direction=\"received\"}}");
        value(s, &key) > 0.0
    };
    scrape_until(at, &deadline, "every peer's link series", |s| {
        names.iter().all(|name| heard_from(s, name))
    });
    // Three leave (killed by pid when their `Proc` drops); the node declares them down.
    for i in [0, 2, 4] {
        peers[i] = None;
        n1.expect_line(&format!("down {}", names[i]));
    }
    let shown = scrape_until(at, &deadline, "the series of the peers still up", |s| {
        heard_from(s, "p2") && heard_from(s, "p4")
    });
    let with_peer: Vec<&String> = shown.keys().filter(|k| k.contains("peer=")).collect();
    for gone in ["p1", "p3", "p5"] {
        let label = format!("peer=\"{gone}\"");
        assert!(
            with_peer.iter().all(|k| !k.contains(&label)),
            "{gone} left, yet: {with_peer:#?}"
        );
    }
    // A peer that comes back shows its series again.
    peers[0] = Some(Proc::start("p1", &[listen], COOKIE, "warn", deadline));
    n1.expect_line("up p1");
    scrape_until(at, &deadline, "p1's series again", |s| heard_from(s, "p1"));
}
