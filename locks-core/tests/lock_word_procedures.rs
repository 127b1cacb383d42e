//! Every procedure of Chronicle Map's lock word ("The Lock Structure and Locking Operations") on a single thread,
//! success and failure branches, checked bit for bit against Chronicle Map's layout.

// Under `--cfg loom` the lock word is built on loom's atomics, which only work inside a model.
#![cfg(not(loom))]

use locks_core::lock_word::state::{
    COUNT_WORD_MASK, MAX_READ_COUNT, MAX_WAIT_COUNT, READ_COUNT_MASK, UPDATE_FLAG, WAIT_COUNT_MASK,
    WAIT_ONE, WRITE_FLAG,
};
use locks_core::lock_word::{Access, Attempts, Deadline, WaitLimit};
use locks_core::lock_word::{LockWord, LockWordError, LockWordRef, WordState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn word(bits: u64) -> LockWord {
    LockWord::from_state(WordState::from_bits(bits))
}

fn bits(word: &LockWord) -> u64 {
    word.state().bits()
}

fn would_block(access: Access, observed: u64) -> LockWordError {
    LockWordError::WouldBlock {
        access,
        observed: WordState::from_bits(observed),
    }
}

/// A wait limit that runs a closure after each failed attempt: lets a single-threaded test play
/// the other threads at step 7 of the time-limited procedures.
struct Between<F>(F);

impl<F: FnMut() -> bool> WaitLimit for Between<F> {
    fn exhausted(&mut self) -> bool {
        (self.0)()
    }
}

const TWO_WAITING: u64 = 2 * WAIT_ONE;

#[test]
fn lock_structure_layout() {
    assert_eq!(READ_COUNT_MASK, 0x3FFF_FFFF);
    assert_eq!(UPDATE_FLAG, 0x4000_0000);
    assert_eq!(WRITE_FLAG, 0x8000_0000);
    assert_eq!(COUNT_WORD_MASK, 0xFFFF_FFFF);
    assert_eq!(WAIT_ONE, 1 << 32);
    assert_eq!(WAIT_COUNT_MASK, 0xFFFF_FFFF_0000_0000);
    assert_eq!(MAX_READ_COUNT, (1 << 30) - 1);
    assert_eq!(MAX_WAIT_COUNT, (1 << 31) - 1);
    assert_eq!(std::mem::size_of::<LockWord>(), 8);
}

#[test]
fn state_decodes_every_field() {
    let s = WordState::from_bits((5 * WAIT_ONE) | UPDATE_FLAG | 3);
    assert_eq!(
        (
            s.read_count(),
            s.update_held(),
            s.write_held(),
            s.wait_count()
        ),
        (3, true, false, 5)
    );
    assert_eq!(s.count_word(), 0x4000_0003);
    assert!(!s.is_free());
    let w = WordState::from_bits(WRITE_FLAG | u64::from(MAX_WAIT_COUNT) << 32);
    assert!(w.write_held() && !w.update_held());
    assert_eq!((w.read_count(), w.wait_count()), (0, MAX_WAIT_COUNT));
    assert!(WordState::FREE.is_free());
    assert_eq!(
        format!("{s}"),
        "readers=3 update=true write=false waiting=5"
    );
    assert_eq!(LockWord::new().state(), WordState::FREE);
}

#[test]
fn try_acquire_read_lock() {
    let w = LockWord::new();
    w.try_read().unwrap();
    w.try_read().unwrap();
    assert_eq!(bits(&w), 2);
    // Readers come in beside the update holder.
    let w = word(UPDATE_FLAG | 1);
    w.try_read().unwrap();
    assert_eq!(bits(&w), UPDATE_FLAG | 2);
}

#[test]
fn try_acquire_read_lock_fails_on_writer_waiter_or_overflow() {
    let w = word(WRITE_FLAG);
    assert_eq!(w.try_read(), Err(would_block(Access::Read, WRITE_FLAG)));
    assert_eq!(bits(&w), WRITE_FLAG);

    let w = word(WAIT_ONE | 1);
    assert_eq!(w.try_read(), Err(would_block(Access::Read, WAIT_ONE | 1)));
    assert_eq!(bits(&w), WAIT_ONE | 1);

    let full = u64::from(MAX_READ_COUNT);
    let w = word(UPDATE_FLAG | full);
    assert_eq!(w.try_read(), Err(LockWordError::ReadCountOverflow));
    assert_eq!(
        bits(&w),
        UPDATE_FLAG | full,
        "overflow must not carry into the update flag"
    );
    // One below the limit still works, and reaches the limit exactly.
    let w = word(full - 1);
    w.try_read().unwrap();
    assert_eq!(w.state().read_count(), MAX_READ_COUNT);
}

#[test]
fn release_read_lock() {
    let w = word(TWO_WAITING | UPDATE_FLAG | 2);
    w.release_read().unwrap();
    assert_eq!(bits(&w), TWO_WAITING | UPDATE_FLAG | 1);
    w.release_read().unwrap();
    assert_eq!(bits(&w), TWO_WAITING | UPDATE_FLAG);
    // Step 2: a read count of 0 fails, and the word stays as it was.
    assert_eq!(w.release_read(), Err(LockWordError::NotHeld(Access::Read)));
    assert_eq!(bits(&w), TWO_WAITING | UPDATE_FLAG);
    let w = word(WRITE_FLAG);
    assert_eq!(w.release_read(), Err(LockWordError::NotHeld(Access::Read)));
    assert_eq!(bits(&w), WRITE_FLAG);
}

#[test]
fn try_acquire_update_lock() {
    let w = word(3);
    w.try_update().unwrap();
    assert_eq!(bits(&w), UPDATE_FLAG | 3);
    // Step 2: update flag, write flag, or a waiter makes it fail.
    assert_eq!(
        w.try_update(),
        Err(would_block(Access::Update, UPDATE_FLAG | 3))
    );
    let w = word(WRITE_FLAG);
    assert_eq!(w.try_update(), Err(would_block(Access::Update, WRITE_FLAG)));
    let w = word(WAIT_ONE);
    assert_eq!(w.try_update(), Err(would_block(Access::Update, WAIT_ONE)));
    assert_eq!(bits(&w), WAIT_ONE);
}

#[test]
fn release_update_lock() {
    let w = word(WAIT_ONE | UPDATE_FLAG | 4);
    w.release_update().unwrap();
    assert_eq!(bits(&w), WAIT_ONE | 4);
    assert_eq!(
        w.release_update(),
        Err(LockWordError::NotHeld(Access::Update))
    );
    assert_eq!(bits(&w), WAIT_ONE | 4);
}

#[test]
fn try_acquire_write_lock() {
    let w = LockWord::new();
    w.try_write().unwrap();
    assert_eq!(bits(&w), WRITE_FLAG);
    // Chronicle Map's procedure compares only the count word: registered waiters do not stop it, and their
    // registrations are carried over.
    let w = word(TWO_WAITING);
    w.try_write().unwrap();
    assert_eq!(bits(&w), TWO_WAITING | WRITE_FLAG);
}

#[test]
fn try_acquire_write_lock_fails_on_any_holder() {
    for held in [1, UPDATE_FLAG, WRITE_FLAG, UPDATE_FLAG | 7] {
        for waiting in [0, WAIT_ONE] {
            let w = word(waiting | held);
            assert_eq!(
                w.try_write(),
                Err(would_block(Access::Write, waiting | held))
            );
            assert_eq!(bits(&w), waiting | held);
        }
    }
}

#[test]
fn release_write_lock_and_downgrades() {
    for waiting in [0, TWO_WAITING] {
        let w = word(waiting | WRITE_FLAG);
        w.release_write().unwrap();
        assert_eq!(bits(&w), waiting);

        let w = word(waiting | WRITE_FLAG);
        w.downgrade_to_update().unwrap();
        assert_eq!(bits(&w), waiting | UPDATE_FLAG);

        let w = word(waiting | WRITE_FLAG);
        w.downgrade_to_read().unwrap();
        assert_eq!(bits(&w), waiting | 1);
    }
}

#[test]
fn release_write_lock_and_downgrades_fail_without_the_write_lock() {
    let not_held = LockWordError::NotHeld(Access::Write);
    for state in [0, 1, UPDATE_FLAG, UPDATE_FLAG | 2, WAIT_ONE] {
        let w = word(state);
        assert_eq!(w.release_write(), Err(not_held));
        assert_eq!(w.downgrade_to_update(), Err(not_held));
        assert_eq!(w.downgrade_to_read(), Err(not_held));
        assert_eq!(bits(&w), state);
    }
}

#[test]
fn try_upgrade_to_write_lock() {
    for waiting in [0, TWO_WAITING] {
        let w = word(waiting | UPDATE_FLAG);
        w.try_upgrade().unwrap();
        assert_eq!(bits(&w), waiting | WRITE_FLAG);
    }
    // Readers present: fails, the update lock is kept.
    let w = word(UPDATE_FLAG | 2);
    assert_eq!(
        w.try_upgrade(),
        Err(would_block(Access::Write, UPDATE_FLAG | 2))
    );
    assert_eq!(bits(&w), UPDATE_FLAG | 2);
    // No update lock to upgrade.
    for state in [0, 3, WRITE_FLAG] {
        let w = word(state);
        assert_eq!(w.try_upgrade(), Err(LockWordError::NotHeld(Access::Update)));
        assert_eq!(bits(&w), state);
    }
}

#[test]
fn register_and_deregister_wait() {
    let w = word(UPDATE_FLAG | 5);
    w.register_wait().unwrap();
    w.register_wait().unwrap();
    assert_eq!(bits(&w), TWO_WAITING | UPDATE_FLAG | 5);
    w.deregister_wait().unwrap();
    w.deregister_wait().unwrap();
    assert_eq!(bits(&w), UPDATE_FLAG | 5);
    // Deregister wait, step 2: wait count underflow.
    assert_eq!(w.deregister_wait(), Err(LockWordError::WaitCountUnderflow));
    assert_eq!(bits(&w), UPDATE_FLAG | 5);
}

#[test]
fn register_wait_overflow() {
    let full = u64::from(MAX_WAIT_COUNT) << 32;
    let w = word(full | WRITE_FLAG);
    assert_eq!(w.register_wait(), Err(LockWordError::WaitCountOverflow));
    assert_eq!(bits(&w), full | WRITE_FLAG);
    let w = word(full - WAIT_ONE);
    w.register_wait().unwrap();
    assert_eq!(w.state().wait_count(), MAX_WAIT_COUNT);
}

#[test]
fn time_limited_read_and_update() {
    let w = LockWord::new();
    w.read_timeout(Duration::from_secs(1)).unwrap();
    w.update_timeout(Duration::from_secs(1)).unwrap();
    assert_eq!(bits(&w), UPDATE_FLAG | 1);

    // Held for writing: both give up after their limit, leaving the word alone.
    let w = word(WRITE_FLAG);
    assert_eq!(
        w.read_with_limit(&mut Attempts::new(3)),
        Err(LockWordError::TimedOut(Access::Read))
    );
    assert_eq!(
        w.update_with_limit(&mut Attempts::new(0)),
        Err(LockWordError::TimedOut(Access::Update))
    );
    assert_eq!(
        w.read_timeout(Duration::ZERO),
        Err(LockWordError::TimedOut(Access::Read))
    );
    assert_eq!(
        w.update_timeout(Duration::from_millis(1)),
        Err(LockWordError::TimedOut(Access::Update))
    );
    assert_eq!(bits(&w), WRITE_FLAG);

    // A registered waiter keeps both out as well.
    let w = word(WAIT_ONE | 1);
    assert!(w.read_with_limit(&mut Attempts::new(2)).is_err());
    assert!(w.update_with_limit(&mut Attempts::new(2)).is_err());
    assert_eq!(bits(&w), WAIT_ONE | 1);

    // Read count overflow fails at once rather than waiting.
    let w = word(u64::from(MAX_READ_COUNT));
    assert_eq!(
        w.read_timeout(Duration::from_secs(3600)),
        Err(LockWordError::ReadCountOverflow)
    );
}

#[test]
fn time_limited_read_gets_in_when_the_writer_leaves() {
    let w = word(WRITE_FLAG);
    let mut calls = 0;
    let mut limit = Between(|| {
        calls += 1;
        if calls == 2 {
            w.release_write().unwrap();
        }
        false
    });
    w.read_with_limit(&mut limit).unwrap();
    assert_eq!(calls, 2);
    assert_eq!(bits(&w), 1);
}

#[test]
fn time_limited_write_succeeds_at_once_on_a_free_lock() {
    let w = LockWord::new();
    w.write_timeout(Duration::from_secs(1)).unwrap();
    assert_eq!(bits(&w), WRITE_FLAG);
}

#[test]
fn time_limited_write_waits_registered_and_keeps_readers_out() {
    // Two readers hold the lock; the writer registers (step 2) and waits (steps 3-7).
    let w = word(2);
    let mut rounds = 0;
    let mut limit = Between(|| {
        rounds += 1;
        let seen = w.state();
        assert_eq!(seen.wait_count(), 1, "registered while waiting");
        // No writer starvation: new readers and update holders are refused meanwhile.
        assert!(matches!(
            w.try_read(),
            Err(LockWordError::WouldBlock { .. })
        ));
        assert!(matches!(
            w.try_update(),
            Err(LockWordError::WouldBlock { .. })
        ));
        // The old readers leave one per round.
        w.release_read().unwrap();
        false
    });
    w.write_with_limit(&mut limit).unwrap();
    assert_eq!(rounds, 2);
    // Step 6 took the wait off and set the write flag in one CAS.
    assert_eq!(bits(&w), WRITE_FLAG);
}

#[test]
fn time_limited_write_times_out_and_deregisters() {
    let w = word(WAIT_ONE | 1); // a reader, and somebody else's registration
    assert_eq!(
        w.write_with_limit(&mut Attempts::new(3)),
        Err(LockWordError::TimedOut(Access::Write))
    );
    assert_eq!(bits(&w), WAIT_ONE | 1, "only our own wait is taken back");
    // When a deadline passes is checked without a clock below (`Deadline` at an instant already
    // reached, and one that never comes); here only the outcome of a timed-out write counts.
    assert_eq!(
        w.write_timeout(Duration::from_millis(5)),
        Err(LockWordError::TimedOut(Access::Write))
    );
    assert_eq!(bits(&w), WAIT_ONE | 1);
}

#[test]
fn time_limited_write_fails_on_wait_count_overflow() {
    let full = u64::from(MAX_WAIT_COUNT) << 32;
    let w = word(full | 1);
    assert_eq!(
        w.write_timeout(Duration::from_secs(1)),
        Err(LockWordError::WaitCountOverflow)
    );
    assert_eq!(bits(&w), full | 1);
}

#[test]
fn time_limited_write_step5_fails_when_its_wait_vanished() {
    let w = word(1);
    let mut limit = Between(|| {
        // Another party removes our registration and the reader leaves.
        w.deregister_wait().unwrap();
        w.release_read().unwrap();
        false
    });
    assert_eq!(
        w.write_with_limit(&mut limit),
        Err(LockWordError::WaitCountUnderflow)
    );
    assert_eq!(bits(&w), 0);
}

#[test]
fn time_limited_upgrade() {
    let w = word(UPDATE_FLAG);
    w.upgrade_timeout(Duration::from_secs(1)).unwrap();
    assert_eq!(bits(&w), WRITE_FLAG);

    // Without the update lock it fails at once.
    for state in [0, 2, WRITE_FLAG] {
        let w = word(state);
        assert_eq!(
            w.upgrade_timeout(Duration::from_secs(1)),
            Err(LockWordError::NotHeld(Access::Update))
        );
        assert_eq!(bits(&w), state);
    }

    // Readers present: waits registered, keeps new readers out, gets in when they leave.
    let w = word(UPDATE_FLAG | 1);
    let mut limit = Between(|| {
        assert_eq!(w.state().wait_count(), 1);
        assert!(w.try_read().is_err());
        w.release_read().unwrap();
        false
    });
    w.upgrade_with_limit(&mut limit).unwrap();
    assert_eq!(bits(&w), WRITE_FLAG);
}

#[test]
fn time_limited_upgrade_times_out_keeping_the_update_lock() {
    let w = word(UPDATE_FLAG | 1);
    assert_eq!(
        w.upgrade_with_limit(&mut Attempts::new(2)),
        Err(LockWordError::TimedOut(Access::Write))
    );
    assert_eq!(bits(&w), UPDATE_FLAG | 1);
    assert_eq!(
        w.upgrade_timeout(Duration::ZERO),
        Err(LockWordError::TimedOut(Access::Write))
    );
    assert_eq!(bits(&w), UPDATE_FLAG | 1);
}

#[test]
fn time_limited_upgrade_notices_a_lost_update_lock() {
    let w = word(UPDATE_FLAG | 1);
    let mut limit = Between(|| {
        w.release_update().unwrap();
        false
    });
    assert_eq!(
        w.upgrade_with_limit(&mut limit),
        Err(LockWordError::NotHeld(Access::Update))
    );
    assert_eq!(bits(&w), 1, "the wait was deregistered");
}

#[test]
fn wait_limits() {
    let mut attempts = Attempts::new(2);
    assert!(!attempts.exhausted());
    assert!(!attempts.exhausted());
    assert!(attempts.exhausted());
    assert!(attempts.exhausted());
    // A timeout beyond the clock's range never passes, and never panics.
    assert!(!Deadline::after(Duration::MAX).exhausted());
    assert!(Deadline::at(Instant::now()).exhausted());
}

#[test]
fn a_borrowed_word_runs_the_same_procedures() {
    let atomic = AtomicU64::new(0);
    let w = LockWordRef::from_atomic(&atomic);
    w.try_update().unwrap();
    w.try_read().unwrap();
    assert_eq!(atomic.load(Ordering::SeqCst), UPDATE_FLAG | 1);
    w.release_read().unwrap();
    w.try_upgrade().unwrap();
    assert_eq!(atomic.load(Ordering::SeqCst), WRITE_FLAG);
    // A second view of the same atomic sees the same lock.
    let other = LockWordRef::from_atomic(&atomic);
    assert!(other.try_read().is_err());
    other.downgrade_to_read().unwrap();
    assert_eq!(w.state().read_count(), 1);

    let owned = LockWord::new();
    owned.word_ref().try_write().unwrap();
    assert!(owned.state().write_held());
    assert!(std::ptr::eq(
        owned.as_atomic(),
        owned.word_ref().as_atomic()
    ));
}

#[test]
fn errors_read_well_and_convert_into_the_crate_error() {
    assert_eq!(
        LockWordError::NotHeld(Access::Read).to_string(),
        "read lock is not held"
    );
    assert_eq!(
        LockWordError::TimedOut(Access::Write).to_string(),
        "timed out acquiring the write lock"
    );
    assert_eq!(
        would_block(Access::Update, WRITE_FLAG).to_string(),
        "update lock not available now (readers=0 update=false write=true waiting=0)"
    );
    assert!(
        LockWordError::ReadCountOverflow
            .to_string()
            .contains("1073741823")
    );
    assert_eq!(
        format!("{:?}", word(WRITE_FLAG)),
        "LockWord(WordState { read_count: 0, update: false, write: true, wait_count: 0 })"
    );
}
