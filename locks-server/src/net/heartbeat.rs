//! Failure detection for one connection: the state a link's detector keeps, with the
//! verdict at each tick decided by [`lease::link_verdict`] (when to ping, when the peer is
//! down, when the lease ran out: the whole rule of a node going down with leases is in
//! [`crate::lease`]).
//!
//! It owns the link's times (when the peer was last heard from: any frame proves it alive;
//! the pings sent and not answered yet; the send time of the latest answered ping, which
//! [`Heartbeat::on_pong`] moves forward and from which the lease runs), the ping sequence
//! numbers, and the verdict once the peer is down. The peer answers every ping with a `Pong`,
//! and pings on its own when it hears nothing from us.
//!
//! A detector [`aligned`](Heartbeat::aligned_to) to a grid pings on the grid's instants
//! (`origin + k × interval`) instead of one interval after its previous ping: never more than
//! an interval apart (so the lease is renewed at least as often), never less than half of one.
//! The link drivers align to one grid (`net/link.rs`, `shared_grid`), which every process on a
//! machine (and every machine whose wall clock is synchronized) computes alike, so the pings of all the links of a
//! node, and of all the nodes of a machine, go out together: a node wakes once per interval to
//! send them all and reads the answers and the peers' pings in a few batches, instead of
//! waking three times per link per interval (its ping, the answer, the peer's ping). An idle
//! cluster of N nodes costs N² heartbeat frames per interval either way; aligned, the wake-ups,
//! which cost far more than the frames, no longer grow with N per node.
//!
//! Inputs are the current instant, "a frame arrived" and ticks; the caller ticks at
//! [`Heartbeat::next_tick`] (earlier ticks are harmless). Invariant: once the detector has
//! said [`HeartbeatAction::Down`] or [`HeartbeatAction::LeaseExpired`] it keeps saying it.

pub use crate::lease::HeartbeatConfig;
use crate::lease::{self, LinkTimes, LinkVerdict};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The most pings remembered while unanswered: more than a lease can span at any sane
/// interval; the oldest are forgotten first (their answers then renew nothing, which is safe).
const MAX_OUTSTANDING: usize = 64;

/// What the caller does after a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeartbeatAction {
    /// Nothing to do.
    Idle,
    /// Send `Ping { seq }`.
    Ping {
        /// The sequence number to send.
        seq: u64,
    },
    /// The peer has been silent for `silent_for` (at least the timeout): it is down.
    Down {
        /// How long nothing was heard.
        silent_for: Duration,
    },
    /// No ping sent in the last lease was answered: the lease has run out.
    LeaseExpired {
        /// How long ago the latest answered ping (or the start of the handshake) was sent.
        proved_ago: Duration,
    },
}

/// The failure detector of one connection.
#[derive(Clone, Debug)]
pub struct Heartbeat {
    config: HeartbeatConfig,
    last_heard: Instant,
    /// The last ping sent and when, if any.
    last_ping: Option<(u64, Instant)>,
    /// The pings not answered yet, oldest first (kept only with a lease).
    outstanding: VecDeque<(u64, Instant)>,
    /// The send time of the latest answered ping (with a lease).
    proved: Instant,
    /// When the detector was made: with a lease, the first ping is due an interval later.
    created: Instant,
    /// The origin of the grid the pings are aligned to, if any ([`Heartbeat::aligned_to`]).
    grid: Option<Instant>,
    next_seq: u64,
    down: Option<HeartbeatAction>,
}

impl Heartbeat {
    /// A detector for a connection that was just established at `now` (the handshake counts
    /// as hearing from the peer).
    pub fn new(config: HeartbeatConfig, now: Instant) -> Heartbeat {
        Heartbeat::with_proof(config, now, now)
    }

    /// A detector for a connection established at `now` whose lease starts at `proved`, an
    /// instant at or before the first frame this node sent on it (the start of the handshake).
    pub fn with_proof(config: HeartbeatConfig, now: Instant, proved: Instant) -> Heartbeat {
        Heartbeat {
            config,
            last_heard: now,
            last_ping: None,
            outstanding: VecDeque::new(),
            proved: proved.min(now),
            created: now,
            grid: None,
            next_seq: 1,
            down: None,
        }
    }

    /// The same detector, pinging (on a link with a lease) on the instants `origin + k ×
    /// interval` (module documentation): each ping at the last grid instant at or before one
    /// interval after the previous ping, unless that is less than half an interval after it.
    pub fn aligned_to(mut self, origin: Instant) -> Heartbeat {
        self.grid = Some(origin);
        self
    }

    /// A frame (of any kind) arrived from the peer at `now`.
    pub fn on_frame(&mut self, now: Instant) {
        self.last_heard = self.last_heard.max(now);
    }

    /// A `Pong { seq }` arrived at `now`: also [`Heartbeat::on_frame`]. Returns the round trip
    /// time when it answers the latest ping.
    pub fn on_pong(&mut self, seq: u64, now: Instant) -> Option<Duration> {
        self.on_frame(now);
        if let Some(i) = self.outstanding.iter().position(|(s, _)| *s == seq) {
            // Pongs come in order: every earlier ping is answered or lost; forget them too.
            let (_, sent) = self.outstanding[i];
            self.outstanding.drain(..=i);
            self.proved = self.proved.max(sent);
        }
        match self.last_ping {
            Some((sent_seq, at)) if sent_seq == seq => Some(now.saturating_duration_since(at)),
            _ => None,
        }
    }

    /// Time passed: ping, or declare the peer down, as [`lease::link_verdict`] decides.
    pub fn on_tick(&mut self, now: Instant) -> HeartbeatAction {
        if let Some(down) = self.down {
            return down;
        }
        match lease::link_verdict(&self.config, &self.times(), now) {
            LinkVerdict::Idle => HeartbeatAction::Idle,
            LinkVerdict::Silent { silent_for } => {
                *self.down.insert(HeartbeatAction::Down { silent_for })
            }
            LinkVerdict::RanOut { proved_ago } => *self
                .down
                .insert(HeartbeatAction::LeaseExpired { proved_ago }),
            LinkVerdict::Ping => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.last_ping = Some((seq, now));
                if self.config.lease.is_some() {
                    if self.outstanding.len() == MAX_OUTSTANDING {
                        self.outstanding.pop_front();
                    }
                    self.outstanding.push_back((seq, now));
                }
                HeartbeatAction::Ping { seq }
            }
        }
    }

    /// The latest instant at which the caller must tick for the detector to act on time
    /// ([`lease::next_verdict_at`]).
    pub fn next_tick(&self) -> Instant {
        lease::next_verdict_at(&self.config, &self.times())
    }

    /// The times [`lease::link_verdict`] decides on.
    fn times(&self) -> LinkTimes {
        LinkTimes {
            created: self.created,
            last_heard: self.last_heard,
            last_ping: self.last_ping.map(|(_, at)| at),
            proved: self.proved,
            grid: self.grid,
        }
    }

    /// The send time of the latest answered ping (or the start of the handshake).
    pub fn proved(&self) -> Instant {
        self.proved
    }

    /// When the lease runs out, if the link keeps one ([`lease::lease_deadline`]).
    pub fn lease_deadline(&self) -> Option<Instant> {
        lease::lease_deadline(&self.config, self.proved)
    }

    /// Whether the detector has declared the peer down (silent, or its lease ran out).
    pub fn is_down(&self) -> bool {
        self.down.is_some()
    }

    /// When the peer was last heard from.
    pub fn last_heard(&self) -> Instant {
        self.last_heard
    }
}
