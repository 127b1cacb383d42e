//! The lease rule's decisions, each as a pure function of its inputs.

use super::*;

const MS: Duration = Duration::from_millis(1);

fn heartbeat(interval_ms: u64, timeout_ms: u64) -> HeartbeatConfig {
    HeartbeatConfig {
        interval: MS * interval_ms as u32,
        timeout: MS * timeout_ms as u32,
        ..HeartbeatConfig::default()
    }
}

#[test]
fn defaults_follow_the_heartbeat_timeout_and_cover_the_drift() {
    let l = LeaseConfig::default()
        .resolve(&heartbeat(500, 2000))
        .unwrap();
    assert_eq!(l.lease, 1500 * MS);
    assert_eq!(l.lock_delay, 2000 * MS);
    assert_eq!(l.start_delay, l.lock_delay);
    for timeout in [4, 10, 100, 2000, 60_000] {
        let l = LeaseConfig::default()
            .resolve(&heartbeat(timeout / 4, timeout))
            .unwrap();
        assert!(l.lock_delay >= l.lease + l.lease / 100, "timeout {timeout}");
    }
}

#[test]
fn a_lock_delay_shorter_than_the_lease_and_drift_is_refused() {
    let c = LeaseConfig {
        lease: Some(1000 * MS),
        lock_delay: Some(1005 * MS),
        start_delay: None,
    };
    assert_eq!(
        c.resolve(&heartbeat(250, 2000)),
        Err(LeaseError::LockDelayTooShort {
            lock_delay: 1005 * MS,
            needed: 1010 * MS
        })
    );
}

#[test]
fn a_lease_that_would_expire_between_pings_is_refused() {
    let c = LeaseConfig {
        lease: Some(200 * MS),
        ..LeaseConfig::default()
    };
    assert!(matches!(
        c.resolve(&heartbeat(250, 2000)),
        Err(LeaseError::LeaseTooShort { .. })
    ));
}

#[test]
fn an_expired_lease_stays_expired() {
    let t0 = Instant::now();
    let cell = LeaseCell::new(t0 + 100 * MS);
    assert!(cell.valid(t0 + 99 * MS));
    assert!(cell.renew(t0 + 300 * MS).is_ok());
    assert!(cell.valid(t0 + 299 * MS));
    assert!(!cell.valid(t0 + 300 * MS));
    assert_eq!(cell.renew(t0 + 900 * MS), Err(Expired));
    assert!(
        !cell.valid(t0 + 301 * MS),
        "a renewal after expiry revives nothing"
    );
    assert!(cell.is_expired());
}

#[test]
fn a_lease_whose_link_ended_did_not_run_out_and_the_first_end_stands() {
    let t0 = Instant::now();
    let ended = LeaseCell::new(t0 + 100 * MS);
    ended.end();
    assert!(!ended.valid(t0 + 10 * MS));
    assert!(ended.is_expired() && !ended.ran_out());
    assert_eq!(ended.renew(t0 + 900 * MS), Err(Expired));
    // Seen past its time afterwards: still a link that ended.
    assert!(!ended.valid(t0 + 200 * MS));
    assert!(!ended.ran_out());

    let ran_out = LeaseCell::new(t0 + 100 * MS);
    assert!(!ran_out.valid(t0 + 100 * MS));
    ran_out.end();
    assert!(
        ran_out.ran_out(),
        "the link's end after the expiry changes nothing"
    );
}

#[test]
fn renewing_never_shortens() {
    let t0 = Instant::now();
    let cell = LeaseCell::new(t0 + 100 * MS);
    cell.renew(t0 + 50 * MS).unwrap();
    assert!(cell.valid(t0 + 99 * MS));
}

#[test]
fn only_the_end_of_a_peers_current_link_is_a_node_down_and_a_lease_run_out_says_so() {
    assert_eq!(link_ended(false, true), None);
    assert_eq!(link_ended(false, false), None);
    assert_eq!(link_ended(true, true), Some(DownCause::LeaseExpired));
    assert_eq!(link_ended(true, false), Some(DownCause::Disconnected));
}

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

#[test]
fn a_node_with_a_lock_delay_hands_a_downed_peers_locks_to_ghosts_for_it() {
    let delays = NodeDelays {
        lock_delay: 2000 * MS,
        start_delay: 3000 * MS,
    };
    assert_eq!(delays.start_hold(), Some(3000 * MS));
    assert_eq!(
        delays.node_down(&node("a"), &node("b")),
        Some(DownedLocks::ToGhosts)
    );
    assert_eq!(
        delays.node_down(&node("a"), &node("a")),
        None,
        "never down to itself"
    );
    let ghosts = [AgentId::ghost(node("b"), 7)];
    assert_eq!(delays.ghosts_released_after(&ghosts), Some(2000 * MS));
    assert_eq!(delays.ghosts_released_after(&[]), None);
}

#[test]
fn a_node_without_delays_grants_at_once_and_releases_a_downed_peers_locks_at_once() {
    let delays = NodeDelays::default();
    assert_eq!(delays.start_hold(), None);
    assert_eq!(
        delays.node_down(&node("a"), &node("b")),
        Some(DownedLocks::Released)
    );
}

