//! Encoding of wire messages: bincode 2 behind one small module, with a size limit.
//!
//! Invariants: nothing larger than the limit is encoded or decoded; decoding never panics; a
//! buffer with bytes left over after the value is refused.
//!
//! Allocation while decoding is bounded by the buffer's length, whatever lengths the bytes
//! claim. bincode charges every value against a limit of "claimed" memory before reading it
//! (the in-memory size of each integer, the length of each string, before allocating the
//! string), and a decoded value claims at most [`CLAIM_FACTOR`] times the bytes it was read
//! from (a `u64` varint of one byte claims 8). So each decode gets a limit of at least
//! `CLAIM_FACTOR` times the buffer's length, rounded up to one of a few steps (the limit is a
//! const generic in bincode): a 12-byte frame that claims a 60 MiB string is refused before the
//! string is allocated. Sequences are preallocated at most serde's cautious bound (1 MiB) and
//! otherwise grow only as elements are actually read, so a 2^40-element claim fails at the end
//! of the buffer without allocating. bincode's varint decoder accepts non-minimal encodings, so encoded bytes must never
//! be compared, hashed or signed: compare decoded values.
//!
//! Swapping bincode for another serde format (postcard, wincode) changes only this file.

use crate::proto::{Envelope, PROTOCOL_VERSION};
use bincode::config::{Config, standard};
use serde::{Serialize, de::DeserializeOwned};

/// The default largest frame, in bytes: 4 MiB (a lock view with tens of thousands of holders).
pub const DEFAULT_MAX_FRAME: usize = 4 << 20;

/// The largest frame any configuration may allow: 64 MiB.
pub const HARD_MAX_FRAME: usize = 64 << 20;

/// A decoded value claims at most this many bytes of memory per byte it was decoded from
/// (16 for a one-byte `u128` varint; 8 for every type of [`crate::proto`]).
pub const CLAIM_FACTOR: usize = 16;

/// The configuration for encoding; the limit only matters when decoding.
fn config() -> impl Config {
    standard().with_limit::<{ CLAIM_FACTOR * HARD_MAX_FRAME }>()
}

/// Decodes with a claim limit of `CLAIM_FACTOR` times the smallest step at least as long as
/// `bytes` (steps grow fourfold from 1 KiB to [`HARD_MAX_FRAME`]).
fn decode_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<(T, usize), CodecError> {
    const KIB: usize = 1 << 10;
    macro_rules! by_length {
        ($($step:expr),*) => {$(
            if bytes.len() <= $step {
                let config = standard().with_limit::<{ CLAIM_FACTOR * $step }>();
                return Ok(bincode::serde::decode_from_slice(bytes, config)?);
            }
        )*};
    }
    by_length!(
        KIB,
        4 * KIB,
        16 * KIB,
        64 * KIB,
        256 * KIB,
        1024 * KIB,
        4096 * KIB,
        16384 * KIB
    );
    Ok(bincode::serde::decode_from_slice(bytes, config())?)
}

/// Why a buffer could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The encoded value, or the buffer to decode, is larger than the limit.
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The size.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The bytes are not a valid encoding.
    #[error("malformed frame: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// The value could not be encoded.
    #[error("cannot encode: {0}")]
    Encode(#[from] bincode::error::EncodeError),
    /// A valid value was followed by more bytes.
    #[error("{extra} trailing bytes after a {used}-byte value")]
    TrailingBytes {
        /// Bytes consumed by the value.
        used: usize,
        /// Bytes left over.
        extra: usize,
    },
    /// The envelope carries another protocol version.
    #[error("protocol version {got} is not supported (this node speaks {PROTOCOL_VERSION})")]
    Version {
        /// The version received.
        got: u16,
    },
}

/// The room an encoding starts with: most messages between nodes (a notice, a run of a lock's
/// notices, a request) fit, with the 16 bytes of a frame's tag after them, without the buffer
/// growing five times from empty on the way.
const ENCODE_CAPACITY: usize = 512;

/// A growing buffer that bincode writes into.
struct Buffer(Vec<u8>);

impl bincode::enc::write::Writer for &mut Buffer {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

/// Encodes `value`, refusing a result longer than `limit` bytes.
pub fn encode<T: Serialize>(value: &T, limit: usize) -> Result<Vec<u8>, CodecError> {
    let mut writer = Buffer(Vec::with_capacity(ENCODE_CAPACITY));
    bincode::serde::encode_into_writer(value, &mut writer, config())?;
    let bytes = writer.0;
    if bytes.len() > limit.min(HARD_MAX_FRAME) {
        return Err(CodecError::TooLarge {
            len: bytes.len(),
            limit: limit.min(HARD_MAX_FRAME),
        });
    }
    Ok(bytes)
}

/// Decodes one value that must fill `bytes` exactly; `bytes` may be at most `limit` long.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], limit: usize) -> Result<T, CodecError> {
    let limit = limit.min(HARD_MAX_FRAME);
    if bytes.len() > limit {
        return Err(CodecError::TooLarge {
            len: bytes.len(),
            limit,
        });
    }
    let (value, used) = decode_slice(bytes)?;
    if used != bytes.len() {
        return Err(CodecError::TrailingBytes {
            used,
            extra: bytes.len() - used,
        });
    }
    Ok(value)
}

/// Encodes an envelope with [`DEFAULT_MAX_FRAME`] as the limit.
pub fn encode_envelope(envelope: &Envelope) -> Result<Vec<u8>, CodecError> {
    encode(envelope, DEFAULT_MAX_FRAME)
}

/// Decodes an envelope (limit [`DEFAULT_MAX_FRAME`]) and checks its protocol version.
pub fn decode_envelope(bytes: &[u8]) -> Result<Envelope, CodecError> {
    decode_envelope_limited(bytes, DEFAULT_MAX_FRAME)
}

/// Decodes an envelope of at most `limit` bytes and checks its protocol version.
///
/// The version is read first, on its own: a message of another protocol version may not even
/// parse as this version's [`Envelope`], and the caller should learn "wrong version", not
/// "malformed".
pub fn decode_envelope_limited(bytes: &[u8], limit: usize) -> Result<Envelope, CodecError> {
    let limit = limit.min(HARD_MAX_FRAME);
    if bytes.len() > limit {
        return Err(CodecError::TooLarge {
            len: bytes.len(),
            limit,
        });
    }
    // `Envelope::version` is the first field, so the buffer starts with it.
    let (got, _): (u16, usize) = decode_slice(bytes)?;
    if got != PROTOCOL_VERSION {
        return Err(CodecError::Version { got });
    }
    decode(bytes, limit)
}
