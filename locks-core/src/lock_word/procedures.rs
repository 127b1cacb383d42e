//! The single-attempt procedures of Chronicle Map's lock word: try acquire, release, downgrade, upgrade, and the
//! wait registration. Each fast path is `#[inline]`; what it does only when it lost a race or
//! the word is not in the common state lives in a `#[cold]` `*_slow` function.

use super::error::{Access, LockWordError};
use super::state::{
    COUNT_WORD_MASK, MAX_READ_COUNT, MAX_WAIT_COUNT, READ_COUNT_MASK, READ_ONE, UPDATE_FLAG,
    WAIT_COUNT_MASK, WAIT_ONE, WRITE_FLAG, WordState,
};
use super::{LockWord, WordStorage};
use crate::sync::Ordering::{Acquire, Relaxed, Release};

/// Why one acquisition attempt failed, for the waiting procedures to decide what to do next.
#[derive(Clone, Copy, Debug)]
pub(super) enum Miss {
    /// The word (these bits) does not admit the lock now.
    Blocked(u64),
    /// The word admitted the lock but the CAS lost a race; these are the bits it found.
    Raced(u64),
    /// Read count overflow.
    ReadOverflow,
}

impl Miss {
    /// The error a `try_*` procedure reports for this miss.
    pub(super) fn into_error(self, access: Access) -> LockWordError {
        match self {
            Miss::Blocked(bits) | Miss::Raced(bits) => LockWordError::WouldBlock {
                access,
                observed: WordState::from_bits(bits),
            },
            Miss::ReadOverflow => LockWordError::ReadCountOverflow,
        }
    }
}

impl<W: WordStorage> LockWord<W> {
    /// Chronicle Map's "Try acquire read lock": one attempt to take a read lock.
    ///
    /// Fails with [`LockWordError::WouldBlock`] when the write lock is held, a writer is
    /// registered as waiting, or the CAS lost a race (Chronicle Map's does not retry; see the module
    /// docs on spurious failures), and with [`LockWordError::ReadCountOverflow`] when
    /// [`MAX_READ_COUNT`] read locks are held.
    #[inline]
    pub fn try_read(&self) -> Result<(), LockWordError> {
        // Step 1: read the lock state.
        let bits = self.load(Relaxed);
        self.read_attempt(bits)
            .map_err(|miss| miss.into_error(Access::Read))
    }

    /// Steps 2–4 of "Try acquire read lock" on the state `bits` read in step 1.
    #[inline]
    pub(super) fn read_attempt(&self, bits: u64) -> Result<(), Miss> {
        // Step 2: fail on a writer, a waiting writer, or a full read count.
        if !WordState::from_bits(bits).admits_reader() {
            return Err(Miss::Blocked(bits));
        }
        if bits & READ_COUNT_MASK == u64::from(MAX_READ_COUNT) {
            return Err(Miss::ReadOverflow);
        }
        // Steps 3–4: CAS in the incremented read count; the CAS decides.
        match self.cas(bits, bits + READ_ONE, Acquire) {
            Ok(_) => Ok(()),
            Err(actual) => Err(Miss::Raced(actual)),
        }
    }

    /// Chronicle Map's "Release read lock": gives back one read lock.
    ///
    /// Fails with [`LockWordError::NotHeld`] when the read count is zero (step 2); the word is
    /// then unchanged.
    #[inline]
    pub fn release_read(&self) -> Result<(), LockWordError> {
        // Step 1: read the lock state.
        let mut bits = self.load(Relaxed);
        loop {
            // Step 2.
            if bits & READ_COUNT_MASK == 0 {
                return Err(LockWordError::NotHeld(Access::Read));
            }
            // Steps 3–4; on failure the CAS has read the state again: continue from step 2.
            match self.cas_weak(bits, bits - READ_ONE, Release) {
                Ok(_) => return Ok(()),
                Err(actual) => bits = actual,
            }
        }
    }

    /// Chronicle Map's "Try acquire update lock": one attempt to take the update lock.
    ///
    /// Fails with [`LockWordError::WouldBlock`] when the update or write lock is held, a writer
    /// is registered as waiting, or the CAS lost a race.
    #[inline]
    pub fn try_update(&self) -> Result<(), LockWordError> {
        // Step 1: read the lock state.
        let bits = self.load(Relaxed);
        self.update_attempt(bits)
            .map_err(|miss| miss.into_error(Access::Update))
    }

