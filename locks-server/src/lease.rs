//! Leases and lock-delay: how long a holder may believe in a lock held on another node, and how
//! long that node waits before giving the lock to someone else.
//!
//! # The problem
//!
//! A lock granted by node R to an agent on node H is H's belief that nobody else holds it. If
//! the link between them breaks, R eventually declares H down and releases H's agents' locks,
//! and H eventually declares R down and tells its agents. The two "eventually"s are measured on
//! two machines from two different events: with a one-way partition (H's packets dropped, H
//! still hears R) R stops hearing H at once, while H keeps hearing R and keeps believing. Two
//! exclusive owners, for as long as the timers differ.
//!
//! # The rule
//!
//! Every link pings its peer every heartbeat interval, whatever other traffic there is, and the
//! peer answers every ping it reads. Node H's *lease* on the link to R is valid until
//!
//! ```text
//!     s + lease        s = the send time (H's clock) of the latest ping R has answered
//! ```
//!
//! (at the start of a link, `s` is the start of the handshake). A claim of H's agents on R's
//! locks is valid only while H's lease on R is. When it expires, H treats R as down: its
//! agents are told at once, and every status or held-check made before the link's own timer
//! fires also consults the lease (the router's `lease_valid`), so a process resumed after a
//! pause answers "lost" before anything stale. An expired lease is final for that link: a late
//! answer cannot revive it (the link is closed and a new one must be made).
//!
//! When R declares H down (at `D`, R's clock: its own lease on H expired, the heartbeat timed
//! out, the connection broke), R stops reading the link at `D`, so every ping of H's that R
//! answered was read before `D`, hence sent before `D`: `s ≤ D`, and H's lease ends by
//! `D + lease` in real time. R then hands the locks of H's agents to **nobody** for
//! `lock_delay`: they stay held by a placeholder (a *ghost* of the agent, which never answers
//! and is never told anything), and only at `D + lock_delay` are they released to the waiters.
//! With
//!
//! ```text
//!     lock_delay ≥ lease × (1 + ρ)         ρ = the largest clock-rate difference, 1 %
//! ```
//!
//! H's claim has expired (by H's own clock, running up to ρ slower) before anybody else on R
//! can be granted the lock. This holds whatever the fault: a one-way partition in either
//! direction (a ping needs a round trip, so both sides' leases stop being renewed), a two-way
//! partition, a paused process, a crash. Monotonic clocks are used throughout; wall clocks
//! never matter. ρ = 1 % is twenty times what a drifting quartz does; NTP slews clocks by at
//! most 0.05 %.
//!
//! A lease never takes a lock from a holder whose node keeps proving itself: while pings are
//! answered, the lease keeps being renewed, however long the lock is held (releasing locks on a
//! timer lets a slow holder keep writing after its lock was given away). A process paused
//! mid-write is what the fencing versions are for: the resource refuses a write whose version
//! is older than one it has seen.
//!
//! # Restarts
//!
//! A node that crashed and restarts within `lock_delay` could grant, at once, a lock its
//! previous incarnation had granted to an agent that still believes in it. So a clustered node
//! grants nothing for `start_delay` (default: `lock_delay`) after it starts: requests queue and
//! are served once it has passed.
//!
//! # The trade-off
//!
//! After a holder's node crashes or is cut off, its locks are unavailable to others for about
//! `lease + lock_delay` (the time to notice, then the delay): with the defaults (heartbeat
//! interval 500 ms, timeout 2 s, lease 1.5 s, lock-delay 2 s) about 3.5-4 s. Shorter timings
//! make failover faster and make a slow network or a long GC pause look like a fault more
//! often. All of them are in [`crate::NodeConfig`] and the TOML file.
//!
//! # Where each part is decided
//!
//! | part | file |
//! | --- | --- |
//! | the rule, its argument, the settings and their check ([`LeaseConfig::resolve`]), a link's lease ([`LeaseCell`]) | this file |
//! | when a link pings, when its lease runs out, when its heartbeat times out | `net/heartbeat.rs` (`Heartbeat::on_tick`, pure; the link driver `net/link.rs` runs it and ends the link) |
//! | what a link's end means (only a peer's current link; a lease run out or a disconnection), the start-delay, a downed peer's locks handed to ghosts for the lock-delay and released after it | `node_core/mod.rs` (`link_ended`, `NodeCore::step`; the table carries out `TableInput::NodeDown`, and the lock server `DelayOver`, a part at a time: `local/whole.rs`) |
//! | what an agent makes of a node down, and of a lease found not valid before it answers | `locks-agent`'s `core/agent/nodes.rs` (`node_down_because`, `check_leases`) |

use crate::net::HeartbeatConfig;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The largest clock-rate difference between two nodes the lock-delay must allow for (1 %).
pub const MAX_CLOCK_DRIFT_PERCENT: u32 = 1;

/// The lease and lock-delay settings of a node; `None` fields take the defaults derived from
/// the heartbeat timeout (see [`LeaseConfig::resolve`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How long after the send time of its latest answered ping a link's lease is valid.
    /// Default: three quarters of the heartbeat timeout (1.5 s).
    pub lease: Option<Duration>,
    /// How long a node keeps a downed peer's agents' locks held by nobody. Default: the
    /// heartbeat timeout (2 s). Must be at least `lease × 1.01`.
    pub lock_delay: Option<Duration>,
    /// How long a clustered node grants nothing after it starts. Default: the lock-delay.
    /// Zero is allowed and unsafe if the node may restart within a lease of crashing.
    pub start_delay: Option<Duration>,
}

