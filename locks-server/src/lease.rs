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
//! and is never told anything; H's waiting entries stay queued under it too, and a request of
//! the agent once H is back is a new one, behind its ghost), and only at `D + lock_delay` are
//! they released to the waiters.
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
//! After a holder's node is cut off or paused, its locks are unavailable to others for about
//! `lease + lock_delay` (the time to notice, then the delay): with the defaults (heartbeat
//! interval 500 ms, timeout 2 s, lease 1.5 s, lock-delay 2 s) about 3.5-4 s (README.md: 3.2 s
//! measured after `SIGSTOP`). A crash resets its connections at once, so only the lock-delay
//! remains (2.0 s measured after `kill -9`). Shorter timings
//! make failover faster and make a slow network or a long GC pause look like a fault more
//! often. All of them are in [`crate::NodeConfig`] and the TOML file.
//!
//! # Where each part is decided
//!
//! Every part of the rule is decided in this file, by a pure function or type; the files that
//! run it only carry its verdicts out.
//!
//! | part | decided by | carried out by |
//! | --- | --- | --- |
//! | the settings and their check: the heartbeat's, the lease's and the delays | [`HeartbeatConfig`], [`LeaseConfig::resolve`] | the node's start |
//! | a link's lease: valid until `s + lease`, final once expired, and whether it ran out or its link ended | [`LeaseCell`] | the link driver renews it, the router reads it (`lease_valid`) |
//! | when a link pings, when its peer is down (heartbeat timeout), when its lease runs out | [`link_verdict`], [`next_verdict_at`], [`lease_deadline`] | `net/heartbeat.rs` keeps the link's times (`Heartbeat::on_tick`), the link driver `net/link.rs` ends the link |
//! | what a link's end means: only a peer's current link is a node down, for a lease run out or a disconnection | [`link_ended`] | the cluster layer (`cluster/run.rs`) tells the node core and every local agent |
//! | the start-delay; a downed peer's locks to ghosts (or released at once), and when the ghosts' lock-delay ends | [`NodeDelays`] (`start_hold`, `node_down`, `ghosts_released_after`) | `NodeCore::step` (`node_core/mod.rs`), the table (`TableInput::NodeDown`, `DelayOver`, a part at a time: `local/whole.rs`) |
//! | what a ghost keeps: every entry and watch of the downed node's agent, held or queued, where it was, told nothing; the agent's node back, its requests are new ones, behind its own ghost | this rule (above) | the table renames the agent's entries (`LockTable::ghost_agents_of`, `table/mod.rs`) |
//! | a clean shutdown: the node's own leases end at once, and its peers release its agents' locks with no lock-delay (their holders are gone, not cut off) | this rule: a peer's `RemoveAgent` before the link's end | `Cluster::leave` (`cluster/mod.rs`) sends them, `Router::expire_leases` ends the leases |
//! | whether an agent's claim on a node still stands given its lease, and what a lock lost with a node down reports | [`claim_lost`] (with [`Lease`]), [`loss_cause`] | `locks-agent`'s `core/agent/nodes.rs` (`check_leases`, `node_down_because`) and its actor |

use crate::route::DownCause;
use locks_core::{AgentId, LossCause, NodeId};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When a link pings its peer and when it gives up on it: the heartbeat settings, which the
/// lease's are derived from and checked against ([`LeaseConfig::resolve`]); a link's detector
/// (`net/heartbeat.rs`) applies them as [`link_verdict`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// Silence after which a ping is sent (and between pings). Default 500 ms. Values at or
    /// above half the timeout are treated as half the timeout, so at least one ping goes out
    /// before the peer is declared down (see [`HeartbeatConfig::effective_interval`]).
    pub interval: Duration,
    /// Silence after which the peer is down. Default 2 s.
    pub timeout: Duration,
    /// The lease, if the link keeps one (cluster links do; see [`crate::lease`]): pings go out
    /// every interval, and the lease runs out this long after the send time of the latest
    /// answered ping. Default `None`.
    pub lease: Option<Duration>,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig {
            interval: Duration::from_millis(500),
            timeout: Duration::from_secs(2),
            lease: None,
        }
    }
}

impl HeartbeatConfig {
    /// The interval actually used: at most half the timeout, at least 1 ms (so that a zero
    /// interval cannot make a caller tick in a busy loop).
    pub fn effective_interval(&self) -> Duration {
        self.interval
            .min(self.timeout / 2)
            .max(Duration::from_millis(1))
    }
}

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

