//! The heartbeat detector on its own, driven by hand-made instants.

use locks_server::transport::net::{Heartbeat, HeartbeatAction, HeartbeatConfig};
use proptest::prelude::*;
use std::time::{Duration, Instant};

const MS: Duration = Duration::from_millis(1);

fn config(interval_ms: u64, timeout_ms: u64) -> HeartbeatConfig {
    HeartbeatConfig {
        interval: Duration::from_millis(interval_ms),
        timeout: Duration::from_millis(timeout_ms),
        ..HeartbeatConfig::default()
    }
}

#[test]
fn default_declares_a_silent_peer_down_within_two_seconds() {
    let c = HeartbeatConfig::default();
    assert!(c.timeout <= Duration::from_secs(2));
    assert!(c.interval < c.timeout);
}

#[test]
fn a_silent_peer_is_pinged_every_interval_then_declared_down() {
    let t0 = Instant::now();
    let mut hb = Heartbeat::new(config(100, 350), t0);
    assert_eq!(hb.next_tick(), t0 + 100 * MS);
    assert_eq!(hb.on_tick(t0 + 99 * MS), HeartbeatAction::Idle);
    assert_eq!(hb.on_tick(t0 + 100 * MS), HeartbeatAction::Ping { seq: 1 });
    assert_eq!(hb.on_tick(t0 + 150 * MS), HeartbeatAction::Idle);
    assert_eq!(hb.next_tick(), t0 + 200 * MS);
    assert_eq!(hb.on_tick(t0 + 200 * MS), HeartbeatAction::Ping { seq: 2 });
    assert_eq!(hb.on_tick(t0 + 300 * MS), HeartbeatAction::Ping { seq: 3 });
    assert_eq!(
        hb.next_tick(),
        t0 + 350 * MS,
        "the timeout comes before the next ping"
    );
    assert_eq!(
        hb.on_tick(t0 + 350 * MS),
        HeartbeatAction::Down {
            silent_for: 350 * MS
        }
    );
    assert!(hb.is_down());
    // Down is final, even if a frame arrives afterwards.
    hb.on_frame(t0 + 360 * MS);
    assert!(matches!(
        hb.on_tick(t0 + 361 * MS),
        HeartbeatAction::Down { .. }
    ));
}

#[test]
fn frames_keep_a_peer_alive_without_pings() {
    let t0 = Instant::now();
    let mut hb = Heartbeat::new(config(100, 350), t0);
    for k in 1..=50u32 {
        let t = t0 + k * 90 * MS;
        hb.on_frame(t);
        assert_eq!(hb.on_tick(t), HeartbeatAction::Idle, "at {k}");
        assert_eq!(hb.last_heard(), t);
    }
    assert!(!hb.is_down());
}

#[test]
fn a_pong_answers_the_latest_ping_with_its_round_trip() {
    let t0 = Instant::now();
    let mut hb = Heartbeat::new(config(100, 1000), t0);
    assert_eq!(hb.on_tick(t0 + 100 * MS), HeartbeatAction::Ping { seq: 1 });
    assert_eq!(hb.on_tick(t0 + 200 * MS), HeartbeatAction::Ping { seq: 2 });
    // A late answer to the first ping proves life but gives no round trip.
    assert_eq!(hb.on_pong(1, t0 + 210 * MS), None);
    assert_eq!(hb.last_heard(), t0 + 210 * MS);
    assert_eq!(hb.on_pong(2, t0 + 230 * MS), Some(30 * MS));
    assert_eq!(hb.on_tick(t0 + 231 * MS), HeartbeatAction::Idle);
}

#[test]
fn the_interval_is_at_most_half_the_timeout_and_at_least_a_millisecond() {
    assert_eq!(config(5000, 1000).effective_interval(), 500 * MS);
    assert_eq!(config(0, 1000).effective_interval(), MS);
    let t0 = Instant::now();
    let mut hb = Heartbeat::new(config(5000, 1000), t0);
    assert_eq!(hb.on_tick(t0 + 500 * MS), HeartbeatAction::Ping { seq: 1 });
}

