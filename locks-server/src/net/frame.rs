//! The frames two nodes exchange, and their encoding.
//!
//! On the wire a frame is a 4-byte big-endian length followed by that many bytes of a
//! bincode-encoded [`PeerFrame`] (through [`locks_core::codec`], so with its limits and its
//! refusal of trailing bytes). [`length_codec`] builds the tokio-util codec for the length
//! prefix.
//!
//! Invariants:
//! - The first two variants, [`PeerFrame::Hello`] and [`PeerFrame::Refuse`], and the leading
//!   `version` field of [`Hello`], keep their encoding in every protocol version, so a node
//!   can always tell a peer of another version "wrong version" instead of "garbage".
//! - [`decode_frame`] never panics and never allocates more than a bounded multiple of its
//!   input; a payload whose envelope carries another protocol version is refused.

use crate::net::stream::NodeStream;
use bytes::Bytes;
use locks_core::NodeId;
use locks_core::codec::{self, CodecError, HARD_MAX_FRAME};
use locks_core::proto::{Envelope, PROTOCOL_VERSION};
use serde::{Deserialize, Serialize};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// The framed stream of a connection: the byte stream (TCP, or TLS over TCP) under the
/// [`length_codec`] framing (the handshake and the link after it share it, so it lives below
/// both).
pub(crate) type Transport = Framed<NodeStream, LengthDelimitedCodec>;

/// The length of a handshake nonce, in bytes.
pub const NONCE_LEN: usize = 32;

/// A handshake nonce: random bytes, fresh for every handshake.
pub type Nonce = [u8; NONCE_LEN];

/// The length of a handshake proof (an HMAC-SHA256 tag), in bytes.
pub const MAC_LEN: usize = 32;

/// The largest frame accepted while a peer is not yet authenticated, in bytes. A `Hello`
/// with a 255-byte node name takes about 300.
pub const HANDSHAKE_MAX_FRAME: usize = 1024;

/// Everything that travels on a connection between two nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerFrame {
    /// Handshake, both sides: who I am, which protocol I speak, and my challenge.
    Hello(Hello),
    /// Handshake: the sender refuses the connection for this reason and closes it.
    Refuse(RefusalCode),
    /// Handshake: the sender's answer to the receiver's challenge.
    Proof(Proof),
    /// Heartbeat request; the receiver answers `Pong` with the same sequence number.
    Ping {
        /// Grows with every ping a side sends.
        seq: u64,
    },
    /// Heartbeat answer.
    Pong {
        /// The sequence number of the ping answered.
        seq: u64,
    },
    /// A message for the receiving node's router.
    Payload(Envelope),
}

impl PeerFrame {
    /// A short name of the frame's kind, for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            PeerFrame::Hello(_) => "Hello",
            PeerFrame::Refuse(_) => "Refuse",
            PeerFrame::Proof(_) => "Proof",
            PeerFrame::Ping { .. } => "Ping",
            PeerFrame::Pong { .. } => "Pong",
            PeerFrame::Payload(_) => "Payload",
        }
    }
}

/// The first handshake frame of each side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The sender's protocol version ([`PROTOCOL_VERSION`]). Always the first field.
    pub version: u16,
    /// The sender's node name.
    pub node: NodeId,
    /// The sender's challenge: the other side must include it in its proof.
    pub nonce: Nonce,
}

/// The answer to a challenge: `HMAC-SHA256(cookie, ...)`, see [`crate::net::handshake`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// The tag.
    pub mac: [u8; MAC_LEN],
}

/// Why a side refused a handshake, as told to the other side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum RefusalCode {
    /// The proof did not match the refusing side's cookie.
    #[error("wrong cookie")]
    WrongCookie,
    /// The refusing side speaks another protocol version.
    #[error("wrong protocol version (the refusing node speaks {supported})")]
    WrongVersion {
        /// The version the refusing side speaks.
        supported: u16,
    },
    /// A node with the sender's name is already connected to the refusing side (or it is the
    /// refusing side's own name).
    #[error("duplicate node name")]
    DuplicateName,
    /// A frame was malformed or out of place.
    #[error("malformed handshake")]
    Malformed,
    /// The handshake took too long.
    #[error("handshake timeout")]
    Timeout,
    /// The sender's TLS certificate does not carry the node name it gave (see
    /// [`crate::net::tls`]).
    #[error("the node name is not in the node's TLS certificate")]
    NameNotCertified,
}

/// Why a frame could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer speaks another protocol version.
    #[error("the peer speaks protocol version {got}; this node speaks {PROTOCOL_VERSION}")]
    Version {
        /// The peer's version.
        got: u16,
    },
    /// The bytes are not a frame.
    #[error(transparent)]
    Codec(#[from] CodecError),
}

/// The length-prefix codec for frames of at most `max_frame` bytes (capped at
/// [`HARD_MAX_FRAME`]): a 4-byte big-endian length, then the frame.
pub fn length_codec(max_frame: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(max_frame.min(HARD_MAX_FRAME))
        .new_codec()
}

/// Encodes a frame of at most `max_frame` bytes.
pub fn encode_frame(frame: &PeerFrame, max_frame: usize) -> Result<Bytes, CodecError> {
    codec::encode(frame, max_frame).map(Bytes::from)
}

/// The borrowed twin of [`PeerFrame`], to encode a payload without cloning the envelope.
/// bincode encodes an enum by variant index, so the variants must stay in the same order.
#[derive(Serialize)]
#[allow(dead_code)] // only `Payload` is built; the others hold the variant indices in place
enum PeerFrameRef<'a> {
    Hello(&'a Hello),
    Refuse(&'a RefusalCode),
    Proof(&'a Proof),
    Ping { seq: u64 },
    Pong { seq: u64 },
    Payload(&'a Envelope),
}

/// Encodes `PeerFrame::Payload(envelope)` without cloning the envelope.
pub fn encode_payload(envelope: &Envelope, max_frame: usize) -> Result<Bytes, CodecError> {
    codec::encode(&PeerFrameRef::Payload(envelope), max_frame).map(Bytes::from)
}

/// Decodes one frame of at most `max_frame` bytes.
///
/// A `Hello` of another protocol version that does not parse as this version's `Hello`, and
/// a payload whose envelope carries another version, are [`FrameError::Version`].
pub fn decode_frame(bytes: &[u8], max_frame: usize) -> Result<PeerFrame, FrameError> {
    match codec::decode::<PeerFrame>(bytes, max_frame) {
        Ok(PeerFrame::Payload(envelope)) if envelope.version != PROTOCOL_VERSION => {
            Err(FrameError::Version {
                got: envelope.version,
            })
        }
        Ok(frame) => Ok(frame),
        Err(e) => match hello_version(bytes) {
            Some(got) if got != PROTOCOL_VERSION => Err(FrameError::Version { got }),
            _ => Err(e.into()),
        },
    }
}

/// The version of a frame that starts like a `Hello` (variant 0, then the `u16` version as a
/// bincode varint: one byte below 251, or 251 and two little-endian bytes).
fn hello_version(bytes: &[u8]) -> Option<u16> {
    match bytes {
        [0, v, ..] if *v < 251 => Some(u16::from(*v)),
        [0, 251, lo, hi, ..] => Some(u16::from_le_bytes([*lo, *hi])),
        _ => None,
    }
}
