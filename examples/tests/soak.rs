//! A short soak of the client port's attacks (`examples::bench::soak`, the bench's SOAK row
//! runs the same for ten minutes) against a real `node` process on loopback: every good
//! client's lock+unlock is served throughout, and the node's resident memory ends within
//! 50 MB of where it started. The node is killed by pid when the test ends, also on failure.

mod common;

use common::Proc;
use examples::bench::soak::{TOKEN, soak};
use locks_testing::wait::Deadline;
use std::time::Duration;

/// How long the attacks run (the bench row's default is 600 s).
const SOAK: Duration = Duration::from_secs(40);

#[test]
fn the_client_ports_attacks_leave_good_clients_served_and_memory_returned() {
    let deadline = Deadline::after(Duration::from_secs(180));
    let (node, addr) = Proc::start_serving("soak", deadline, &["--client-token", TOKEN]);
    let addr = addr.parse().expect("an address");
    let pid = node.child.id();
    // Two workers, as the bench's driver: the attacks' tasks and the good clients share them.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let report = rt
        .block_on(async {
            tokio::time::timeout(deadline.left(), soak(addr, pid, SOAK))
                .await
                .expect("the soak ends within the test's deadline")
        })
        .expect("the soak runs");
    println!("{report:?}");
    assert!(report.attack_rounds > 0, "{report:?}");
    assert_eq!(report.failure(), None, "{report:?}");
}
