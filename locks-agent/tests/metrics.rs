//! What transactions record through the `metrics` facade, on their node's handles: a deadlock
//! is counted once (detected, resolved, one surrender), the lock its victim gave up is counted
//! lost with its cause, an abort on deadlock counts as an abort and its losses as `aborted`,
//! and transactions begun and ended, the wait of a lock that waited and the sampled gauges
//! follow. Each test registers its node's handles with a recorder of its own
//! (`locks_testing::recorded`); every wait is bounded.

use locks_agent::{LossCause, Options, begin_transaction};
use locks_core::{Mode, lock_id};
use locks_server::metrics::{
    ABORTS, DEADLOCKS_DETECTED, DEADLOCKS_RESOLVED, GRANTED, LOST, SURRENDERS, TRANSACTIONS_BEGUN,
    TRANSACTIONS_ENDED, WAIT_SECONDS, WAITING,
};
use locks_server::{Node, NodeConfig};
use locks_testing::recorded::Recorded;
use locks_testing::wait::{runtime, until, within};
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(20);

/// Starts node `name` on `rt`, its handles registered with `recorded`.
fn start(rt: &tokio::runtime::Runtime, recorded: &Recorded, name: &str) -> Node {
    let config = NodeConfig::new(name);
    recorded.scope(|| {
        rt.block_on(within(BOUND, "start", Node::start(config)))
            .unwrap()
    })
}

/// Two transactions that deadlock on two locks, the second (larger) the victim; returns what
/// the victim was told it lost.
async fn deadlock(node: &Node, victim_options: Options) -> locks_agent::LostLock {
    let (l1, l2) = (lock_id!["m", 1], lock_id!["m", 2]);
    let a = begin_transaction(node, Options::default()).await.unwrap();
    let b = begin_transaction(node, victim_options).await.unwrap();
    within(BOUND, "a locks l1", a.lock(l1.clone(), Mode::WRITE))
        .await
        .unwrap();
    within(BOUND, "b locks l2", b.lock(l2.clone(), Mode::WRITE))
        .await
        .unwrap();
    // The victim's `lost` call reaches its agent before the deadlock exists: an agent that
    // aborts ends with its transaction, and a call that comes after that fails (`Deadlock`).
    let mut b_lost = Box::pin(b.lost());
    assert!(futures::poll!(&mut b_lost).is_pending());
    within(BOUND, "b's agent has the call", b.status())
        .await
        .unwrap();
    let a_waits = a.lock(l2.clone(), Mode::WRITE);
    let b_waits = b.lock(l1.clone(), Mode::WRITE);
    let lost = within(BOUND, "b loses l2", b_lost).await.unwrap();
    within(BOUND, "a gets l2", a_waits).await.unwrap();
    a.end().await.unwrap();
    // The victim that surrendered gets both back; one that aborted fails.
    let _ = within(BOUND, "b's call ends", b_waits).await;
    drop(b);
    lost
}

#[test]
fn a_deadlock_is_counted_once_and_the_surrendered_lock_as_lost() {
    let rt = runtime();
    let mut recorded = Recorded::new();
    let node = start(&rt, &recorded, "md");
    let lost = rt.block_on(deadlock(&node, Options::default()));
    assert_eq!(lost.cause, LossCause::Surrendered);
    let n = [("node", "md")];
    assert_eq!(recorded.counter(DEADLOCKS_RESOLVED, &n), 1);
    // The victim probes before it gives way; it may probe again if its views changed meanwhile.
    assert!(recorded.counter(DEADLOCKS_DETECTED, &n) >= 1);
    let kind = |k| [("node", "md"), ("kind", k)];
    assert_eq!(recorded.counter(SURRENDERS, &kind("deadlock")), 1);
    assert_eq!(recorded.counter(SURRENDERS, &kind("voluntary")), 0);
    assert_eq!(recorded.counter(ABORTS, &n), 0);
    for cause in locks_server::metrics::LOST_CAUSES {
        let expected = u64::from(cause == "surrendered");
        let labels = [("node", "md"), ("cause", cause)];
        assert_eq!(recorded.counter(LOST, &labels), expected, "{cause}");
    }
    assert_eq!(recorded.counter(TRANSACTIONS_BEGUN, &n), 2);
    assert_eq!(recorded.counter(TRANSACTIONS_ENDED, &n), 2);
    // Both waiting calls went through the agents and were granted.
    assert_eq!(recorded.histogram_count(WAIT_SECONDS, &n), 2);
    assert!(recorded.description(DEADLOCKS_RESOLVED).is_some());
    rt.block_on(node.shutdown());
}

