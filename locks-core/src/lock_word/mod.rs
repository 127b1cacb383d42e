//! Chronicle Map's 64-bit read/update/write lock word (Chronicle Map's, "The Lock Structure and Locking
//! Operations"), on one `AtomicU64`.
//!
//! This module owns the bit layout ([`state`]), every procedure of Chronicle Map's design ([`LockWord`]'s
//! methods), the time limits of the waiting procedures ([`WaitLimit`]) and their errors
//! ([`LockWordError`]). [`crate::RwuLock`] builds a safe lock on top of it.
//!
//! # Layout
//!
//! ```text
//!  63                32 31 30 29               0
//! ┌────────────────────┬──┬──┬──────────────────┐
//! │ wait count         │W │U │ read count       │
//! └────────────────────┴──┴──┴──────────────────┘
//! ```
//!
//! Read locks are shared among themselves and with the one update lock; the write lock is
//! exclusive. A writer (or upgrader) that has to wait *registers* in the wait count, and while
//! the wait count is non-zero no new read or update lock is granted, so a stream of readers
//! cannot starve a writer. The write lock itself can still be taken by a `try_write` that
//! arrives while other writers are registered (Chronicle Map's does not queue writers).
//!
//! # Procedures
//!
//! | Chronicle Map procedure | method |
//! | --- | --- |
//! | Try acquire read lock | [`LockWord::try_read`] |
//! | Release read lock | [`LockWord::release_read`] |
//! | Try acquire update lock | [`LockWord::try_update`] |
//! | Release update lock | [`LockWord::release_update`] |
//! | Time-limited read or update lock acquisition | [`LockWord::read_timeout`], [`LockWord::update_timeout`] (and `*_with_limit`) |
//! | Try acquire write lock | [`LockWord::try_write`] |
//! | Release write lock | [`LockWord::release_write`] |
//! | Write to update lock downgrade | [`LockWord::downgrade_to_update`] |
//! | Write to read lock downgrade | [`LockWord::downgrade_to_read`] |
//! | Try upgrade to write lock | [`LockWord::try_upgrade`] |
//! | Register wait / Deregister wait | [`LockWord::register_wait`] / [`LockWord::deregister_wait`] |
//! | Time-limited write lock acquisition or update to write upgrade | [`LockWord::write_timeout`], [`LockWord::upgrade_timeout`] (and `*_with_limit`) |
//!
//! # Every step is a 64-bit compare-and-swap
//!
//! Chronicle Map's design performs most steps as a 32-bit CAS on one half of the word (the *count word*, bits
//! 0..31, or the *wait word*, bits 32..63) and only the last step of a time-limited write
//! acquisition as a 64-bit CAS on the whole word. Mixing 32-bit and 64-bit atomic accesses to
//! one location is outside Rust's (and C++'s) memory model, and loom cannot check it, so here
//! every step is a 64-bit CAS that carries the other half over unchanged. Where that changes
//! behaviour:
//!
//! - *Release read/update, register/deregister wait*: Chronicle Map's CAS fails (and Chronicle Map's retries)
//!   only when its own half changed; ours also fails when the other half changed, and retries
//!   the same way. Same outcome, possibly more retries.
//! - *Try acquire write, release write, the downgrades, try upgrade*: Chronicle Map's single count-word
//!   CAS cannot fail because of the wait half. Ours retries at once while the count word still
//!   has the expected value and only the wait half moved, so the procedure succeeds or fails
//!   exactly when Chronicle Map's would; it is no longer a single instruction, but it loops only
//!   while waiters register or leave.
//! - *Try acquire read/update*: these stay single attempts as in Chronicle Map's ("if the CAS fails, the
//!   procedure fails"), so a waiter registering or leaving between the read and the CAS makes
//!   them fail where Chronicle Map's half-word CAS would have succeeded. A try may fail spuriously
//!   under contention anyway (another reader winning the race has the same effect in Chronicle Map's);
//!   the time-limited forms retry.
//!
//! One more departure, confined to [`crate::RwuLock`]: its guards release (and downgrade) with a
//! single 64-bit `fetch_sub` instead of Chronicle Map's checked CAS loop. A live guard proves the bit
//! or count it stands for is set, so the subtraction cannot borrow from a neighbouring field or
//! touch the wait word, and the result is the one Chronicle Map's procedure would produce, without
//! its retries under contention. The public release procedures here keep the checked CAS, since
//! their caller may not hold what it releases.
//!
//! # Memory ordering
//!
//! Every successful acquisition (try read, update, write, upgrade, step 6 of the time-limited
//! write) is an `Acquire` CAS; every release and downgrade is a `Release` CAS, so what a holder
//! wrote before releasing is visible to the next holder. The wait registrations grant nothing
//! and are `Relaxed`; they still continue the release sequence of the last release, being
//! read-modify-writes.
//!
//! # Borrowed words
//!
//! A [`LockWord`] owns its `AtomicU64`; a [`LockWordRef`] borrows one that lives elsewhere, for
//! example in a file mapped by several processes (Chronicle Map's use; see the `shared_word`
//! example). Both are the same type, [`LockWord<W>`], over a different [`WordStorage`], so they
//! run the very same code.