/// The lease settings in force, with the defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leases {
    /// See [`LeaseConfig::lease`].
    pub lease: Duration,
    /// See [`LeaseConfig::lock_delay`].
    pub lock_delay: Duration,
    /// See [`LeaseConfig::start_delay`].
    pub start_delay: Duration,
}

/// Why lease settings were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The lease is not longer than the ping interval: it would expire between two pings.
    #[error("the lease ({lease:?}) must be longer than the heartbeat interval ({interval:?})")]
    LeaseTooShort {
        /// The lease.
        lease: Duration,
        /// The heartbeat interval in force.
        interval: Duration,
    },
    /// The lock-delay does not cover the lease and the clock drift: a cut-off holder could
    /// still believe when its lock is given away.
    #[error(
        "the lock-delay ({lock_delay:?}) must be at least the lease plus {MAX_CLOCK_DRIFT_PERCENT} % ({needed:?})"
    )]
    LockDelayTooShort {
        /// The lock-delay.
        lock_delay: Duration,
        /// The least allowed.
        needed: Duration,
    },
}

impl LeaseConfig {
    /// The settings in force for `heartbeat`, checked.
    pub fn resolve(&self, heartbeat: &HeartbeatConfig) -> Result<Leases, LeaseError> {
        let lease = self.lease.unwrap_or(heartbeat.timeout * 3 / 4);
        let lock_delay = self.lock_delay.unwrap_or(heartbeat.timeout.max(lease));
        let start_delay = self.start_delay.unwrap_or(lock_delay);
        let interval = heartbeat.effective_interval();
        if lease <= interval {
            return Err(LeaseError::LeaseTooShort { lease, interval });
        }
        let needed = lease + lease * MAX_CLOCK_DRIFT_PERCENT / 100;
        if lock_delay < needed {
            return Err(LeaseError::LockDelayTooShort { lock_delay, needed });
        }
        Ok(Leases {
            lease,
            lock_delay,
            start_delay,
        })
    }
}

/// Nanoseconds since a process-wide origin, so that an instant fits an atomic.
fn to_nanos(at: Instant) -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    // A second of room below the first use: instants just before it (a handshake's start)
    // still count; anything earlier saturates to the origin, which only shortens a lease.
    let origin = *ORIGIN.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(1)).unwrap_or(now)
    });
    u64::try_from(at.saturating_duration_since(origin).as_nanos()).unwrap_or(u64::MAX)
}

/// The lease of one link, shared by its driver (which renews it) and everyone who checks it.
///
/// Invariant: once [`LeaseCell::valid`] has answered `false`, it answers `false` for ever, and
/// [`LeaseCell::renew`] fails: an expired lease is final for its link. How it ended is final
/// too, and decided once: it ran out ([`LeaseCell::expire`], or seen past its time), or its link
/// ended first ([`LeaseCell::end`]).
#[derive(Debug)]
pub struct LeaseCell {
    until: AtomicU64,
    /// [`VALID`], [`RAN_OUT`] or [`ENDED`]; it leaves [`VALID`] once.
    state: AtomicU8,
}

/// A [`LeaseCell`] state: valid until its time.
const VALID: u8 = 0;
/// A [`LeaseCell`] state: it ran out while its link stood.
const RAN_OUT: u8 = 1;
/// A [`LeaseCell`] state: its link ended (or was removed) while the lease was valid.
const ENDED: u8 = 2;

impl LeaseCell {
    /// A lease valid until `until`.
    pub fn new(until: Instant) -> LeaseCell {
        LeaseCell {
            until: AtomicU64::new(to_nanos(until)),
            state: AtomicU8::new(VALID),
        }
    }

    /// Extends the lease to `until` (never shortens it). Fails if it has expired already.
    pub fn renew(&self, until: Instant) -> Result<(), Expired> {
        self.until.fetch_max(to_nanos(until), Ordering::AcqRel);
        if self.is_expired() {
            return Err(Expired);
        }
        Ok(())
    }

    /// Whether the lease is valid at `now`; an expiry seen here is final.
    pub fn valid(&self, now: Instant) -> bool {
        if self.is_expired() {
            return false;
        }
        if to_nanos(now) < self.until.load(Ordering::Acquire) {
            return true;
        }
        self.expire();
        false
    }

    /// Ends the lease now because it ran out (its time passed, or pings went unanswered);
    /// nothing if it had ended already.
    pub fn expire(&self) {
        let _ = self
            .state
            .compare_exchange(VALID, RAN_OUT, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Ends the lease now because its link ended; nothing if it had ended already (a lease
    /// that ran out first stays one that ran out).
    pub fn end(&self) {
        let _ = self
            .state
            .compare_exchange(VALID, ENDED, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Whether the lease has been seen expired, either way.
    pub fn is_expired(&self) -> bool {
        self.state.load(Ordering::Acquire) != VALID
    }

    /// Whether the lease ran out while its link stood (not: its link ended first).
    pub fn ran_out(&self) -> bool {
        self.state.load(Ordering::Acquire) == RAN_OUT
    }
}

/// The lease had already expired ([`LeaseCell::renew`]'s error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the lease has expired")]
pub struct Expired;

#[cfg(test)]
mod tests {
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
}
