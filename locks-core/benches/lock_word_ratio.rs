//! The two-thread contended workloads of `lock_word.rs`, measured as ratios against the
//! baselines *in the same round*: each round runs `RwuLock`, `parking_lot::RwLock` and
//! `std::sync::RwLock` back to back for a fixed time, and the report gives the median over the
//! rounds of `RwuLock`'s rate divided by each baseline's. On the shared 2-vCPU machine the
//! absolute rates move by 2–4× with vCPU placement and with other work; the ratios within one
//! round move much less (`BENCHMARKS.md` makes the same point).
//!
//! Workload (`BENCHMARKS.md`, "Two threads contending"): two threads released together on one lock guarding
//! `[u64; 4]`; a write (`d[0] += 1`) with probability 5 % (`read95`) or always (`write_only`),
//! else a read (`d[0] ^ d[3]`). Reported per lock: aggregate Mops/s (median over rounds) and
//! the smaller thread's share of the operations.
//!
//! Run: `cargo bench -p locks-core --bench lock_word_ratio` (about 15 s).

use locks_core::RwuLock;
use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const ROUNDS: usize = 11;
const ROUND_TIME: Duration = Duration::from_millis(200);

trait BenchLock: Sync {
    fn write_op(&self);
    fn read_op(&self) -> u64;
}

impl BenchLock for RwuLock<[u64; 4]> {
    fn write_op(&self) {
        self.write()[0] += 1;
    }
    fn read_op(&self) -> u64 {
        let g = self.read();
        g[0] ^ g[3]
    }
}

impl BenchLock for parking_lot::RwLock<[u64; 4]> {
    fn write_op(&self) {
        self.write()[0] += 1;
    }
    fn read_op(&self) -> u64 {
        let g = self.read();
        g[0] ^ g[3]
    }
}

impl BenchLock for std::sync::RwLock<[u64; 4]> {
    fn write_op(&self) {
        if let Ok(mut g) = self.write() {
            g[0] += 1;
        }
    }
    fn read_op(&self) -> u64 {
        self.read().map(|g| g[0] ^ g[3]).unwrap_or(0)
    }
}

/// One round: two threads for `ROUND_TIME`; returns (aggregate Mops/s, smaller thread's share).
fn round<L: BenchLock>(lock: &L, write_percent: u64) -> (f64, f64) {
    let stop = AtomicBool::new(false);
    let start = Barrier::new(3);
    let (counts, elapsed) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2u64)
            .map(|t| {
                let (stop, start) = (&stop, &start);
                s.spawn(move || {
                    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                    let (mut sink, mut ops) = (0u64, 0u64);
                    start.wait();
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..64 {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            if rng % 100 < write_percent {
                                lock.write_op();
                            } else {
                                sink = sink.wrapping_add(lock.read_op());
                            }
                        }
                        ops += 64;
                    }
                    black_box(sink);
                    ops
                })
            })
            .collect();
        start.wait();
        let began = Instant::now();
        std::thread::sleep(ROUND_TIME);
        stop.store(true, Ordering::Relaxed);
        let counts: Vec<u64> = workers.into_iter().map(|w| w.join().unwrap_or(0)).collect();
        (counts, began.elapsed())
    });
    let total = (counts[0] + counts[1]) as f64;
    let share = counts[0].min(counts[1]) as f64 / total.max(1.0);
    (total / elapsed.as_secs_f64() / 1e6, share)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported, everything runs.
    println!("two threads, {ROUNDS} rounds of {ROUND_TIME:?} per lock, interleaved");
    for (workload, write_percent) in [("read95", 5), ("write_only", 100)] {
        let mut rate = [vec![], vec![], vec![]];
        let mut share = [vec![], vec![], vec![]];
        let mut vs_pl = vec![];
        let mut vs_std = vec![];
        for _ in 0..ROUNDS {
            let r = round(&RwuLock::new([0u64; 4]), write_percent);
            let p = round(&parking_lot::RwLock::new([0u64; 4]), write_percent);
            let s = round(&std::sync::RwLock::new([0u64; 4]), write_percent);
            for (i, (m, sh)) in [r, p, s].into_iter().enumerate() {
                rate[i].push(m);
                share[i].push(sh);
            }
            vs_pl.push(r.0 / p.0);
            vs_std.push(r.0 / s.0);
        }
        let [rr, pr, sr] = rate.map(median);
        let [rs, ps, ss] = share.map(median);
        println!(
            "{workload:>10}: RwuLock {rr:6.1} Mops/s (share {rs:.2}) | parking_lot {pr:6.1} \
             (share {ps:.2}) | std {sr:6.1} (share {ss:.2}) | RwuLock/parking_lot {:.2} \
             | RwuLock/std {:.2}",
            median(vs_pl),
            median(vs_std)
        );
    }
}
