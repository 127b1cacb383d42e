//! What one round of a workload measured, and how rounds are reduced to one reported figure.
//!
//! A round yields one [`Sample`] per reported quantity: how many operations it counted, the wall
//! time they took, and (optionally) one latency per operation in nanoseconds. Across rounds the
//! harness reports the *median round* (by throughput, or by p50 for latency-only quantities),
//! plus the minimum and maximum of the same figure over all rounds. Percentiles are those of the
//! median round's own latencies, never pooled across rounds.

use std::time::Duration;

/// One quantity measured in one round.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Operations counted (transactions, locks, round trips, cycles).
    pub ops: u64,
    /// Wall time of those operations.
    pub elapsed: Duration,
    /// Latency of each operation in nanoseconds (may be empty, or a subset of `ops`).
    pub latencies: Vec<u64>,
    /// Extra figures of this round, printed as a note (for example attempts per success).
    pub extras: Vec<(&'static str, f64)>,
}

impl Sample {
    /// A sample of `ops` operations over `elapsed`, with per-operation latencies.
    pub fn new(ops: u64, elapsed: Duration, latencies: Vec<u64>) -> Sample {
        Sample {
            ops,
            elapsed,
            latencies,
            extras: Vec::new(),
        }
    }

    /// Adds an extra named figure.
    pub fn with_extra(mut self, name: &'static str, value: f64) -> Sample {
        self.extras.push((name, value));
        self
    }

    /// Operations per second (0 when nothing was timed).
    pub fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ops as f64 / secs
        } else {
            0.0
        }
    }
}

/// Latency percentiles of one sample, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// The nearest-rank percentiles of `latencies` (None when empty).
pub fn percentiles(latencies: &[u64]) -> Option<Percentiles> {
    if latencies.is_empty() {
        return None;
    }
    let mut sorted = latencies.to_vec();
    sorted.sort_unstable();
    Some(Percentiles {
        p50: rank(&sorted, 0.50),
        p99: rank(&sorted, 0.99),
    })
}

fn rank(sorted: &[u64], p: f64) -> f64 {
    let n = sorted.len();
    let index = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
    sorted[index] as f64
}

/// The mean of the first and of the last tenth of `latencies`, in the order they were taken:
/// close to 1 when the cost per operation does not grow with the operations done before it.
pub fn growth(latencies: &[u64]) -> Option<f64> {
    let tenth = latencies.len() / 10;
    if tenth == 0 {
        return None;
    }
    let mean = |s: &[u64]| s.iter().sum::<u64>() as f64 / s.len() as f64;
    let first = mean(&latencies[..tenth]);
    let last = mean(&latencies[latencies.len() - tenth..]);
    (first > 0.0).then(|| last / first)
}

/// How the median round is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankBy {
    /// By throughput (operations per second).
    Rate,
    /// By p50 latency (for quantities where the throughput means little).
    P50,
}

/// The reduction of several rounds of one quantity.
#[derive(Debug, Clone)]
pub struct Reduced {
    /// The median round.
    pub median: Sample,
    /// Its percentiles.
    pub percentiles: Option<Percentiles>,
    /// The ranking figure (rate, or p50 in ns) of the lowest and highest round.
    pub min: f64,
    /// See `min`.
    pub max: f64,
    /// How many rounds were reduced.
    pub rounds: usize,
}

/// Reduces the rounds of one quantity to the median round (the upper median for an even count).
pub fn reduce(rounds: Vec<Sample>, by: RankBy) -> Option<Reduced> {
    let count = rounds.len();
    let mut ranked: Vec<(f64, Sample)> = rounds
        .into_iter()
        .map(|s| {
            let key = match by {
                RankBy::Rate => s.rate(),
                RankBy::P50 => percentiles(&s.latencies).map_or(0.0, |p| p.p50),
            };
            (key, s)
        })
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let min = ranked.first()?.0;
    let max = ranked.last()?.0;
    let (_, median) = ranked.swap_remove(count / 2);
    let percentiles = percentiles(&median.latencies);
    Some(Reduced {
        median,
        percentiles,
        min,
        max,
        rounds: count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let lat: Vec<u64> = (1..=100).collect();
        let p = percentiles(&lat).unwrap();
        assert_eq!(p.p50, 50.0);
        assert_eq!(p.p99, 99.0);
        assert_eq!(percentiles(&[7]).unwrap().p99, 7.0);
        assert!(percentiles(&[]).is_none());
    }

    #[test]
    fn median_round_by_rate() {
        let rounds = [3u64, 1, 2, 5, 4]
            .iter()
            .map(|&ops| Sample::new(ops, Duration::from_secs(1), vec![ops]))
            .collect();
        let r = reduce(rounds, RankBy::Rate).unwrap();
        assert_eq!(r.median.ops, 3);
        assert_eq!((r.min, r.max, r.rounds), (1.0, 5.0, 5));
    }

    #[test]
    fn growth_of_a_linear_and_a_quadratic_series() {
        let flat = vec![10u64; 100];
        assert_eq!(growth(&flat), Some(1.0));
        let rising: Vec<u64> = (1..=100).collect();
        assert!(growth(&rising).unwrap() > 10.0);
    }
}
