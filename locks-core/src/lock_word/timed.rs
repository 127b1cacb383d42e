//! The time-limited procedures of Chronicle Map's lock word ("Time-limited read or update lock acquisition" and
//! "Time-limited write lock acquisition or update to write upgrade"), the limits they run under,
//! and the backoff between their attempts.
//!
//! Chronicle Map's design requires these procedures to give up "after some finite number of failed attempts
//! or some finite time elapsed". [`WaitLimit`] is that bound, injected: [`Deadline`] reads the
//! clock, [`Attempts`] counts, and a test (or a loom model, where time does not exist) can bring
//! its own.
//!
//! Between attempts a waiter backs off exponentially: `2^k` spin-loop hints for the first rounds
//! (1 to 8), then yielding the CPU, then sleeps from 1 µs doubling to 200 µs (see [`Backoff`]).
//! Spinning with one hint per retry loses badly under contention on the target machine (the
//! lock-word figures in `BENCHMARKS.md`).

use super::error::{Access, LockWordError};
use super::procedures::{Miss, upgrade_error};
use super::state::{
    COUNT_WORD_MASK, UPDATE_FLAG, WAIT_COUNT_MASK, WAIT_ONE, WRITE_FLAG, WordState,
};
use super::{LockWord, WordStorage};
use crate::sync::{self, Ordering::Acquire, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// When a time-limited procedure must give up (Chronicle Map's lock word: "after some finite number of failed
/// attempts or some finite time elapsed since the time-limited lock acquisition procedure
/// starts, the procedure must fail").
pub trait WaitLimit {
    /// Called after each failed attempt (before backing off); `true` means give up now. The
    /// procedure then fails with [`LockWordError::TimedOut`], after deregistering its wait if it
    /// registered one.
    fn exhausted(&mut self) -> bool;
}

/// A limit in time: exhausted once the clock reaches a given instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    /// `None`: the deadline lies beyond what [`Instant`] can represent, so it never passes.
    at: Option<Instant>,
}

impl Deadline {
    /// A deadline at `at`.
    pub fn at(at: Instant) -> Self {
        Self { at: Some(at) }
    }

    /// A deadline `timeout` from now. A timeout too large for the clock never passes.
    pub fn after(timeout: Duration) -> Self {
        Self {
            at: Instant::now().checked_add(timeout),
        }
    }
}

impl WaitLimit for Deadline {
    #[inline]
    fn exhausted(&mut self) -> bool {
        self.at.is_some_and(|at| Instant::now() >= at)
    }
}

/// A limit in attempts: allows this many failed attempts after the first one, then gives up.
/// Deterministic, so tests and loom models use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempts {
    left: u64,
}

impl Attempts {
    /// Allows `retries` more attempts after the first failed one.
    pub const fn new(retries: u64) -> Self {
        Self { left: retries }
    }
}

impl WaitLimit for Attempts {
    #[inline]
    fn exhausted(&mut self) -> bool {
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                false
            }
            None => true,
        }
    }
}

/// No limit: the blocking acquisitions of [`crate::RwuLock`], which wait like `std`'s locks do.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unbounded;

impl WaitLimit for Unbounded {
    #[inline]
    fn exhausted(&mut self) -> bool {
        false
    }
}

/// Exponential backoff between failed attempts: Chronicle Map's optional "directives aimed to yield
/// the resources".
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    /// Rounds `0..=SPIN_ROUNDS` spin `2^round` times (1 to 8 hints), as parking_lot's
    /// `SpinWait` does before it yields.
    const SPIN_ROUNDS: u32 = 3;
    /// Then this many rounds yield the CPU once each.
    const YIELD_ROUNDS: u32 = 10;
    /// Then every round sleeps, starting at 1 µs and doubling up to this. Kept short: a
    /// registered writer that sleeps keeps readers out of a lock that may already be free.
    const MAX_SLEEP: Duration = Duration::from_micros(200);

    pub(crate) const fn new() -> Self {
        Self { step: 0 }
    }

    /// Waits a little longer than last time.
    pub(crate) fn snooze(&mut self) {
        let step = self.step;
        if step <= Self::SPIN_ROUNDS {
            // Under loom one yield per round is enough; more only multiplies the schedules.
            #[cfg(loom)]
            sync::spin_loop();
            #[cfg(not(loom))]
            for _ in 0..1u32 << step {
                sync::spin_loop();
            }
        } else if step <= Self::SPIN_ROUNDS + Self::YIELD_ROUNDS {
            sync::yield_now();
        } else {
            let doublings = (step - Self::SPIN_ROUNDS - Self::YIELD_ROUNDS - 1).min(10);
            sync::sleep(Duration::from_micros(1 << doublings).min(Self::MAX_SLEEP));
        }
        self.step = step.saturating_add(1);
    }
}

