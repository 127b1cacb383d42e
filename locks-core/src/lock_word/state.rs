//! The bit layout of the lock word (Chronicle Map's, "The Lock Structure") and its decoded form.
//!
//! ```text
//!  63                              32 31 30 29                             0
//! ┌──────────────────────────────────┬──┬──┬────────────────────────────────┐
//! │ wait count (0 ..= 2^31 - 1)      │W │U │ read count (0 ..= 2^30 - 1)    │
//! └──────────────────────────────────┴──┴──┴────────────────────────────────┘
//!        Chronicle Map's "wait word"          Chronicle Map's "count word"
//! ```
//!
//! The invariants every procedure of [`super::LockWordRef`] keeps (on a word that only these
//! procedures change):
//! - `W` set ⇒ `U` clear and read count 0: a writer is alone (the count word is exactly
//!   [`WRITE_FLAG`]);
//! - at most one update holder (`U`), which coexists with readers;
//! - the read count never exceeds [`MAX_READ_COUNT`] and the wait count never exceeds
//!   [`MAX_WAIT_COUNT`], so bit 63 stays clear and no count carries into its neighbour.

use std::fmt;

/// Bits 0..29: the number of read locks held. Invariant: a read lock is only taken when the
/// count is below [`MAX_READ_COUNT`], so it never carries into [`UPDATE_FLAG`].
pub const READ_COUNT_MASK: u64 = (1 << 30) - 1;

/// One read lock: the unit of the read count.
pub const READ_ONE: u64 = 1;

/// The largest read count, `2^30 - 1`. Chronicle Map's "Try acquire read lock", step 2: a read
/// acquisition fails when the count is already this large (read count overflow).
pub const MAX_READ_COUNT: u32 = (1 << 30) - 1;

/// Bit 30: the update lock flag. Invariant: set by at most one holder; never set together with
/// [`WRITE_FLAG`].
pub const UPDATE_FLAG: u64 = 1 << 30;

/// Bit 31: the write lock flag. Invariant: when set, the rest of the count word is zero (no
/// readers, no update holder); Chronicle Map's `0x80000000`.
pub const WRITE_FLAG: u64 = 1 << 31;

/// Bits 0..31: Chronicle Map's *count word* (read count, update flag, write flag). Every procedure
/// changes only this half, except the wait registration and the final step of a time-limited
/// write acquisition, which change the wait half (and the latter both halves at once).
pub const COUNT_WORD_MASK: u64 = 0xFFFF_FFFF;

/// The lowest bit of the wait count (bit 32): one registered waiting writer (or upgrader).
pub const WAIT_ONE: u64 = 1 << 32;

/// Bits 32..63: Chronicle Map's *wait word*, the number of writers (and upgraders) registered as
/// waiting. Invariant: while it is non-zero no new read or update lock is granted.
pub const WAIT_COUNT_MASK: u64 = !COUNT_WORD_MASK;

/// The largest wait count, `2^31 - 1`. Chronicle Map's "Register wait", step 2: registering one more
/// waiter fails (wait count overflow). Bit 63 therefore stays clear.
pub const MAX_WAIT_COUNT: u32 = (1 << 31) - 1;

/// How many bits the wait count is shifted by.
const WAIT_SHIFT: u32 = 32;

/// One decoded value of a lock word: a snapshot, already stale when it is looked at by anyone
/// but a quiescent observer. [`super::LockWord::state`] returns it; failed acquisitions carry it.
///
/// It keeps the raw 64 bits, so any bit pattern (for instance a word in shared memory written
/// by another implementation) decodes without loss.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WordState {
    bits: u64,
}

impl WordState {
    /// The free lock: no holder, no waiter.
    pub const FREE: WordState = WordState { bits: 0 };

    /// Decodes raw lock-word bits.
    #[inline]
    pub const fn from_bits(bits: u64) -> Self {
        Self { bits }
    }

    /// The raw 64 bits.
    #[inline]
    pub const fn bits(self) -> u64 {
        self.bits
    }

    /// Bits 0..29: how many read locks are held.
    #[inline]
    pub const fn read_count(self) -> u32 {
        (self.bits & READ_COUNT_MASK) as u32
    }

    /// Bit 30: whether the update lock is held.
    #[inline]
    pub const fn update_held(self) -> bool {
        self.bits & UPDATE_FLAG != 0
    }

    /// Bit 31: whether the write lock is held.
    #[inline]
    pub const fn write_held(self) -> bool {
        self.bits & WRITE_FLAG != 0
    }

    /// Bits 32..63: how many writers (or upgraders) are registered as waiting.
    #[inline]
    pub const fn wait_count(self) -> u32 {
        (self.bits >> WAIT_SHIFT) as u32
    }

    /// Bits 0..31: Chronicle Map's count word.
    #[inline]
    pub const fn count_word(self) -> u32 {
        (self.bits & COUNT_WORD_MASK) as u32
    }

    /// No lock held and no waiter registered.
    #[inline]
    pub const fn is_free(self) -> bool {
        self.bits == 0
    }

    /// Whether a new read lock could be granted now (Chronicle Map's "Try acquire read lock", step 2,
    /// without the overflow check): no writer, no registered waiter.
    #[inline]
    pub(crate) const fn admits_reader(self) -> bool {
        self.bits & (WRITE_FLAG | WAIT_COUNT_MASK) == 0
    }
}

impl fmt::Debug for WordState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WordState")
            .field("read_count", &self.read_count())
            .field("update", &self.update_held())
            .field("write", &self.write_held())
            .field("wait_count", &self.wait_count())
            .finish()
    }
}

impl fmt::Display for WordState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "readers={} update={} write={} waiting={}",
            self.read_count(),
            self.update_held(),
            self.write_held(),
            self.wait_count()
        )
    }
}