#[derive(Clone, Debug)]
enum Event {
    Frame,
    Tick,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Against a model: down exactly when the silence reaches the timeout, and then for good;
    /// pings only after `interval` of silence, at most one per interval, numbered 1, 2, 3...;
    /// `next_tick` is never in the past of the last event and never after the timeout.
    #[test]
    fn the_detector_follows_its_model(
        interval in 1u64..200,
        timeout in 1u64..600,
        events in proptest::collection::vec((0u64..150, prop_oneof![Just(Event::Frame), Just(Event::Tick)]), 1..60),
    ) {
        let c = config(interval, timeout);
        let eff = c.effective_interval();
        let t0 = Instant::now();
        let mut hb = Heartbeat::new(c, t0);
        let (mut now, mut last_heard, mut down) = (t0, t0, false);
        let mut last_ping: Option<Instant> = None;
        let mut seq = 0;
        for (gap, event) in events {
            now += Duration::from_millis(gap);
            match event {
                Event::Frame => {
                    hb.on_frame(now);
                    if !down {
                        last_heard = now;
                    }
                }
                Event::Tick => {
                    let silent = now - last_heard;
                    match hb.on_tick(now) {
                        HeartbeatAction::Down { silent_for } => {
                            prop_assert!(down || silent >= c.timeout);
                            if !down {
                                prop_assert_eq!(silent_for, silent);
                            }
                            down = true;
                        }
                        HeartbeatAction::Ping { seq: s } => {
                            prop_assert!(!down && silent < c.timeout && silent >= eff);
                            prop_assert!(last_ping.is_none_or(|p| now - p >= eff));
                            seq += 1;
                            prop_assert_eq!(s, seq);
                            last_ping = Some(now);
                        }
                        HeartbeatAction::LeaseExpired { .. } => {
                            prop_assert!(false, "no lease is configured");
                        }
                        HeartbeatAction::Idle => {
                            prop_assert!(!down && silent < c.timeout);
                            let due = silent >= eff && last_ping.is_none_or(|p| now - p >= eff);
                            prop_assert!(!due, "a ping was due");
                        }
                    }
                }
            }
            prop_assert_eq!(hb.is_down(), down);
            if !down {
                prop_assert!(hb.next_tick() <= last_heard + c.timeout);
            }
        }
    }
}

fn leased(interval_ms: u64, timeout_ms: u64, lease_ms: u64) -> HeartbeatConfig {
    HeartbeatConfig {
        lease: Some(Duration::from_millis(lease_ms)),
        ..config(interval_ms, timeout_ms)
    }
}

/// A one-way partition: the peer's frames keep arriving, ours do not reach it, so no ping is
/// answered. Without a lease the peer looks alive for ever; with one, the lease runs out one
/// lease after the handshake started, whatever arrives.
#[test]
fn a_peer_heard_but_not_answering_pings_expires_the_lease() {
    let t0 = Instant::now();
    let mut hb = Heartbeat::with_proof(leased(100, 2000, 350), t0, t0);
    let mut pings = 0;
    let mut t = t0;
    loop {
        t += 10 * MS;
        hb.on_frame(t);
        match hb.on_tick(t) {
            HeartbeatAction::Ping { .. } => pings += 1,
            HeartbeatAction::Idle => {}
            HeartbeatAction::LeaseExpired { proved_ago } => {
                assert_eq!(t, t0 + 350 * MS, "expires exactly at the lease");
                assert_eq!(proved_ago, 350 * MS);
                break;
            }
            other => panic!("unexpected {other:?} at {:?}", t - t0),
        }
    }
    assert_eq!(
        pings, 3,
        "pinged every interval although frames kept arriving"
    );
    assert!(
        matches!(hb.on_tick(t + MS), HeartbeatAction::LeaseExpired { .. }),
        "for good"
    );
}