/// How many times in a row a read or update attempt that lost its CAS to a compatible holder is
/// retried at once, before the waiter backs off and counts a failed attempt.
const QUICK_RETRIES: u32 = 8;

impl<W: WordStorage> LockWord<W> {
    /// Chronicle Map's "Time-limited read or update lock acquisition", for a read lock, limited to
    /// `timeout` of wall-clock time.
    ///
    /// Fails with [`LockWordError::TimedOut`] when the time is up, and at once with
    /// [`LockWordError::ReadCountOverflow`] when the read count is full.
    #[inline]
    pub fn read_timeout(&self, timeout: Duration) -> Result<(), LockWordError> {
        match self.read_attempt(self.load(Relaxed)) {
            Ok(()) => Ok(()),
            Err(miss) => self.shared_slow(Access::Read, miss, &mut Deadline::after(timeout)),
        }
    }

    /// [`read_timeout`](Self::read_timeout) under any [`WaitLimit`].
    #[inline]
    pub fn read_with_limit<L: WaitLimit>(&self, limit: &mut L) -> Result<(), LockWordError> {
        match self.read_attempt(self.load(Relaxed)) {
            Ok(()) => Ok(()),
            Err(miss) => self.shared_slow(Access::Read, miss, limit),
        }
    }

    /// Chronicle Map's "Time-limited read or update lock acquisition", for the update lock, limited to
    /// `timeout`. Fails with [`LockWordError::TimedOut`].
    #[inline]
    pub fn update_timeout(&self, timeout: Duration) -> Result<(), LockWordError> {
        match self.update_attempt(self.load(Relaxed)) {
            Ok(()) => Ok(()),
            Err(miss) => self.shared_slow(Access::Update, miss, &mut Deadline::after(timeout)),
        }
    }

    /// [`update_timeout`](Self::update_timeout) under any [`WaitLimit`].
    #[inline]
    pub fn update_with_limit<L: WaitLimit>(&self, limit: &mut L) -> Result<(), LockWordError> {
        match self.update_attempt(self.load(Relaxed)) {
            Ok(()) => Ok(()),
            Err(miss) => self.shared_slow(Access::Update, miss, limit),
        }
    }

    /// The repeated "try acquire" of a read or update lock after the first attempt missed.
    ///
    /// A lost CAS whose winner left the word still admitting the lock (another reader came in)
    /// is retried at once, up to [`QUICK_RETRIES`] times; anything else counts as a failed
    /// attempt: check the limit, back off, read the word again.
    #[cold]
    #[inline(never)]
    pub(super) fn shared_slow<L: WaitLimit>(
        &self,
        access: Access,
        mut miss: Miss,
        limit: &mut L,
    ) -> Result<(), LockWordError> {
        let mut backoff = Backoff::new();
        let mut quick = 0;
        loop {
            let bits = match miss {
                Miss::ReadOverflow => return Err(LockWordError::ReadCountOverflow),
                Miss::Raced(actual) if quick < QUICK_RETRIES && admits(access, actual) => {
                    quick += 1;
                    actual
                }
                Miss::Raced(_) | Miss::Blocked(_) => {
                    if limit.exhausted() {
                        return Err(LockWordError::TimedOut(access));
                    }
                    backoff.snooze();
                    quick = 0;
                    self.load(Relaxed)
                }
            };
            let attempt = match access {
                Access::Read => self.read_attempt(bits),
                _ => self.update_attempt(bits),
            };
            match attempt {
                Ok(()) => return Ok(()),
                Err(next) => miss = next,
            }
        }
    }

    /// Chronicle Map's "Time-limited write lock acquisition", limited to `timeout`.
    ///
    /// After a failed first attempt the writer registers as waiting, which keeps new readers
    /// and update holders out until it gets the lock or gives up (no writer starvation). Fails
    /// with [`LockWordError::TimedOut`] (the wait is deregistered) or
    /// [`LockWordError::WaitCountOverflow`] (step 2).
    #[inline]
    pub fn write_timeout(&self, timeout: Duration) -> Result<(), LockWordError> {
        // Step 1: try acquire write lock.
        match self.try_write() {
            Ok(()) => Ok(()),
            Err(_) => self.exclusive_slow(0, &mut Deadline::after(timeout), &mut Backoff::new()),
        }
    }