#[test]
fn a_claim_stands_only_while_the_lease_is_valid_and_says_why_it_fell() {
    assert_eq!(claim_lost(Lease::Valid), None);
    assert_eq!(claim_lost(Lease::RanOut), Some(LossCause::LeaseExpired));
    assert_eq!(claim_lost(Lease::Ended), Some(LossCause::NodeDown));
    assert_eq!(loss_cause(DownCause::LeaseExpired), LossCause::LeaseExpired);
    assert_eq!(loss_cause(DownCause::Disconnected), LossCause::NodeDown);
}

fn times(t0: Instant) -> LinkTimes {
    LinkTimes {
        created: t0,
        last_heard: t0,
        last_ping: None,
        proved: t0,
        grid: None,
    }
}

fn leased(interval_ms: u64, timeout_ms: u64, lease_ms: u64) -> HeartbeatConfig {
    HeartbeatConfig {
        lease: Some(MS * lease_ms as u32),
        ..heartbeat(interval_ms, timeout_ms)
    }
}

#[test]
fn a_link_without_a_lease_pings_after_an_interval_of_silence_and_is_down_after_the_timeout() {
    let c = heartbeat(500, 2000);
    let t0 = Instant::now();
    let mut t = times(t0);
    assert_eq!(link_verdict(&c, &t, t0 + 499 * MS), LinkVerdict::Idle);
    assert_eq!(next_verdict_at(&c, &t), t0 + 500 * MS);
    assert_eq!(link_verdict(&c, &t, t0 + 500 * MS), LinkVerdict::Ping);
    t.last_ping = Some(t0 + 500 * MS);
    assert_eq!(link_verdict(&c, &t, t0 + 999 * MS), LinkVerdict::Idle);
    assert_eq!(link_verdict(&c, &t, t0 + 1000 * MS), LinkVerdict::Ping);
    // Heard from: no ping while it talks.
    t.last_heard = t0 + 900 * MS;
    assert_eq!(link_verdict(&c, &t, t0 + 1000 * MS), LinkVerdict::Idle);
    assert_eq!(
        link_verdict(&c, &t, t0 + 2900 * MS),
        LinkVerdict::Silent {
            silent_for: 2000 * MS
        }
    );
    assert_eq!(lease_deadline(&c, t0), None);
}

#[test]
fn a_leased_link_pings_every_interval_and_its_lease_runs_out_though_the_peer_is_heard() {
    let c = leased(500, 2000, 1500);
    let t0 = Instant::now();
    let mut t = times(t0);
    assert_eq!(link_verdict(&c, &t, t0 + 500 * MS), LinkVerdict::Ping);
    t.last_ping = Some(t0 + 500 * MS);
    // The peer keeps talking (a one-way partition: our pings go unanswered).
    t.last_heard = t0 + 1400 * MS;
    assert_eq!(link_verdict(&c, &t, t0 + 1000 * MS), LinkVerdict::Ping);
    assert_eq!(lease_deadline(&c, t.proved), Some(t0 + 1500 * MS));
    assert_eq!(next_verdict_at(&c, &t), t0 + 1000 * MS);
    assert_eq!(
        link_verdict(&c, &t, t0 + 1500 * MS),
        LinkVerdict::RanOut {
            proved_ago: 1500 * MS
        }
    );
    // An answered ping moves the lease on.
    t.proved = t0 + 500 * MS;
    t.last_ping = Some(t0 + 1000 * MS);
    assert_eq!(link_verdict(&c, &t, t0 + 1500 * MS), LinkVerdict::Ping);
    assert_eq!(lease_deadline(&c, t.proved), Some(t0 + 2000 * MS));
}

#[test]
fn an_aligned_link_pings_on_the_grid_never_less_than_half_an_interval_apart() {
    let c = leased(500, 2000, 1500);
    let t0 = Instant::now();
    let mut t = times(t0);
    // The grid's instants are t0 + 100 ms + k × 500 ms.
    t.grid = Some(t0 + 100 * MS);
    t.last_ping = Some(t0 + 350 * MS);
    // Due at 850, moved back to the grid's 600: exactly half an interval after 350.
    assert_eq!(next_verdict_at(&c, &t), t0 + 600 * MS);
    assert_eq!(link_verdict(&c, &t, t0 + 599 * MS), LinkVerdict::Idle);
    assert_eq!(link_verdict(&c, &t, t0 + 600 * MS), LinkVerdict::Ping);
    // After a ping at 700: due at 1200, the grid's 1100.
    t.last_ping = Some(t0 + 700 * MS);
    assert_eq!(next_verdict_at(&c, &t), t0 + 1100 * MS);
    // After a ping at 610: due at 1110, moved back to the grid's 1100.
    t.last_ping = Some(t0 + 610 * MS);
    assert_eq!(next_verdict_at(&c, &t), t0 + 1100 * MS);
    // After a ping at 1000: due at 1500; the grid's 1100 is only 100 after it, so half an
    // interval after it: 1250.
    t.last_ping = Some(t0 + 1000 * MS);
    t.proved = t0 + 1000 * MS;
    assert_eq!(next_verdict_at(&c, &t), t0 + 1250 * MS);
}