/// An answer renews the lease from the *send* time of the ping it answers, not from its own
/// arrival: a slow answer buys nothing.
#[test]
fn the_lease_runs_from_the_send_time_of_the_answered_ping() {
    let t0 = Instant::now();
    let mut hb = Heartbeat::with_proof(leased(100, 5000, 300), t0, t0);
    assert_eq!(hb.on_tick(t0 + 100 * MS), HeartbeatAction::Ping { seq: 1 });
    assert_eq!(hb.on_tick(t0 + 200 * MS), HeartbeatAction::Ping { seq: 2 });
    // The answer to the first ping comes late.
    hb.on_pong(1, t0 + 290 * MS);
    assert_eq!(hb.lease_deadline(), Some(t0 + 400 * MS));
    assert_eq!(hb.on_tick(t0 + 300 * MS), HeartbeatAction::Ping { seq: 3 });
    assert!(hb.next_tick() <= t0 + 400 * MS);
    assert_eq!(
        hb.on_tick(t0 + 400 * MS),
        HeartbeatAction::LeaseExpired {
            proved_ago: 300 * MS
        }
    );
    // An answer after expiry revives nothing.
    hb.on_pong(3, t0 + 401 * MS);
    assert!(matches!(
        hb.on_tick(t0 + 402 * MS),
        HeartbeatAction::LeaseExpired { .. }
    ));
}

#[derive(Clone, Debug)]
enum LeaseEvent {
    Frame,
    Tick,
    /// The peer answers the oldest ping it has not answered.
    Pong,
    /// The peer answers a ping, skipping the `n` oldest (pongs can be lost with a connection,
    /// never reordered; skipping models pings whose answers never come).
    PongSkipping(usize),
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Against a model: with a lease the detector pings every interval whatever arrives, and
    /// says `LeaseExpired` exactly when a lease has passed since the send time of the latest
    /// answered ping (or the start), unless the silence timeout came first; then it says it
    /// for good.
    ///
    /// Aligned to a grid (`grid`: its origin that many milliseconds before the start), the
    /// pings may come earlier, never later: at least half an interval apart.
    #[test]
    fn the_lease_follows_its_model(
        interval in 1u64..100,
        lease in 1u64..400,
        grid in proptest::option::of(0u64..100),
        events in proptest::collection::vec(
            (0u64..80, prop_oneof![
                Just(LeaseEvent::Frame),
                Just(LeaseEvent::Tick),
                Just(LeaseEvent::Pong),
                (1usize..3).prop_map(LeaseEvent::PongSkipping),
            ]),
            1..80,
        ),
    ) {
        let c = leased(interval, 100_000, lease);
        let eff = c.effective_interval();
        let lease = Duration::from_millis(lease);
        let t0 = Instant::now();
        let mut hb = Heartbeat::with_proof(c, t0, t0);
        // The least gap between two pings (and from the start to the first).
        let mut least = eff;
        if let Some(before) = grid {
            hb = hb.aligned_to(t0 - Duration::from_millis(before));
            least = eff / 2;
        }
        let mut now = t0;
        let mut proved = t0;
        let mut expired = false;
        let mut last_ping: Option<Instant> = None;
        // Pings sent and not answered (or skipped), oldest first.
        let mut unanswered: Vec<(u64, Instant)> = Vec::new();
        for (gap, event) in events {
            now += Duration::from_millis(gap);
            match event {
                LeaseEvent::Frame => hb.on_frame(now),
                LeaseEvent::Pong | LeaseEvent::PongSkipping(_) => {
                    let skip = match event {
                        LeaseEvent::PongSkipping(n) => n,
                        _ => 0,
                    };
                    if unanswered.len() > skip {
                        let (seq, sent) = unanswered[skip];
                        unanswered.drain(..=skip);
                        hb.on_pong(seq, now);
                        if !expired {
                            proved = proved.max(sent);
                        }
                    }
                }
                LeaseEvent::Tick => match hb.on_tick(now) {
                    HeartbeatAction::LeaseExpired { proved_ago } => {
                        prop_assert!(expired || now - proved >= lease);
                        if !expired {
                            prop_assert_eq!(proved_ago, now - proved);
                        }
                        expired = true;
                    }
                    HeartbeatAction::Ping { seq } => {
                        prop_assert!(!expired && now - proved < lease);
                        prop_assert!(now - last_ping.unwrap_or(t0) >= least);
                        last_ping = Some(now);
                        unanswered.push((seq, now));
                    }
                    HeartbeatAction::Idle => {
                        prop_assert!(!expired && now - proved < lease);
                        let due = last_ping.map_or(now - t0 >= eff, |p| now - p >= eff);
                        prop_assert!(!due, "a ping was due");
                    }
                    HeartbeatAction::Down { .. } => prop_assert!(false, "never silent that long"),
                },
            }
            if !expired {
                prop_assert_eq!(hb.lease_deadline(), Some(proved + lease));
                prop_assert!(hb.next_tick() <= proved + lease);
            }
        }
    }
}

