//! A safe read/update/write lock on top of [`LockWord`]: the value and its lock word side by
//! side, and RAII guards that release what they hold when dropped.
//!
//! This module owns the only `unsafe` code of `locks-core`: handing out `&T` and `&mut T` from
//! an [`UnsafeCell`]. The invariant that makes it sound: a [`ReadGuard`] or [`UpdateGuard`]
//! exists only while the lock word counts the read or update lock it stands for, and a
//! [`WriteGuard`] only while the word's write flag is set; the lock word never grants the write
//! lock together with any other (see [`crate::lock_word::state`]), and nobody but the guards
//! touches the word (it is private). Releasing a lock that is not held therefore cannot happen
//! through this API.
//!
//! Modes, as in Chronicle Map and like parking_lot's upgradable reads:
//!
//! | guard | gives | shares the lock with | becomes |
//! | --- | --- | --- | --- |
//! | [`ReadGuard`] | `&T` | readers, the update holder | — |
//! | [`UpdateGuard`] | `&T` | readers | [`WriteGuard`] ([`UpdateGuard::upgrade`]) |
//! | [`WriteGuard`] | `&mut T` | nobody | [`ReadGuard`] ([`WriteGuard::downgrade`]) or [`UpdateGuard`] |
//!
//! Fairness: a writer (or upgrader) that has to wait registers in the lock word's wait count,
//! which keeps new readers and update holders out, so readers cannot starve it. Writers are not
//! queued among themselves. Nothing parks: waiting spins with exponential backoff, then yields,
//! then sleeps for at most 200 µs at a time.
//!
//! The blocking methods ([`RwuLock::read`], [`RwuLock::update`], [`RwuLock::write`],
//! [`UpdateGuard::upgrade`]) wait without limit, like `std`'s locks; Chronicle Map's lock word asks for time
//! limits, which the `*_timeout` methods give. A thread that waits for a lock it already holds
//! in a conflicting way (a write while holding a read guard, a read while a writer of its own
//! waits) deadlocks, as with any lock of this kind.

use crate::lock_word::state::UPDATE_FLAG;
use crate::lock_word::{Backoff, LockWord, LockWordError, Unbounded, WordState};
use std::cell::UnsafeCell;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

/// How many short spins a blocking writer or upgrader retries before it registers its wait.
const PRE_REGISTER_SPINS: u32 = 4;

