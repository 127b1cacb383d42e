//! Releases and downgrades for callers that *know* they hold the lock: [`crate::RwuLock`]'s
//! guards, whose existence proves it.
//!
//! Chronicle Map's lock word releases with a checked compare-and-swap (read, check, CAS, retry), which is what
//! [`LockWord::release_read`] and its siblings do, because a caller of the bare word may release
//! what it does not hold and must get an error. A guard cannot: while it lives, the bit or count
//! it stands for is set, so the new value is the old one minus a constant, with no borrow into
//! the neighbouring field and the wait word untouched. A single 64-bit `fetch_sub` then gives
//! the same result as Chronicle Map's CAS loop without its retries under contention (the 64-bit
//! read-modify-write still leaves the other half alone). Debug builds check the precondition.

use super::state::{READ_COUNT_MASK, READ_ONE, UPDATE_FLAG, WRITE_FLAG};
use super::{LockWord, WordStorage};
use crate::sync::Ordering::Release;

impl<W: WordStorage> LockWord<W> {
    /// "Release read lock" for a caller that holds a read lock.
    #[inline]
    pub(crate) fn release_read_held(&self) {
        let before = self.as_atomic().fetch_sub(READ_ONE, Release);
        debug_assert!(before & READ_COUNT_MASK != 0, "read lock not held");
    }

    /// "Release update lock" for the update holder.
    #[inline]
    pub(crate) fn release_update_held(&self) {
        let before = self.as_atomic().fetch_sub(UPDATE_FLAG, Release);
        debug_assert!(before & UPDATE_FLAG != 0, "update lock not held");
    }

    /// "Release write lock" for the writer: count word `0x80000000` -> `0`.
    #[inline]
    pub(crate) fn release_write_held(&self) {
        let before = self.as_atomic().fetch_sub(WRITE_FLAG, Release);
        debug_assert!(before & WRITE_FLAG != 0, "write lock not held");
    }

    /// "Write to read lock downgrade" for the writer: count word `0x80000000` -> `1`.
    #[inline]
    pub(crate) fn downgrade_to_read_held(&self) {
        let before = self.as_atomic().fetch_sub(WRITE_FLAG - READ_ONE, Release);
        debug_assert!(before & WRITE_FLAG != 0, "write lock not held");
    }

    /// "Write to update lock downgrade" for the writer: count word `0x80000000` -> `0x40000000`.
    #[inline]
    pub(crate) fn downgrade_to_update_held(&self) {
        let before = self
            .as_atomic()
            .fetch_sub(WRITE_FLAG - UPDATE_FLAG, Release);
        debug_assert!(before & WRITE_FLAG != 0, "write lock not held");
    }
}