#[test]
fn an_abort_on_deadlock_is_counted_with_its_losses() {
    let rt = runtime();
    let mut recorded = Recorded::new();
    let node = start(&rt, &recorded, "ma");
    let options = Options {
        abort_on_deadlock: true,
        ..Options::default()
    };
    let lost = rt.block_on(deadlock(&node, options));
    assert_eq!(lost.cause, LossCause::Aborted);
    let n = [("node", "ma")];
    assert_eq!(recorded.counter(ABORTS, &n), 1);
    assert_eq!(recorded.counter(DEADLOCKS_RESOLVED, &n), 1);
    assert_eq!(
        recorded.counter(SURRENDERS, &[("node", "ma"), ("kind", "deadlock")]),
        0
    );
    assert_eq!(
        recorded.counter(LOST, &[("node", "ma"), ("cause", "aborted")]),
        1
    );
    rt.block_on(node.shutdown());
}

#[test]
fn the_gauges_sample_held_and_waiting_entries_per_mode() {
    let rt = runtime();
    let mut recorded = Recorded::new();
    let node = start(&rt, &recorded, "mg");
    rt.block_on(async {
        let a = begin_transaction(&node, Options::default()).await.unwrap();
        let b = begin_transaction(&node, Options::default()).await.unwrap();
        within(BOUND, "a locks", a.lock(lock_id!["g"], Mode::WRITE))
            .await
            .unwrap();
        let b_waits = b.lock(lock_id!["g"], Mode::READ);
        let x = [("node", "mg"), ("mode", "X")];
        let s = [("node", "mg"), ("mode", "S")];
        // A read takes the sampled value (and the recorder resets it): one gauge per read.
        until(BOUND, "one X granted", POLL, || {
            let seen = recorded.gauge(GRANTED, &x);
            async move { seen == 1.0 }
        })
        .await;
        until(BOUND, "one S waiting", POLL, || {
            let seen = recorded.gauge(WAITING, &s);
            async move { seen == 1.0 }
        })
        .await;
        a.end().await.unwrap();
        within(BOUND, "b gets it", b_waits).await.unwrap();
        b.end().await.unwrap();
        node.shutdown().await;
    });
}

/// Every loss cause has a `cause` series of its own: a new `LossCause` fails to build here
/// (the match has no catch-all) until it is named, and then fails until `LOST_CAUSES` lists it
/// (else its losses would be counted as `revoked`).
#[test]
fn every_loss_cause_has_a_series() {
    let every = |cause: LossCause| match cause {
        LossCause::NodeDown
        | LossCause::LeaseExpired
        | LossCause::Surrendered
        | LossCause::Aborted
        | LossCause::Revoked => cause.name(),
    };
    let causes = [
        LossCause::NodeDown,
        LossCause::LeaseExpired,
        LossCause::Surrendered,
        LossCause::Aborted,
        LossCause::Revoked,
    ];
    for cause in causes {
        assert!(
            locks_server::metrics::LOST_CAUSES.contains(&every(cause)),
            "{cause} has no series of its own in LOST_CAUSES"
        );
    }
    assert_eq!(locks_server::metrics::LOST_CAUSES.len(), causes.len());
}