/// A read/update/write lock protecting a `T`, built on one [`LockWord`] (8 bytes of lock).
///
/// ```
/// use locks_core::RwuLock;
///
/// let lock = RwuLock::new(vec![1, 2, 3]);
/// {
///     let update = lock.update(); // readers may still come in
///     if update.len() == 3 {
///         let mut write = update.upgrade(); // waits for the readers to leave
///         write.push(4);
///     }
/// }
/// assert_eq!(*lock.read(), vec![1, 2, 3, 4]);
/// ```
///
/// `RwuLock<T>` is `Sync` when `T` is `Send + Sync`, as `std::sync::RwLock` is: readers on
/// several threads share `&T`, a writer may move the value out. Neither of these compiles:
///
/// ```compile_fail
/// // `Cell` is not `Sync`: two readers could race on it.
/// let lock = std::sync::Arc::new(locks_core::RwuLock::new(std::cell::Cell::new(0)));
/// std::thread::spawn(move || lock.read().set(1));
/// ```
///
/// ```compile_fail
/// // `Rc` is not `Send`: a writer could swap it into another thread.
/// let lock = std::sync::Arc::new(locks_core::RwuLock::new(std::rc::Rc::new(0)));
/// std::thread::spawn(move || drop(lock.write()));
/// ```
pub struct RwuLock<T: ?Sized> {
    word: LockWord,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out `&T` to several threads at once (read and update guards), which
// needs `T: Sync`, and `&mut T` to one thread at a time (write guards), which can move the
// value between threads, so needs `T: Send`. The lock word serializes writers against
// everything else (module invariant). `RwuLock<T>: Send` needs no impl: `UnsafeCell<T>` is
// `Send` when `T` is.
unsafe impl<T: ?Sized + Send + Sync> Sync for RwuLock<T> {}

impl<T> RwuLock<T> {
    /// A new, free lock around `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        Self {
            word: LockWord::new(),
            value: UnsafeCell::new(value),
        }
    }

    /// A new, free lock around `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        Self {
            word: LockWord::new(),
            value: UnsafeCell::new(value),
        }
    }

    /// The protected value, taking the lock apart.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: ?Sized> RwuLock<T> {
    /// A read guard, waiting as long as it takes (see the module docs on fairness).
    ///
    /// # Panics
    ///
    /// If `2^30 - 1` read locks are held at once (only possible by leaking guards with
    /// `mem::forget`), like `std`'s and parking_lot's locks; [`RwuLock::try_read`] and
    /// [`RwuLock::read_timeout`] report it as [`LockWordError::ReadCountOverflow`] instead.
    #[inline]
    pub fn read(&self) -> ReadGuard<'_, T> {
        if self.word.try_read().is_err() {
            self.read_slow();
        }
        ReadGuard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn read_slow(&self) {
        if let Err(error) = self.word.read_with_limit(&mut Unbounded) {
            // Unbounded never times out: this is the read count overflow.
            panic!("RwuLock::read: {error}");
        }
    }

    /// One attempt at a read guard (Chronicle Map's "Try acquire read lock"); `None` when a writer holds
    /// or waits for the lock, or the attempt lost a race.
    #[inline]
    pub fn try_read(&self) -> Option<ReadGuard<'_, T>> {
        self.word.try_read().ok().map(|()| ReadGuard { lock: self })
    }

    /// A read guard within `timeout` (Chronicle Map's "Time-limited read lock acquisition").
    pub fn read_timeout(&self, timeout: Duration) -> Result<ReadGuard<'_, T>, LockWordError> {
        self.word
            .read_timeout(timeout)
            .map(|()| ReadGuard { lock: self })
    }

    /// The update guard, waiting as long as it takes: read access that excludes other update
    /// holders and writers but not readers, and can become a write guard.
    #[inline]
    pub fn update(&self) -> UpdateGuard<'_, T> {
        if self.word.try_update().is_err() {
            self.update_slow();
        }
        UpdateGuard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn update_slow(&self) {
        // The update lock cannot overflow and Unbounded never times out: this always succeeds.
        let result = self.word.update_with_limit(&mut Unbounded);
        debug_assert!(result.is_ok(), "{result:?}");
    }

    /// One attempt at the update guard (Chronicle Map's "Try acquire update lock").
    #[inline]
    pub fn try_update(&self) -> Option<UpdateGuard<'_, T>> {
        self.word
            .try_update()
            .ok()
            .map(|()| UpdateGuard { lock: self })
    }

    /// The update guard within `timeout` (Chronicle Map's "Time-limited update lock acquisition").
    pub fn update_timeout(&self, timeout: Duration) -> Result<UpdateGuard<'_, T>, LockWordError> {
        self.word
            .update_timeout(timeout)
            .map(|()| UpdateGuard { lock: self })
    }

    /// The write guard, waiting as long as it takes; while it waits, new readers are kept out.
    #[inline]
    pub fn write(&self) -> WriteGuard<'_, T> {
        if self.word.try_write().is_err() {
            self.exclusive_slow(0);
        }
        WriteGuard { lock: self }
    }

    /// The waiting part of [`RwuLock::write`] (`from == 0`) and [`UpdateGuard::upgrade`]
    /// (`from == UPDATE_FLAG`).
    ///
    /// Before it registers as a waiter (Chronicle Map's step 2), it retries step 1 a few times with
    /// short spins in between: most waits for a write lock are shorter than that, and the
    /// registration costs two more CASes on the contended word. Readers are kept out from the
    /// registration on.
    #[cold]
    #[inline(never)]
    fn exclusive_slow(&self, from: u64) {
        let mut backoff = Backoff::new();
        for _ in 0..PRE_REGISTER_SPINS {
            backoff.snooze();
            if self.word.exclusive_attempt(from) {
                return;
            }
        }
        if self
            .word
            .exclusive_slow(from, &mut Unbounded, &mut backoff)
            .is_ok()
        {
            return;
        }
        // Only a full wait count (2^31 - 1 waiting threads) gets here: wait unregistered.
        while !self.word.exclusive_attempt(from) {
            backoff.snooze();
        }
    }

    /// One attempt at the write guard (Chronicle Map's "Try acquire write lock").
    #[inline]
    pub fn try_write(&self) -> Option<WriteGuard<'_, T>> {
        self.word
            .try_write()
            .ok()
            .map(|()| WriteGuard { lock: self })
    }

    /// The write guard within `timeout` (Chronicle Map's "Time-limited write lock acquisition").
    pub fn write_timeout(&self, timeout: Duration) -> Result<WriteGuard<'_, T>, LockWordError> {
        self.word
            .write_timeout(timeout)
            .map(|()| WriteGuard { lock: self })
    }

    /// The protected value, through exclusive access to the lock (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// The lock word's current state, for diagnostics.
    pub fn state(&self) -> WordState {
        self.word.state()
    }
}

