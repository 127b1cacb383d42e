//! How a lock-word procedure fails: Chronicle Map's "the procedure fails", with the reason.

use super::state::{MAX_READ_COUNT, MAX_WAIT_COUNT, WordState};
use std::fmt;

/// The three kinds of lock a lock word grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// A read lock (shared with other readers and with the update holder).
    Read,
    /// The update lock (shared with readers, exclusive among update and write holders; may be
    /// upgraded to the write lock).
    Update,
    /// The write lock (exclusive).
    Write,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Read => "read",
            Access::Update => "update",
            Access::Write => "write",
        })
    }
}

/// Why a procedure on a lock word failed. None of these changes the lock word: a failed
/// procedure leaves it as it was (a failed time-limited acquisition deregisters its wait).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockWordError {
    /// A `try_*` attempt found the lock held or reserved in a conflicting way (or lost the
    /// compare-and-swap race); `observed` is the state that made it fail.
    #[error("{access} lock not available now ({observed})")]
    WouldBlock {
        /// What was being acquired.
        access: Access,
        /// The lock word as the attempt saw it last.
        observed: WordState,
    },
    /// A time-limited acquisition ran out of time (or of attempts) and gave up.
    #[error("timed out acquiring the {0} lock")]
    TimedOut(Access),
    /// The read count is already at its maximum (Chronicle Map's "Try acquire read lock", step 2).
    #[error("read count overflow: {MAX_READ_COUNT} read locks are already held")]
    ReadCountOverflow,
    /// The wait count is already at its maximum (Chronicle Map's "Register wait", step 2).
    #[error("wait count overflow: {MAX_WAIT_COUNT} waiters are already registered")]
    WaitCountOverflow,
    /// A wait was deregistered, or a registered waiter tried to take the lock, while the wait
    /// count was zero (Chronicle Map's "Deregister wait", step 2, and "Time-limited write lock
    /// acquisition", step 5): someone else changed the word behind this waiter's back.
    #[error("wait count underflow: no waiter is registered")]
    WaitCountUnderflow,
    /// A release, downgrade or upgrade of a lock that is not held in the needed mode.
    #[error("{0} lock is not held")]
    NotHeld(Access),
}
