//! Warnings that cannot be flooded from outside: at most one per reason per interval.
//!
//! Whatever a stranger can cause (a refused handshake, a failed `accept`) must not write one
//! WARN line per attempt: a loop of bad connections would fill the log and hide everything
//! else. [`RateLimit`] is the pure decision: the first event of a reason in an interval is a
//! warning that carries how many of that reason were held back since the previous warning;
//! the others are held back (the caller logs them at DEBUG). [`LogLimiter`] is the shared
//! shell the transport's tasks use, and [`limited!`](crate::limited) logs through it. The
//! reasons are a fixed set of names chosen by the code (never text from the peer), so the
//! state stays small. Lines a connected peer can cause (its reconnects, the notices to its
//! agents dropped while it is away, the refusals its server sends this node's agents) are
//! limited the same way, at their own level.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often each reason may be warned about.
pub const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// What to do with one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Warn, mentioning how many events of this reason were held back since the last warning.
    Warn {
        /// Events of this reason held back since the last warning.
        suppressed: u64,
    },
    /// Hold it back (log it at DEBUG at most).
    Quiet,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    warned_at: Instant,
    suppressed: u64,
}

/// At most one warning per reason per interval (see the module documentation). Time is an
/// input, so the type is deterministic.
#[derive(Clone, Debug)]
pub struct RateLimit {
    interval: Duration,
    slots: HashMap<&'static str, Slot>,
}

impl RateLimit {
    /// One warning per reason per `interval`.
    pub fn new(interval: Duration) -> RateLimit {
        RateLimit {
            interval,
            slots: HashMap::new(),
        }
    }

    /// An event of `reason` happened at `now`.
    pub fn event(&mut self, reason: &'static str, now: Instant) -> Verdict {
        match self.slots.get_mut(reason) {
            Some(slot) if now.saturating_duration_since(slot.warned_at) < self.interval => {
                slot.suppressed += 1;
                Verdict::Quiet
            }
            Some(slot) => {
                let suppressed = slot.suppressed;
                *slot = Slot {
                    warned_at: now,
                    suppressed: 0,
                };
                Verdict::Warn { suppressed }
            }
            None => {
                self.slots.insert(
                    reason,
                    Slot {
                        warned_at: now,
                        suppressed: 0,
                    },
                );
                Verdict::Warn { suppressed: 0 }
            }
        }
    }
}

/// A `RateLimit` shared by the tasks of one node, reading the clock. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LogLimiter(Arc<Mutex<RateLimit>>);

impl Default for LogLimiter {
    fn default() -> Self {
        LogLimiter(Arc::new(Mutex::new(RateLimit::new(WARN_INTERVAL))))
    }
}

impl LogLimiter {
    /// An event of `reason` happened now.
    pub fn event(&self, reason: &'static str) -> Verdict {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .event(reason, Instant::now())
    }
}

/// Logs at `$level` through `$limiter` for `$reason` (a `&'static str`): the first event of
/// the reason in an interval at that level, with `suppressed_since_last_warning`, the others
/// at DEBUG. The rest are `tracing` fields and the message, as for `tracing::info!`.
#[macro_export]
macro_rules! limited {
    ($limiter:expr, $reason:expr, $level:ident, $($rest:tt)+) => {
        match $limiter.event($reason) {
            $crate::embed::Verdict::Warn { suppressed } => {
                ::tracing::$level!(suppressed_since_last_warning = suppressed, $($rest)+)
            }
            $crate::embed::Verdict::Quiet => ::tracing::debug!($($rest)+),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_reason_per_interval_with_the_count_held_back() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut limit = RateLimit::new(10 * s);
        assert_eq!(limit.event("a", t0), Verdict::Warn { suppressed: 0 });
        for i in 1..=5 {
            assert_eq!(limit.event("a", t0 + i * s), Verdict::Quiet);
        }
        // Another reason has its own budget.
        assert_eq!(
            limit.event("b", t0 + 2 * s),
            Verdict::Warn { suppressed: 0 }
        );
        assert_eq!(limit.event("b", t0 + 3 * s), Verdict::Quiet);
        // After the interval: a warning that says how many were held back.
        assert_eq!(
            limit.event("a", t0 + 10 * s),
            Verdict::Warn { suppressed: 5 }
        );
        assert_eq!(limit.event("a", t0 + 11 * s), Verdict::Quiet);
        assert_eq!(
            limit.event("a", t0 + 25 * s),
            Verdict::Warn { suppressed: 1 }
        );
        assert_eq!(
            limit.event("b", t0 + 25 * s),
            Verdict::Warn { suppressed: 1 }
        );
    }

    #[test]
    fn a_clock_going_backwards_holds_back_rather_than_panicking() {
        let t0 = Instant::now() + Duration::from_secs(5);
        let mut limit = RateLimit::new(Duration::from_secs(10));
        assert_eq!(limit.event("a", t0), Verdict::Warn { suppressed: 0 });
        assert_eq!(
            limit.event("a", t0 - Duration::from_secs(5)),
            Verdict::Quiet
        );
    }

    #[test]
    fn n_events_in_one_interval_give_one_warning() {
        let t0 = Instant::now();
        let mut limit = RateLimit::new(Duration::from_secs(10));
        let warnings = (0..10_000u64)
            .filter(|i| {
                let now = t0 + Duration::from_micros(*i);
                matches!(limit.event("flood", now), Verdict::Warn { .. })
            })
            .count();
        assert_eq!(warnings, 1);
    }
}