    /// [`write_timeout`](Self::write_timeout) under any [`WaitLimit`].
    #[inline]
    pub fn write_with_limit<L: WaitLimit>(&self, limit: &mut L) -> Result<(), LockWordError> {
        match self.try_write() {
            Ok(()) => Ok(()),
            Err(_) => self.exclusive_slow(0, limit, &mut Backoff::new()),
        }
    }

    /// Chronicle Map's "Time-limited update to write upgrade", limited to `timeout`: the update holder
    /// waits for the readers to leave, keeping new ones out meanwhile.
    ///
    /// On [`LockWordError::TimedOut`] the caller still holds the update lock. Fails at once with
    /// [`LockWordError::NotHeld`] when the update lock is not held.
    #[inline]
    pub fn upgrade_timeout(&self, timeout: Duration) -> Result<(), LockWordError> {
        // Step 1: try upgrade to write lock.
        match self.upgrade_attempt() {
            Ok(()) => Ok(()),
            Err(bits) => self.upgrade_slow(bits, &mut Deadline::after(timeout)),
        }
    }

    /// [`upgrade_timeout`](Self::upgrade_timeout) under any [`WaitLimit`].
    #[inline]
    pub fn upgrade_with_limit<L: WaitLimit>(&self, limit: &mut L) -> Result<(), LockWordError> {
        match self.upgrade_attempt() {
            Ok(()) => Ok(()),
            Err(bits) => self.upgrade_slow(bits, limit),
        }
    }

    #[cold]
    #[inline(never)]
    fn upgrade_slow<L: WaitLimit>(&self, bits: u64, limit: &mut L) -> Result<(), LockWordError> {
        match upgrade_error(bits) {
            LockWordError::WouldBlock { .. } => {
                self.exclusive_slow(UPDATE_FLAG, limit, &mut Backoff::new())
            }
            not_held => Err(not_held),
        }
    }

    /// Steps 2–7 of Chronicle Map's lock word "Time-limited write lock acquisition or update to write upgrade",
    /// after step 1 failed. `from` is the count word that lets the lock go to the waiter: `0`
    /// for a write acquisition, `0x40000000` (the waiter's own update flag) for an upgrade.
    /// `backoff` goes on from where the caller's own waiting (if any) left it.
    #[cold]
    #[inline(never)]
    pub(crate) fn exclusive_slow<L: WaitLimit>(
        &self,
        from: u64,
        limit: &mut L,
        backoff: &mut Backoff,
    ) -> Result<(), LockWordError> {
        // Step 2: register a wait; if that fails, so does this procedure.
        self.register_wait()?;
        loop {
            // Step 3: read the lock state.
            let bits = self.load(Relaxed);
            let count = bits & COUNT_WORD_MASK;
            // Step 4: only the expected count word lets us in.
            if count == from {
                // Step 5: our own registration must still be there.
                if bits & WAIT_COUNT_MASK == 0 {
                    return Err(LockWordError::WaitCountUnderflow);
                }
                // Step 6: whole-word CAS, our wait off and the write flag on, in one step.
                let new = ((bits & WAIT_COUNT_MASK) - WAIT_ONE) | WRITE_FLAG;
                if self.cas(bits, new, Acquire).is_ok() {
                    return Ok(());
                }
            } else if from == UPDATE_FLAG && count & (UPDATE_FLAG | WRITE_FLAG) != UPDATE_FLAG {
                // Not in Chronicle Map's design: an upgrader whose update flag vanished (someone released it
                // behind its back) would otherwise wait for nothing until its limit.
                let _ = self.deregister_wait();
                return Err(LockWordError::NotHeld(Access::Update));
            }
            // Step 7: out of time (or attempts)? Then deregister and fail; else back off and
            // continue from step 3.
            if limit.exhausted() {
                let _ = self.deregister_wait();
                return Err(LockWordError::TimedOut(Access::Write));
            }
            backoff.snooze();
        }
    }
}

/// Whether the word `bits` admits a new lock of this (shared) kind.
#[inline]
fn admits(access: Access, bits: u64) -> bool {
    let state = WordState::from_bits(bits);
    match access {
        Access::Read => state.admits_reader(),
        _ => bits & (UPDATE_FLAG | WRITE_FLAG | WAIT_COUNT_MASK) == 0,
    }
}