mod error;
mod held;
mod procedures;
pub mod state;
mod timed;

#[cfg(all(test, loom))]
mod loom_tests;

pub use error::{Access, LockWordError};
pub use state::WordState;
pub use timed::{Attempts, Deadline, WaitLimit};
pub(crate) use timed::{Backoff, Unbounded};

use crate::sync::{AtomicU64, Ordering};
use std::fmt;

/// Where a lock word's 64 bits live: in the lock itself ([`AtomicU64`]) or somewhere else
/// (`&AtomicU64`, for instance in memory shared between processes).
pub trait WordStorage {
    /// The atomic word.
    fn atomic(&self) -> &AtomicU64;
}

impl WordStorage for AtomicU64 {
    #[inline]
    fn atomic(&self) -> &AtomicU64 {
        self
    }
}

impl WordStorage for &AtomicU64 {
    #[inline]
    fn atomic(&self) -> &AtomicU64 {
        self
    }
}

/// Chronicle Map's read/update/write lock word (Chronicle Map's): one 64-bit atomic word holding the
/// read count, the update and write flags and the count of waiting writers (see the [module
/// docs](self) for the layout and the list of procedures).
///
/// `LockWord` (= `LockWord<AtomicU64>`) owns its word; [`LockWordRef`] borrows one. The word
/// records *how many* locks are held, not *who* holds them: releasing a read lock that another
/// thread took is not detected, only releasing one when none is held is. [`crate::RwuLock`]
/// adds ownership through RAII guards.
///
/// Nothing here parks a thread: waiting procedures spin with exponential backoff, then yield,
/// then sleep briefly, and always within a [`WaitLimit`] (Chronicle Map's design forbids indefinite waits).
#[derive(Default)]
pub struct LockWord<W = AtomicU64> {
    word: W,
}

/// A lock word borrowed from an `AtomicU64` that lives elsewhere (shared memory, a larger
/// structure). It runs exactly the code of [`LockWord`].
pub type LockWordRef<'a> = LockWord<&'a AtomicU64>;

impl LockWord<AtomicU64> {
    /// A free lock word: no lock held, no waiter.
    #[cfg(not(loom))]
    #[inline]
    pub const fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
        }
    }

    /// A free lock word: no lock held, no waiter.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
        }
    }

    /// A lock word starting from the given state (for tests and for restoring a word).
    #[cfg(not(loom))]
    #[inline]
    pub const fn from_state(state: WordState) -> Self {
        Self {
            word: AtomicU64::new(state.bits()),
        }
    }

    /// A lock word starting from the given state (for tests and for restoring a word).
    #[cfg(loom)]
    pub fn from_state(state: WordState) -> Self {
        Self {
            word: AtomicU64::new(state.bits()),
        }
    }

    /// Borrows this word as a [`LockWordRef`].
    #[inline]
    pub fn word_ref(&self) -> LockWordRef<'_> {
        LockWord { word: &self.word }
    }
}

impl<'a> LockWord<&'a AtomicU64> {
    /// Runs the lock-word procedures on an `AtomicU64` that lives elsewhere. The word's current
    /// bits are taken as they are; a fresh word must be zeroed (a zero-filled shared mapping
    /// is a free lock word).
    #[inline]
    pub const fn from_atomic(word: &'a AtomicU64) -> Self {
        Self { word }
    }
}

impl<W: WordStorage> LockWord<W> {
    /// The atomic word itself.
    #[inline]
    pub fn as_atomic(&self) -> &AtomicU64 {
        self.word.atomic()
    }

    /// Decodes the current value of the word. The snapshot may be stale as soon as it is
    /// returned unless no other thread touches the word.
    #[inline]
    pub fn state(&self) -> WordState {
        WordState::from_bits(self.load(Ordering::Acquire))
    }

    #[inline]
    fn load(&self, order: Ordering) -> u64 {
        self.word.atomic().load(order)
    }

    #[inline]
    fn cas(&self, current: u64, new: u64, success: Ordering) -> Result<u64, u64> {
        self.word
            .atomic()
            .compare_exchange(current, new, success, Ordering::Relaxed)
    }

    #[inline]
    fn cas_weak(&self, current: u64, new: u64, success: Ordering) -> Result<u64, u64> {
        self.word
            .atomic()
            .compare_exchange_weak(current, new, success, Ordering::Relaxed)
    }
}

impl<W: WordStorage> fmt::Debug for LockWord<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LockWord").field(&self.state()).finish()
    }
}