/// Pings of a detector ticked at every `next_tick`, all answered at once, until `until`.
fn ping_times(mut hb: Heartbeat, until: Instant) -> Vec<Instant> {
    let mut pings = Vec::new();
    loop {
        let t = hb.next_tick();
        if t > until {
            return pings;
        }
        match hb.on_tick(t) {
            HeartbeatAction::Ping { seq } => {
                pings.push(t);
                hb.on_pong(seq, t);
            }
            HeartbeatAction::Idle => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Aligned, a detector's pings move onto the grid within two pings and stay there, never
/// more than an interval apart.
#[test]
fn aligned_pings_go_out_on_the_grid() {
    let t0 = Instant::now();
    let origin = t0 - 37 * MS;
    let hb = Heartbeat::with_proof(leased(100, 2000, 350), t0, t0).aligned_to(origin);
    let pings = ping_times(hb, t0 + 1000 * MS);
    assert!(pings.len() >= 9, "pinged {} times in a second", pings.len());
    let mut before = t0;
    for (i, at) in pings.iter().enumerate() {
        let gap = *at - before;
        assert!(gap >= 50 * MS && gap <= 100 * MS, "ping {i}: gap {gap:?}");
        if i >= 2 {
            assert_eq!(
                (*at - origin).as_nanos() % (100 * MS).as_nanos(),
                0,
                "ping {i}"
            );
        }
        before = *at;
    }
}

/// Two links made at different moments, aligned to the same grid, ping at the same instants
/// after their first pings: what lets a node send all its pings in one wake-up.
#[test]
fn links_aligned_to_one_grid_ping_together() {
    let t0 = Instant::now();
    let origin = t0 - 1000 * MS;
    let a = Heartbeat::with_proof(leased(100, 2000, 350), t0, t0).aligned_to(origin);
    let t1 = t0 + 33 * MS;
    let b = Heartbeat::with_proof(leased(100, 2000, 350), t1, t1).aligned_to(origin);
    let until = t0 + 1000 * MS;
    let (a, b) = (ping_times(a, until), ping_times(b, until));
    let late = |p: &[Instant]| {
        p.iter()
            .filter(|t| **t >= t0 + 300 * MS)
            .copied()
            .collect::<Vec<_>>()
    };
    assert_eq!(late(&a), late(&b));
    assert!(late(&a).len() >= 6);
}

/// Not aligned, the pings keep their own phase: one interval after the previous one.
#[test]
fn unaligned_pings_keep_their_own_phase() {
    let t0 = Instant::now();
    let hb = Heartbeat::with_proof(leased(100, 2000, 350), t0, t0);
    let pings = ping_times(hb, t0 + 1000 * MS);
    let expected: Vec<Instant> = (1..=10).map(|k| t0 + k * 100 * MS).collect();
    assert_eq!(pings, expected);
}
