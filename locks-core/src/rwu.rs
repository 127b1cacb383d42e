//! A safe read/update/write lock on top of [`crate::LockWord`]. Filled in by issue 2.

/// Placeholder until the lock lands.
#[derive(Debug, Default)]
pub struct RwuLock<T> {
    _value: T,
}
