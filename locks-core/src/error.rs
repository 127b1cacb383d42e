//! The error type of `locks-core`.

use crate::codec::CodecError;
use crate::id::LockIdError;
use crate::ident::NodeNameError;
use crate::lock_word::LockWordError;
use crate::mode::ModeTableError;

/// Everything that can go wrong in `locks-core`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A lock id was empty.
    #[error(transparent)]
    LockId(#[from] LockIdError),
    /// A node name was refused.
    #[error(transparent)]
    NodeName(#[from] NodeNameError),
    /// A custom mode table was refused.
    #[error(transparent)]
    ModeTable(#[from] ModeTableError),
    /// A frame could not be encoded or decoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// A lock-word procedure failed (busy, timed out, overflow, not held).
    #[error(transparent)]
    LockWord(#[from] LockWordError),
}
