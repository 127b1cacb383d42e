//! The waits between dials of a lost peer: a pure, deterministic doubling backoff.

use std::time::Duration;

/// Waits `min`, then twice as long after every failure, never more than `max`; back to `min`
/// after a success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// A backoff from `min` (at least 1 ms, so that a dialer never spins) to `max`.
    pub fn new(min: Duration, max: Duration) -> Backoff {
        let min = min.max(Duration::from_millis(1));
        let max = max.max(min);
        Backoff {
            min,
            max,
            next: min,
        }
    }

    /// The wait after one more failure.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }

    /// A success: the next failure waits `min` again.
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_bound_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(1000));
        let waits: Vec<Duration> = (0..6).map(|_| b.next_delay()).collect();
        assert_eq!(
            waits,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        b.reset();
        assert_eq!(b.next_delay(), ms(100));
    }

    #[test]
    fn a_zero_minimum_does_not_spin() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(b.next_delay(), Duration::from_millis(1));
    }
}
