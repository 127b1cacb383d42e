//! Stress test of `RwuLock<T>` with an oracle: several threads mix blocking and timed reads,
//! update holds, upgrades, writes and downgrades, and a separate atomic census of who is inside
//! fails the test the moment two writers, or a writer and anyone else, or two update holders,
//! are inside together. Bounded in iterations (a fraction of a second in a debug build).

// Under `--cfg loom` the lock word is built on loom's atomics, which only work inside a model.
#![cfg(not(loom))]

use locks_core::RwuLock;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::thread;
use std::time::Duration;

const THREADS: u64 = 4;
const OPS_PER_THREAD: u64 = 100_000;

/// Who is inside, by kind: readers in bits 0..20, update holders in 20..40, writers in 40..60.
struct Census(AtomicU64);

const READER: u64 = 1;
const UPDATER: u64 = 1 << 20;
const WRITER: u64 = 1 << 40;
const FIELD: u64 = (1 << 20) - 1;

impl Census {
    fn enter(&self, kind: u64) {
        let before = self.0.fetch_add(kind, SeqCst);
        let writers = (before >> 40) & FIELD;
        let updaters = (before >> 20) & FIELD;
        let readers = before & FIELD;
        assert_eq!(writers, 0, "someone entered beside a writer");
        if kind == WRITER {
            assert_eq!(updaters + readers, 0, "a writer entered beside others");
        }
        if kind == UPDATER {
            assert_eq!(updaters, 0, "two update holders");
        }
    }

    fn leave(&self, kind: u64) {
        self.0.fetch_sub(kind, SeqCst);
    }
}

/// The protected value: writers keep both halves equal, so a torn view shows up too.
#[derive(Default)]
struct Pair {
    a: u64,
    b: u64,
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn stress_rwu_lock_with_census_oracle() {
    let lock = RwuLock::new(Pair::default());
    let census = Census(AtomicU64::new(0));
    let writes = AtomicU64::new(0);
    let start = Barrier::new(THREADS as usize);
    thread::scope(|s| {
        for t in 0..THREADS {
            let start = &start;
            let (lock, census, writes) = (&lock, &census, &writes);
            s.spawn(move || {
                start.wait();
                let mut rng = 0x9E37_79B9_7F4A_7C15 ^ (t + 1);
                for _ in 0..OPS_PER_THREAD {
                    match xorshift(&mut rng) % 100 {
                        0..=59 => {
                            let r = lock.read();
                            census.enter(READER);
                            assert_eq!(r.a, r.b);
                            census.leave(READER);
                        }
                        60..=69 => {
                            if let Ok(r) = lock.read_timeout(Duration::from_secs(10)) {
                                census.enter(READER);
                                assert_eq!(r.a, r.b);
                                census.leave(READER);
                            } else {
                                panic!("a 10 s read timed out");
                            }
                        }
                        70..=79 => {
                            let u = lock.update();
                            census.enter(UPDATER);
                            assert_eq!(u.a, u.b);
                            census.leave(UPDATER);
                            let mut w = u.upgrade();
                            census.enter(WRITER);
                            w.a += 1;
                            w.b += 1;
                            writes.fetch_add(1, SeqCst);
                            census.leave(WRITER);
                        }
                        80..=89 => {
                            let mut w = lock.write();
                            census.enter(WRITER);
                            w.a += 1;
                            w.b += 1;
                            writes.fetch_add(1, SeqCst);
                            census.leave(WRITER);
                            let r = w.downgrade();
                            census.enter(READER);
                            assert_eq!(r.a, r.b);
                            census.leave(READER);
                        }
                        _ => {
                            let mut w = lock
                                .write_timeout(Duration::from_secs(10))
                                .expect("a 10 s write timed out");
                            census.enter(WRITER);
                            w.a += 1;
                            w.b += 1;
                            writes.fetch_add(1, SeqCst);
                            census.leave(WRITER);
                            let u = w.downgrade_to_update();
                            census.enter(UPDATER);
                            assert_eq!(u.a, u.b);
                            census.leave(UPDATER);
                        }
                    }
                }
            });
        }
    });
    let pair = lock.into_inner();
    assert_eq!(pair.a, writes.load(SeqCst), "no write was lost");
    assert_eq!(pair.a, pair.b);
    assert_eq!(census.0.load(SeqCst), 0);
}
