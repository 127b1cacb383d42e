//! WORD: the lock word and `RwuLock` beside `parking_lot::RwLock`, in the same rounds.
//!
//! A summary for the harness's run; the criterion benches of `locks-core`
//! (`cargo bench -p locks-core --bench lock_word`, and `lock_word_ratio`) are the detailed
//! measurement (BENCHMARKS.md, "Lock word"). Each round measures every lock once, one after the
//! other, so the ratios compare locks under the same condition of the machine.
//!
//! One thread, uncontended: 5,000,000 × acquire, touch a `u64`, release, for `RwuLock` write
//! and read guards, the bare `LockWord` (`try_write` / `release_write`), and
//! `parking_lot::RwLock` write and read guards. Contention is left to `lock_word_ratio`: a
//! simple two-thread loop here mostly measured one thread running while the other was parked.
//!
//! Operations per second (no per-operation latencies: an operation is a few nanoseconds); each
//! of our rows notes its ratio to the matching `parking_lot` row of the same run (above 1 is
//! faster).

use super::stats::{RankBy, Sample};
use super::{Ctx, Row, Spec};
use locks_core::RwuLock;
use locks_core::lock_word::LockWord;
use std::hint::black_box;
use std::time::Instant;

fn timed(ops: u64, mut op: impl FnMut()) -> Sample {
    let start = Instant::now();
    for _ in 0..ops {
        op();
    }
    Sample::new(ops, start.elapsed(), Vec::new())
}

fn round(one: u64) -> Vec<Sample> {
    let rwu = RwuLock::new(0u64);
    let word = LockWord::new();
    let pl = parking_lot::RwLock::new(0u64);
    let mut data = 0u64;
    vec![
        timed(one, || *black_box(rwu.write()) += 1),
        timed(one, || {
            black_box(*rwu.read());
        }),
        timed(one, || {
            let _ = word.try_write();
            data += 1;
            black_box(&mut data);
            let _ = word.release_write();
        }),
        timed(one, || *black_box(pl.write()) += 1),
        timed(one, || {
            black_box(*pl.read());
        }),
    ]
}

/// Which row each of ours is compared with (indexes into the rows of [`run`]).
const PAIRS: [(usize, usize); 3] = [(0, 3), (1, 4), (2, 3)];

/// WORD.
pub fn run(ctx: &mut Ctx) -> Vec<Row> {
    let names = [
        "WORD RwuLock write 1T",
        "WORD RwuLock read 1T",
        "WORD LockWord try/release_write",
        "WORD parking_lot write 1T",
        "WORD parking_lot read 1T",
    ];
    let specs: Vec<Spec> = names
        .iter()
        .map(|name| Spec {
            name: name.to_string(),
            unit: "op/s",
            rank: RankBy::Rate,
            floor: None,
            goal: None,
        })
        .collect();
    let one = ctx.cfg.size(5_000_000, 500_000);
    let mut rows = ctx.run_rounds(&specs, |_| Ok(round(one)));
    for (ours, theirs) in PAIRS {
        let ratio = match (rows[ours].measured(), rows[theirs].measured()) {
            (Some(a), Some(b)) if b.value > 0.0 => a.value / b.value,
            _ => continue,
        };
        rows[ours].note(format!("vs parking_lot={ratio:.2}x"));
    }
    rows
}