    /// Steps 2–4 of "Try acquire update lock" on the state `bits` read in step 1.
    #[inline]
    pub(super) fn update_attempt(&self, bits: u64) -> Result<(), Miss> {
        // Step 2: fail on an update or write holder, or a waiting writer.
        if bits & (UPDATE_FLAG | WRITE_FLAG | WAIT_COUNT_MASK) != 0 {
            return Err(Miss::Blocked(bits));
        }
        // Steps 3–4: CAS in the update flag; the CAS decides.
        match self.cas(bits, bits | UPDATE_FLAG, Acquire) {
            Ok(_) => Ok(()),
            Err(actual) => Err(Miss::Raced(actual)),
        }
    }

    /// Chronicle Map's "Release update lock": gives back the update lock.
    ///
    /// Fails with [`LockWordError::NotHeld`] when the update flag is not set (step 2).
    #[inline]
    pub fn release_update(&self) -> Result<(), LockWordError> {
        // Step 1: read the lock state.
        let mut bits = self.load(Relaxed);
        loop {
            // Step 2.
            if bits & UPDATE_FLAG == 0 {
                return Err(LockWordError::NotHeld(Access::Update));
            }
            // Steps 3–4; on failure continue from step 2 with the state the CAS read.
            match self.cas_weak(bits, bits & !UPDATE_FLAG, Release) {
                Ok(_) => return Ok(()),
                Err(actual) => bits = actual,
            }
        }
    }

    /// Chronicle Map's "Try acquire write lock": takes the write lock if the count word is zero (no
    /// reader, no update or write holder). Registered waiters do not stop it.
    ///
    /// This is Chronicle Map's variant without the optional steps 1–2, for a lock that is most likely
    /// free: the first CAS guesses the whole word is zero. Fails with
    /// [`LockWordError::WouldBlock`].
    #[inline]
    pub fn try_write(&self) -> Result<(), LockWordError> {
        // Step 3, guessing an empty wait word as well.
        match self.cas(0, WRITE_FLAG, Acquire) {
            Ok(_) => Ok(()),
            Err(actual) => self.try_write_slow(actual),
        }
    }

    /// [`try_write`](Self::try_write) after the first CAS missed: the word was `actual`.
    #[cold]
    #[inline(never)]
    fn try_write_slow(&self, actual: u64) -> Result<(), LockWordError> {
        self.write_attempt(actual)
            .map_err(|miss| miss.into_error(Access::Write))
    }

    /// "Try acquire write lock" with the optional steps, on the state `bits` already read
    /// (step 1). A count-word CAS in Chronicle Map's design cannot fail because of the wait word; this 64-bit
    /// one retries at once while only the wait half changed, to give Chronicle Map's result.
    #[inline]
    pub(super) fn write_attempt(&self, mut bits: u64) -> Result<(), Miss> {
        loop {
            // Step 2: the count word must be zero.
            if bits & COUNT_WORD_MASK != 0 {
                return Err(Miss::Blocked(bits));
            }
            // Step 3: count word 0 -> 0x80000000, wait word carried over.
            match self.cas_weak(bits, bits | WRITE_FLAG, Acquire) {
                Ok(_) => return Ok(()),
                Err(actual) => bits = actual,
            }
        }
    }

    /// "Try acquire write lock" with the optional steps 1-2 (`from == 0`), or "Try upgrade to
    /// write lock" (`from == UPDATE_FLAG`), for a word that is most likely busy: reads first and
    /// CASes only when the count word is `from`, carrying the wait word over. For waiting loops.
    #[inline]
    pub(crate) fn exclusive_attempt(&self, from: u64) -> bool {
        let bits = self.load(Relaxed);
        bits & COUNT_WORD_MASK == from
            && self
                .cas(bits, (bits & WAIT_COUNT_MASK) | WRITE_FLAG, Acquire)
                .is_ok()
    }

    /// Chronicle Map's "Release write lock": count word `0x80000000` -> `0`.
    ///
    /// Fails with [`LockWordError::NotHeld`] when the count word is not exactly the write flag.
    #[inline]
    pub fn release_write(&self) -> Result<(), LockWordError> {
        self.replace_count_word(WRITE_FLAG, 0, Release)
            .map_err(|_| LockWordError::NotHeld(Access::Write))
    }

    /// Chronicle Map's "Write to update lock downgrade": count word `0x80000000` -> `0x40000000`. The
    /// holder keeps the update lock, readers may come in (unless writers are waiting).
    ///
    /// Fails with [`LockWordError::NotHeld`] when the write lock is not held.
    #[inline]
    pub fn downgrade_to_update(&self) -> Result<(), LockWordError> {
        self.replace_count_word(WRITE_FLAG, UPDATE_FLAG, Release)
            .map_err(|_| LockWordError::NotHeld(Access::Write))
    }

