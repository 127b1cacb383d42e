//! Benchmarks of the lock word and `RwuLock` against `parking_lot::RwLock` and
//! `std::sync::RwLock` (the workloads of `BENCHMARKS.md`, "Lock word"):
//!
//! - `uncontended/*`: one thread, acquire + touch a `u64` + release, per mode.
//! - `contended_2_threads/{read95,write_only}/*`: two threads released together on one lock
//!   guarding `[u64; 4]`; each does the same number of operations, writing with probability 5 %
//!   (or always) and reading otherwise. The time reported per iteration is the wall time for one
//!   operation *on each thread*, i.e. ns/op per thread; the aggregate rate is `2 / time`.
//!
//! Run: `cargo bench -p locks-core --bench lock_word` (about 1.5 minutes). Figures are in
//! BENCHMARKS.md.

use criterion::{Criterion, criterion_group, criterion_main};
use locks_core::RwuLock;
use locks_core::lock_word::LockWord;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("uncontended");

    let word = LockWord::new();
    let mut data = 0u64;
    g.bench_function("lock_word/read", |b| {
        b.iter(|| {
            let _ = word.try_read();
            black_box(&data);
            let _ = word.release_read();
        })
    });
    g.bench_function("lock_word/update", |b| {
        b.iter(|| {
            let _ = word.try_update();
            black_box(&data);
            let _ = word.release_update();
        })
    });
    g.bench_function("lock_word/write", |b| {
        b.iter(|| {
            let _ = word.try_write();
            data += 1;
            black_box(&mut data);
            let _ = word.release_write();
        })
    });

    let rwu = RwuLock::new(0u64);
    g.bench_function("rwu/read", |b| b.iter(|| *black_box(rwu.read())));
    g.bench_function("rwu/update", |b| b.iter(|| *black_box(rwu.update())));
    g.bench_function("rwu/write", |b| b.iter(|| *black_box(rwu.write()) += 1));
    g.bench_function("rwu/update_upgrade", |b| {
        b.iter(|| *black_box(rwu.update().upgrade()) += 1)
    });

    let pl = parking_lot::RwLock::new(0u64);
    g.bench_function("parking_lot/read", |b| b.iter(|| *black_box(pl.read())));
    g.bench_function("parking_lot/upgradable_read", |b| {
        b.iter(|| *black_box(pl.upgradable_read()))
    });
    g.bench_function("parking_lot/write", |b| {
        b.iter(|| *black_box(pl.write()) += 1)
    });
    g.bench_function("parking_lot/upgradable_upgrade", |b| {
        b.iter(|| {
            let u = pl.upgradable_read();
            *black_box(parking_lot::RwLockUpgradableReadGuard::upgrade(u)) += 1
        })
    });

    let std_lock = std::sync::RwLock::new(0u64);
    g.bench_function("std/read", |b| {
        b.iter(|| *black_box(std_lock.read().unwrap()))
    });
    g.bench_function("std/write", |b| {
        b.iter(|| *black_box(std_lock.write().unwrap()) += 1)
    });
    g.finish();
}

/// The operations the contended workload needs from a lock guarding `[u64; 4]`.
trait BenchLock: Sync {
    fn write_op(&self);
    fn read_op(&self) -> u64;
}

impl BenchLock for RwuLock<[u64; 4]> {
    #[inline]
    fn write_op(&self) {
        self.write()[0] += 1;
    }
    #[inline]
    fn read_op(&self) -> u64 {
        let g = self.read();
        g[0] ^ g[3]
    }
}

impl BenchLock for parking_lot::RwLock<[u64; 4]> {
    #[inline]
    fn write_op(&self) {
        self.write()[0] += 1;
    }
    #[inline]
    fn read_op(&self) -> u64 {
        let g = self.read();
        g[0] ^ g[3]
    }
}

impl BenchLock for std::sync::RwLock<[u64; 4]> {
    #[inline]
    fn write_op(&self) {
        if let Ok(mut g) = self.write() {
            g[0] += 1;
        }
    }
    #[inline]
    fn read_op(&self) -> u64 {
        self.read().map(|g| g[0] ^ g[3]).unwrap_or(0)
    }
}

/// Two threads, `iters` operations each, writing with probability `write_percent`; returns the
/// wall time from the common start to the last thread's end.
fn run_two_threads<L: BenchLock>(lock: &L, iters: u64, write_percent: u64) -> Duration {
    let start = Barrier::new(3);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..2u64)
            .map(|t| {
                let start = &start;
                s.spawn(move || {
                    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                    let mut sink = 0u64;
                    start.wait();
                    for _ in 0..iters {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        if rng % 100 < write_percent {
                            lock.write_op();
                        } else {
                            sink = sink.wrapping_add(lock.read_op());
                        }
                    }
                    black_box(sink);
                })
            })
            .collect();
        start.wait();
        let began = Instant::now();
        for w in workers {
            let _ = w.join();
        }
        began.elapsed()
    })
}

fn contended(c: &mut Criterion) {
    for (workload, write_percent) in [("read95", 5), ("write_only", 100)] {
        let mut g = c.benchmark_group(format!("contended_2_threads/{workload}"));
        let rwu = RwuLock::new([0u64; 4]);
        g.bench_function("rwu", |b| {
            b.iter_custom(|iters| run_two_threads(&rwu, iters, write_percent))
        });
        let pl = parking_lot::RwLock::new([0u64; 4]);
        g.bench_function("parking_lot", |b| {
            b.iter_custom(|iters| run_two_threads(&pl, iters, write_percent))
        });
        let std_lock = std::sync::RwLock::new([0u64; 4]);
        g.bench_function("std", |b| {
            b.iter_custom(|iters| run_two_threads(&std_lock, iters, write_percent))
        });
        g.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10)
}

criterion_group! {
    name = benches;
    config = config();
    targets = uncontended, contended
}
criterion_main!(benches);