/// What a link's failure detector knows of its times at a tick (`net/heartbeat.rs` keeps them
/// and asks [`link_verdict`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkTimes {
    /// When the link was established (with a lease, the first ping is due an interval later).
    pub created: Instant,
    /// When the peer was last heard from (any frame).
    pub last_heard: Instant,
    /// When the last ping went out, if one has.
    pub last_ping: Option<Instant>,
    /// The send time of the latest answered ping, or the start of the handshake: `s` of the
    /// rule (module documentation).
    pub proved: Instant,
    /// The origin of the grid the pings are aligned to, if any (`Heartbeat::aligned_to`).
    pub grid: Option<Instant>,
}

/// What a link does at a tick ([`link_verdict`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkVerdict {
    /// Nothing to do.
    Idle,
    /// Send a ping now.
    Ping,
    /// The peer has been silent for `silent_for`, at least the heartbeat timeout: it is down.
    Silent {
        /// How long nothing was heard.
        silent_for: Duration,
    },
    /// No ping sent in the last lease was answered: the lease ran out.
    RanOut {
        /// How long ago `s` (the latest answered ping, or the start of the handshake) was.
        proved_ago: Duration,
    },
}

/// What a link with `config` and these times does at `now`. A silent peer is down first; with
/// a lease, the lease runs out `lease` after `s` however much the peer is heard (a one-way
/// partition), and a ping goes out every interval whatever else arrives (only answered pings
/// renew the lease), on the grid's instants when aligned; without one, a ping goes out only
/// after an interval of silence, and then once an interval.
pub fn link_verdict(config: &HeartbeatConfig, times: &LinkTimes, now: Instant) -> LinkVerdict {
    let silent_for = now.saturating_duration_since(times.last_heard);
    if silent_for >= config.timeout {
        return LinkVerdict::Silent { silent_for };
    }
    if let Some(lease) = config.lease {
        let proved_ago = now.saturating_duration_since(times.proved);
        if proved_ago >= lease {
            return LinkVerdict::RanOut { proved_ago };
        }
    }
    let interval = config.effective_interval();
    let ping_due = if config.lease.is_some() {
        now >= leased_ping_at(config, times)
    } else {
        silent_for >= interval
            && times
                .last_ping
                .is_none_or(|at| now.saturating_duration_since(at) >= interval)
    };
    if ping_due {
        LinkVerdict::Ping
    } else {
        LinkVerdict::Idle
    }
}

/// The latest instant at which a link with `config` and these times must ask
/// [`link_verdict`] again for it to act on time: its next ping, the heartbeat timeout, or the
/// end of its lease, whichever comes first.
pub fn next_verdict_at(config: &HeartbeatConfig, times: &LinkTimes) -> Instant {
    let interval = config.effective_interval();
    let down_at = times.last_heard + config.timeout;
    let ping_at = match (config.lease, times.last_ping) {
        (Some(_), _) => leased_ping_at(config, times),
        (None, Some(at)) => (times.last_heard + interval).max(at + interval),
        (None, None) => times.last_heard + interval,
    };
    let at = ping_at.min(down_at);
    match lease_deadline(config, times.proved) {
        Some(deadline) => at.min(deadline),
        None => at,
    }
}

/// When the lease of a link with `config` whose latest answered ping was sent at `proved` runs
/// out, if the link keeps one: `s + lease`.
pub fn lease_deadline(config: &HeartbeatConfig, proved: Instant) -> Option<Instant> {
    config.lease.map(|lease| proved + lease)
}

/// When the next ping is due on a link with a lease: an interval after the previous one (or
/// the link's start), moved back onto the grid when aligned: never more than an interval after
/// the previous ping (so the lease is renewed at least as often), never less than half of one.
fn leased_ping_at(config: &HeartbeatConfig, times: &LinkTimes) -> Instant {
    let interval = config.effective_interval();
    let due = times.last_ping.unwrap_or(times.created) + interval;
    let Some(origin) = times.grid else {
        return due;
    };
    let Some(since) = due.checked_duration_since(origin) else {
        return due;
    };
    // The remainder is below the interval, so it fits in a u64 of nanoseconds.
    let past_grid = (since.as_nanos() % interval.as_nanos()) as u64;
    (due - Duration::from_nanos(past_grid)).max(due - interval / 2)
}