impl<T: Default> Default for RwuLock<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T> From<T> for RwuLock<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwuLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RwuLock");
        match self.try_read() {
            Some(guard) => d.field("value", &&*guard),
            None => d.field("value", &format_args!("<locked>")),
        };
        d.field("state", &self.state()).finish()
    }
}

/// Shared read access to the value of a [`RwuLock`]; releases its read lock when dropped.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct ReadGuard<'a, T: ?Sized> {
    lock: &'a RwuLock<T>,
}

impl<T: ?Sized> Deref for ReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard stands for a read lock counted in `lock.word`, so the write flag
        // is clear for as long as the guard lives and no `&mut T` exists (module invariant).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for ReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.word.release_read_held();
    }
}

/// Read access to the value of a [`RwuLock`] that excludes other update holders and writers;
/// can be upgraded to a [`WriteGuard`]. Releases the update lock when dropped.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct UpdateGuard<'a, T: ?Sized> {
    lock: &'a RwuLock<T>,
}

impl<'a, T: ?Sized> UpdateGuard<'a, T> {
    /// Becomes the writer once the readers present have left, waiting as long as it takes
    /// (Chronicle Map's "Time-limited update to write upgrade", without limit). New readers are kept
    /// out while it waits.
    pub fn upgrade(self) -> WriteGuard<'a, T> {
        let lock = ManuallyDrop::new(self).lock;
        if lock.word.try_upgrade().is_err() {
            lock.exclusive_slow(UPDATE_FLAG);
        }
        WriteGuard { lock }
    }

    /// One attempt to become the writer (Chronicle Map's "Try upgrade to write lock"); gives the
    /// update guard back while readers are present.
    pub fn try_upgrade(self) -> Result<WriteGuard<'a, T>, Self> {
        match self.lock.word.try_upgrade() {
            Ok(()) => Ok(WriteGuard {
                lock: ManuallyDrop::new(self).lock,
            }),
            Err(_) => Err(self),
        }
    }

    /// Becomes the writer within `timeout` (Chronicle Map's "Time-limited update to write upgrade");
    /// gives the update guard back if the readers did not leave in time.
    pub fn upgrade_timeout(self, timeout: Duration) -> Result<WriteGuard<'a, T>, Self> {
        match self.lock.word.upgrade_timeout(timeout) {
            Ok(()) => Ok(WriteGuard {
                lock: ManuallyDrop::new(self).lock,
            }),
            Err(_) => Err(self),
        }
    }
}

impl<T: ?Sized> Deref for UpdateGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard stands for the update flag of `lock.word`, which is never set
        // together with the write flag, so no `&mut T` exists while the guard lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for UpdateGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.word.release_update_held();
    }
}

/// Exclusive access to the value of a [`RwuLock`]; releases the write lock when dropped.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct WriteGuard<'a, T: ?Sized> {
    lock: &'a RwuLock<T>,
}

impl<'a, T: ?Sized> WriteGuard<'a, T> {
    /// Becomes a reader without letting a writer in between (Chronicle Map's "Write to read lock
    /// downgrade").
    pub fn downgrade(self) -> ReadGuard<'a, T> {
        let lock = ManuallyDrop::new(self).lock;
        lock.word.downgrade_to_read_held();
        ReadGuard { lock }
    }

    /// Becomes the update holder without letting a writer in between (Chronicle Map's "Write to update
    /// lock downgrade").
    pub fn downgrade_to_update(self) -> UpdateGuard<'a, T> {
        let lock = ManuallyDrop::new(self).lock;
        lock.word.downgrade_to_update_held();
        UpdateGuard { lock }
    }
}

impl<T: ?Sized> Deref for WriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard stands for the write flag of `lock.word`; no other guard exists
        // while it is set, and `&self` ties the reference to a borrow of this guard.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> DerefMut for WriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`: this guard is the only one, and `&mut self` makes this the only
        // reference derived from it.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for WriteGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.word.release_write_held();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for ReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for UpdateGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for WriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
