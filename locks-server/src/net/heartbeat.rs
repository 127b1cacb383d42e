//! Failure detection for one connection, as a pure state machine.
//!
//! Any frame from the peer proves it alive. When nothing has been heard for
//! [`HeartbeatConfig::interval`], the detector asks for a `Ping` (and for another every
//! `interval` while the silence lasts); the peer answers every ping with a `Pong`, and pings
//! on its own when it hears nothing from us. When nothing has been heard for
//! [`HeartbeatConfig::timeout`], the peer is down.
//!
//! Inputs are the current instant, "a frame arrived" and ticks; the caller ticks at
//! [`Heartbeat::next_tick`] (earlier ticks are harmless). Once the detector has said
//! [`HeartbeatAction::Down`] it keeps saying it.

use std::time::{Duration, Instant};

/// When to ping a silent peer and when to give up on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// Silence after which a ping is sent (and between pings). Default 500 ms. Values at or
    /// above half the timeout are treated as half the timeout, so at least one ping goes out
    /// before the peer is declared down (see [`HeartbeatConfig::effective_interval`]).
    pub interval: Duration,
    /// Silence after which the peer is down. Default 2 s.
    pub timeout: Duration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig {
            interval: Duration::from_millis(500),
            timeout: Duration::from_secs(2),
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
}

/// The failure detector of one connection.
#[derive(Clone, Debug)]
pub struct Heartbeat {
    config: HeartbeatConfig,
    last_heard: Instant,
    /// The last ping sent and when, if any.
    last_ping: Option<(u64, Instant)>,
    next_seq: u64,
    down: bool,
}

impl Heartbeat {
    /// A detector for a connection that was just established at `now` (the handshake counts
    /// as hearing from the peer).
    pub fn new(config: HeartbeatConfig, now: Instant) -> Heartbeat {
        Heartbeat {
            config,
            last_heard: now,
            last_ping: None,
            next_seq: 1,
            down: false,
        }
    }

    /// A frame (of any kind) arrived from the peer at `now`.
    pub fn on_frame(&mut self, now: Instant) {
        self.last_heard = self.last_heard.max(now);
    }

    /// A `Pong { seq }` arrived at `now`: also [`Heartbeat::on_frame`]. Returns the round trip
    /// time when it answers the latest ping.
    pub fn on_pong(&mut self, seq: u64, now: Instant) -> Option<Duration> {
        self.on_frame(now);
        match self.last_ping {
            Some((sent_seq, at)) if sent_seq == seq => Some(now.saturating_duration_since(at)),
            _ => None,
        }
    }

    /// Time passed: decide whether to ping or to declare the peer down.
    pub fn on_tick(&mut self, now: Instant) -> HeartbeatAction {
        let silent_for = now.saturating_duration_since(self.last_heard);
        if self.down || silent_for >= self.config.timeout {
            self.down = true;
            return HeartbeatAction::Down { silent_for };
        }
        let interval = self.config.effective_interval();
        let ping_due = silent_for >= interval
            && self
                .last_ping
                .is_none_or(|(_, at)| now.saturating_duration_since(at) >= interval);
        if ping_due {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.last_ping = Some((seq, now));
            HeartbeatAction::Ping { seq }
        } else {
            HeartbeatAction::Idle
        }
    }

    /// The latest instant at which the caller must tick for the detector to act on time.
    pub fn next_tick(&self) -> Instant {
        let interval = self.config.effective_interval();
        let down_at = self.last_heard + self.config.timeout;
        let ping_at = match self.last_ping {
            Some((_, at)) => (self.last_heard + interval).max(at + interval),
            None => self.last_heard + interval,
        };
        ping_at.min(down_at)
    }

    /// Whether the detector has declared the peer down.
    pub fn is_down(&self) -> bool {
        self.down
    }

    /// When the peer was last heard from.
    pub fn last_heard(&self) -> Instant {
        self.last_heard
    }
}