/// What the end of a link to a peer means, asked by the cluster layer as each link ends
/// (`current`: it was the peer's registered link; `ran_out`: its driver ended it because its
/// lease ran out, `DownReason::LeaseExpired`, rather than for a disconnection, a silence, or
/// its driver being dropped). `None`: the peer is not down (a link that lost a race with another, or
/// was replaced). Otherwise the peer is down (the node core hands its locks here to
/// [`NodeDelays::node_down`]), and the cause is what this node's agents are told and what a
/// lock lost with the peer reports ([`loss_cause`]): [`DownCause::LeaseExpired`] when this
/// node's lease on the peer ran out (its claims there ended by this node's own clock), else
/// [`DownCause::Disconnected`].
pub fn link_ended(current: bool, ran_out: bool) -> Option<DownCause> {
    if !current {
        return None;
    }
    Some(if ran_out {
        DownCause::LeaseExpired
    } else {
        DownCause::Disconnected
    })
}

/// A node's start-delay and lock-delay, as its node core (`NodeCore`) applies them: both zero
/// for a node outside a cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeDelays {
    /// How long a downed peer's agents' locks stay with their ghosts (zero: released at once).
    pub lock_delay: Duration,
    /// How long the node grants nothing after it starts (zero: none).
    pub start_delay: Duration,
}

/// What a peer going down does to its agents' locks on this node ([`NodeDelays::node_down`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DownedLocks {
    /// They go to ghosts, released [`NodeDelays::ghosts_released_after`] the ghosts are made.
    ToGhosts,
    /// They are released at once (the node has no lock-delay).
    Released,
}

impl NodeDelays {
    /// How long a node that starts now grants nothing, keeping the requests that come (`None`:
    /// it grants at once). Only a node with a start-delay waits, so that no lock it held before
    /// a crash is granted while the old holders may still believe in it.
    pub fn start_hold(&self) -> Option<Duration> {
        (!self.start_delay.is_zero()).then_some(self.start_delay)
    }

    /// What the end of `peer`'s link (a node down: [`link_ended`]) does to its agents' locks
    /// on node `this`: nothing when `peer` is `this` (a node is never down to itself), else
    /// ghosts when the node has a lock-delay, so that a cut-off holder's lease has run out
    /// before anyone else is granted (module documentation), and a release at once without one.
    pub fn node_down(&self, this: &NodeId, peer: &NodeId) -> Option<DownedLocks> {
        if peer == this {
            return None;
        }
        Some(if self.lock_delay.is_zero() {
            DownedLocks::Released
        } else {
            DownedLocks::ToGhosts
        })
    }

    /// How long after `ghosts` are made their locks are released: the lock-delay (`None` when
    /// there are none, so nothing is scheduled).
    pub fn ghosts_released_after(&self, ghosts: &[AgentId]) -> Option<Duration> {
        (!ghosts.is_empty()).then_some(self.lock_delay)
    }
}

/// This node's lease on a peer, as an agent finds it before it answers (the router's
/// `lease_valid` and `lease_ran_out`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lease {
    /// Valid: the claims there hold.
    Valid,
    /// It ran out: no ping was answered within the lease.
    RanOut,
    /// The link ended (or the router no longer knows the node).
    Ended,
}

/// Whether an agent's claims on a peer's locks still stand given this node's `lease` there:
/// `None` while it is valid; otherwise the peer counts as down at once, and each claim there
/// is lost for [`LossCause::LeaseExpired`] when the lease ran out, or for
/// [`LossCause::NodeDown`] when its link ended (the news of which is on its way). A process
/// paused past its lease so says "lost" before it says anything stale.
pub fn claim_lost(lease: Lease) -> Option<LossCause> {
    match lease {
        Lease::Valid => None,
        Lease::RanOut => Some(loss_cause(DownCause::LeaseExpired)),
        Lease::Ended => Some(loss_cause(DownCause::Disconnected)),
    }
}

/// What a lock lost with a node down reports, given why the node is down ([`link_ended`]):
/// [`LossCause::LeaseExpired`] for a lease that ran out, [`LossCause::NodeDown`] otherwise.
pub fn loss_cause(cause: DownCause) -> LossCause {
    match cause {
        DownCause::Disconnected => LossCause::NodeDown,
        DownCause::LeaseExpired => LossCause::LeaseExpired,
    }
}

#[cfg(test)]
mod tests;
