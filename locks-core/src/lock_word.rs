//! Chronicle Map's 64-bit read/update/write lock word (seed 004). Filled in by issue 2.

/// Placeholder until the lock word lands.
#[derive(Debug, Default)]
pub struct LockWord {
    _word: u64,
}
