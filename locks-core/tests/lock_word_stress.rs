//! Stress test of the bare lock word with an oracle: threads run Chronicle Map's procedures directly
//! (try, time-limited, upgrade, downgrades) against one word, and an atomic census fails the
//! test the moment two writers, a writer and anyone else, or two update holders are inside
//! together. Every acquisition that succeeded is released; at the end the word must be free,
//! with no wait registration left behind. Bounded in iterations.

// Under `--cfg loom` the lock word is built on loom's atomics, which only work inside a model.
#![cfg(not(loom))]

use locks_core::lock_word::Attempts;
use locks_core::lock_word::LockWord;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::thread;
use std::time::Duration;

const THREADS: u64 = 4;
const OPS_PER_THREAD: u64 = 100_000;

const READER: u64 = 1;
const UPDATER: u64 = 1 << 20;
const WRITER: u64 = 1 << 40;
const FIELD: u64 = (1 << 20) - 1;

fn enter(census: &AtomicU64, kind: u64) {
    let before = census.fetch_add(kind, SeqCst);
    assert_eq!((before >> 40) & FIELD, 0, "someone entered beside a writer");
    if kind == WRITER {
        assert_eq!(
            before & (FIELD | FIELD << 20),
            0,
            "a writer entered beside others"
        );
    }
    if kind == UPDATER {
        assert_eq!((before >> 20) & FIELD, 0, "two update holders");
    }
}

fn leave(census: &AtomicU64, kind: u64) {
    census.fetch_sub(kind, SeqCst);
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn stress_lock_word_with_census_oracle() {
    let word = LockWord::new();
    let census = AtomicU64::new(0);
    let granted = AtomicU64::new(0);
    let start = Barrier::new(THREADS as usize);
    thread::scope(|s| {
        for t in 0..THREADS {
            let start = &start;
            let (word, census, granted) = (&word, &census, &granted);
            s.spawn(move || {
                start.wait();
                let mut rng = 0xD1B5_4A32_D192_ED03 ^ (t + 1);
                let long = Duration::from_secs(10);
                for _ in 0..OPS_PER_THREAD {
                    let op = xorshift(&mut rng) % 8;
                    let ok = match op {
                        0 | 1 => word.try_read().is_ok() || word.read_timeout(long).is_ok(),
                        2 => word.read_with_limit(&mut Attempts::new(50)).is_ok(),
                        3 => word.try_update().is_ok() || word.update_timeout(long).is_ok(),
                        4 => word.write_timeout(long).is_ok(),
                        5 => word.try_write().is_ok(),
                        6 => word.write_with_limit(&mut Attempts::new(50)).is_ok(),
                        _ => word.update_timeout(long).is_ok(),
                    };
                    if !ok {
                        // Only the short, attempt-bounded and single tries may fail.
                        assert!(matches!(op, 2 | 5 | 6), "a 10 s acquisition timed out");
                        continue;
                    }
                    granted.fetch_add(1, SeqCst);
                    match op {
                        0..=2 => {
                            enter(census, READER);
                            leave(census, READER);
                            word.release_read().unwrap();
                        }
                        3 => {
                            enter(census, UPDATER);
                            leave(census, UPDATER);
                            word.release_update().unwrap();
                        }
                        7 => {
                            // Update, upgrade (time-limited), downgrade to read.
                            enter(census, UPDATER);
                            leave(census, UPDATER);
                            word.upgrade_timeout(long).unwrap();
                            enter(census, WRITER);
                            leave(census, WRITER);
                            word.downgrade_to_read().unwrap();
                            enter(census, READER);
                            leave(census, READER);
                            word.release_read().unwrap();
                        }
                        _ => {
                            enter(census, WRITER);
                            leave(census, WRITER);
                            if op == 4 {
                                word.downgrade_to_update().unwrap();
                                enter(census, UPDATER);
                                leave(census, UPDATER);
                                word.release_update().unwrap();
                            } else {
                                word.release_write().unwrap();
                            }
                        }
                    }
                }
            });
        }
    });
    assert!(granted.load(SeqCst) > 0);
    assert!(word.state().is_free(), "left behind: {}", word.state());
    assert_eq!(census.load(SeqCst), 0);
}
