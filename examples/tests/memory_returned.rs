//! A `node` process gives memory back when its clients let go: sessions that held many locks
//! end, and the node's resident memory (VmRSS from /proc/PID/status) comes back near where it
//! was before them; many header-only calls (half-open: a call's headers, never its body) are
//! bounded while open and their memory returned when their connections close. Every wait is
//! bounded and polls for the outcome; the node is killed by pid when the test ends, also on
//! failure (`Proc`'s drop).

mod common;

use common::Proc;
use futures::SinkExt;
use locks_grpc::client::LockSpec;
use locks_grpc::pb;
use locks_testing::wait::Deadline;
use std::net::IpAddr;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(120);

/// How far above its baseline the node's memory may stay once its clients are gone. What the
/// test makes the node hold is several times more (`HELD`).
const RETURNED_WITHIN_KB: u64 = 25 * 1024;

/// The same for half-open calls: their buffers are freed as whole pages.
const HALF_OPEN_RETURNED_WITHIN_KB: u64 = 12 * 1024;

/// What the sessions must make the node hold at their peak for the test to mean anything.
const HELD_KB: u64 = 60 * 1024;

/// The node's resident memory, in KiB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the node runs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

/// Polls the node's memory until it is at most `ceiling_kb` (bounded by `deadline`); the
/// smallest value seen if it never gets there, as the panic says.
fn wait_rss_at_most(pid: u32, ceiling_kb: u64, deadline: Deadline, what: &str) -> u64 {
    let mut least = u64::MAX;
    loop {
        let now = rss_kb(pid);
        least = least.min(now);
        if now <= ceiling_kb {
            return now;
        }
        deadline.check(|| format!("{what}: VmRSS {least} kB at least, want <= {ceiling_kb} kB"));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A node serving clients on an ephemeral loopback port, and that port's address.
fn node(name: &str, deadline: Deadline) -> (Proc, String) {
    Proc::start_serving(name, deadline, &[])
}

/// A connection to `addr` from the loopback address `local`.
async fn channel(addr: &str, local: IpAddr) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .local_address(Some(local))
        .connect()
        .await
        .unwrap()
}

/// Opens a session on `channel` and takes `count` locks in it, the requests pipelined;
/// returns the session's request sender and its events (the session ends when both are
/// dropped).
async fn hold_locks(
    channel: tonic::transport::Channel,
    tag: usize,
    count: u64,
    pad: &str,
) -> (
    futures::channel::mpsc::Sender<pb::SessionRequest>,
    tonic::Streaming<pb::SessionEvent>,
) {
    let mut client = pb::locks_client::LocksClient::new(channel);
    let (mut tx, rx) = futures::channel::mpsc::channel(64);
    let mut events = client.session(rx).await.unwrap().into_inner();
    let mut sender = tx.clone();
    let pad = pad.to_owned();
    let sending = tokio::spawn(async move {
        for i in 1..=count {
            let path = format!("mem/{tag}/{i}{pad}");
            let request = pb::SessionRequest {
                request_id: i,
                kind: Some(pb::session_request::Kind::Lock(LockSpec::new(&path, "X").0)),
            };
            sender.send(request).await.unwrap();
        }
    });
    let mut granted = 0;
    while granted < count {
        let event = events
            .message()
            .await
            .unwrap()
            .expect("the session goes on");
        match event.kind {
            Some(pb::session_event::Kind::Locked(_)) => granted += 1,
            Some(pb::session_event::Kind::Error(e)) => panic!("lock refused: {e:?}"),
            _ => {}
        }
    }
    sending.await.unwrap();
    tx.flush().await.unwrap();
    (tx, events)
}

#[test]
fn memory_of_ended_sessions_is_given_back() {
    let deadline = Deadline::after(BOUND);
    let (node, addr) = node("mem", deadline);
    let pid = node.child.id();
    let rt = locks_testing::wait::runtime();
    // A first session, so that what every session needs once (the runtime's buffers, the
    // agent's) is in the baseline.
    rt.block_on(async {
        let session = hold_locks(channel(&addr, [127, 0, 0, 1].into()).await, 0, 16, "").await;
        drop(session);
    });
    let baseline = rss_kb(pid);
    // Four addresses, a session each, 16,384 locks of ~400-byte ids per session.
    let pad = format!("/{}", "p".repeat(400));
    let sessions = rt.block_on(async {
        let mut sessions = Vec::new();
        for tag in 1..=4usize {
            let local: IpAddr = [127, 0, 0, tag as u8].into();
            sessions.push(hold_locks(channel(&addr, local).await, tag, 16_384, &pad).await);
        }
        sessions
    });
    let peak = rss_kb(pid);
    assert!(
        peak >= baseline + HELD_KB,
        "the sessions held too little to tell: VmRSS {baseline} kB -> {peak} kB"
    );
    // The client's side closed: its runtime is shut down with the connections it drives (a
    // runtime left undriven would leave them open until the node's keepalive gave up on them).
    drop(sessions);
    drop(rt);
    let after = wait_rss_at_most(
        pid,
        baseline + RETURNED_WITHIN_KB,
        deadline,
        "memory given back after the sessions ended",
    );
    println!("VmRSS: baseline {baseline} kB, peak {peak} kB, after the sessions {after} kB");
}

#[test]
fn half_open_calls_are_bounded_and_given_back() {
    let deadline = Deadline::after(BOUND);
    let (node, addr) = node("half", deadline);
    let pid = node.child.id();
    let rt = locks_testing::wait::runtime();
    let baseline = rss_kb(pid);
    // Session calls whose request stream never sends a message (a call's headers, never its
    // body) from twelve addresses, each past its bound of 256 sessions.
    let (open, refused, peak) = rt.block_on(async {
        let mut open = Vec::new();
        let mut refused = 0;
        for host in 1..=12u8 {
            let ch = channel(&addr, [127, 0, 1, host].into()).await;
            for _ in 0..300 {
                let mut client = pb::locks_client::LocksClient::new(ch.clone());
                let (tx, rx) = futures::channel::mpsc::channel::<pb::SessionRequest>(1);
                match client.session(rx).await {
                    Ok(events) => open.push((tx, events.into_inner())),
                    Err(status) => {
                        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                        refused += 1;
                    }
                }
            }
        }
        (open, refused, rss_kb(pid))
    });
    // Each address's calls past its bound were refused, naming it.
    assert_eq!(open.len(), 12 * 256, "refused {refused}");
    assert!(
        peak <= baseline + 100 * 1024,
        "3,072 half-open calls: VmRSS {baseline} kB -> {peak} kB"
    );
    drop(open);
    drop(rt);
    let after = wait_rss_at_most(
        pid,
        baseline + HALF_OPEN_RETURNED_WITHIN_KB,
        deadline,
        "memory given back after the half-open calls' connections closed",
    );
    println!("VmRSS: baseline {baseline} kB, peak {peak} kB, after the connections {after} kB");
}