    /// Chronicle Map's "Write to read lock downgrade": count word `0x80000000` -> `1`. The holder keeps
    /// one read lock.
    ///
    /// Fails with [`LockWordError::NotHeld`] when the write lock is not held.
    #[inline]
    pub fn downgrade_to_read(&self) -> Result<(), LockWordError> {
        self.replace_count_word(WRITE_FLAG, READ_ONE, Release)
            .map_err(|_| LockWordError::NotHeld(Access::Write))
    }

    /// Chronicle Map's "Try upgrade to write lock": count word `0x40000000` -> `0x80000000`, i.e. the
    /// update holder becomes the writer once no reader is left. Registered waiters do not stop
    /// it.
    ///
    /// Fails with [`LockWordError::WouldBlock`] while readers hold the lock (the update lock is
    /// kept), and with [`LockWordError::NotHeld`] when the update lock is not held.
    #[inline]
    pub fn try_upgrade(&self) -> Result<(), LockWordError> {
        self.upgrade_attempt().map_err(upgrade_error)
    }

    /// One "Try upgrade to write lock"; on failure, the bits that made it fail.
    #[inline]
    pub(super) fn upgrade_attempt(&self) -> Result<(), u64> {
        self.replace_count_word(UPDATE_FLAG, WRITE_FLAG, Acquire)
    }

    /// Chronicle Map's single count-word CAS `from -> to`, as a 64-bit CAS that carries the wait
    /// word over. The first attempt guesses no waiter; [`Self::replace_count_word_slow`] retries
    /// with the real wait word. On failure returns the bits whose count word was not `from`.
    #[inline]
    fn replace_count_word(
        &self,
        from: u64,
        to: u64,
        success: crate::sync::Ordering,
    ) -> Result<(), u64> {
        match self.cas(from, to, success) {
            Ok(_) => Ok(()),
            Err(actual) => self.replace_count_word_slow(actual, from, to, success),
        }
    }

    #[cold]
    #[inline(never)]
    fn replace_count_word_slow(
        &self,
        mut bits: u64,
        from: u64,
        to: u64,
        success: crate::sync::Ordering,
    ) -> Result<(), u64> {
        loop {
            if bits & COUNT_WORD_MASK != from {
                return Err(bits);
            }
            match self.cas_weak(bits, (bits & WAIT_COUNT_MASK) | to, success) {
                Ok(_) => return Ok(()),
                Err(actual) => bits = actual,
            }
        }
    }

    /// Chronicle Map's "Register wait": adds one to the wait count, which keeps new readers and update
    /// holders out until the waiter deregisters or takes the write lock (step 6 of the
    /// time-limited write acquisition). The time-limited procedures call this themselves; it is
    /// public for callers that build their own waiting loop.
    ///
    /// Fails with [`LockWordError::WaitCountOverflow`] when [`MAX_WAIT_COUNT`] waiters are
    /// registered (step 2).
    pub fn register_wait(&self) -> Result<(), LockWordError> {
        // Step 1: read the wait word (with the rest of the word).
        let mut bits = self.load(Relaxed);
        loop {
            // Step 2.
            if WordState::from_bits(bits).wait_count() >= MAX_WAIT_COUNT {
                return Err(LockWordError::WaitCountOverflow);
            }
            // Step 3; on failure start again from step 2 with the state the CAS read.
            match self.cas_weak(bits, bits + WAIT_ONE, Relaxed) {
                Ok(_) => return Ok(()),
                Err(actual) => bits = actual,
            }
        }
    }

    /// Chronicle Map's "Deregister wait": takes one off the wait count.
    ///
    /// Fails with [`LockWordError::WaitCountUnderflow`] when the wait count is zero (step 2).
    pub fn deregister_wait(&self) -> Result<(), LockWordError> {
        // Step 1.
        let mut bits = self.load(Relaxed);
        loop {
            // Step 2.
            if bits & WAIT_COUNT_MASK == 0 {
                return Err(LockWordError::WaitCountUnderflow);
            }
            // Step 3; on failure start again from step 2.
            match self.cas_weak(bits, bits - WAIT_ONE, Relaxed) {
                Ok(_) => return Ok(()),
                Err(actual) => bits = actual,
            }
        }
    }
}

/// The error of a failed upgrade whose word was `bits`: busy while the update lock is held
/// (readers are still in), not held otherwise.
pub(super) fn upgrade_error(bits: u64) -> LockWordError {
    if bits & COUNT_WORD_MASK & !READ_COUNT_MASK == UPDATE_FLAG {
        LockWordError::WouldBlock {
            access: Access::Write,
            observed: WordState::from_bits(bits),
        }
    } else {
        LockWordError::NotHeld(Access::Update)
    }
}
