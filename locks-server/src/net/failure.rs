//! What a refusal or a link's down reason carries when the connection failed ([`IoFailure`]),
//! the peer sent what is not a frame, or not one allowed there ([`Malformed`]), or the TLS
//! session under the connection failed ([`TlsFailure`]).
//!
//! Those values are cloned to every listener and compared by the tests of the pure handshake
//! machine, which an `io::Error` or a decoding error allows neither; these share the error and
//! compare by kind and message. They live below the handshake, the connection and the link,
//! which all report them.

use crate::net::frame::FrameError;
use locks_core::NodeId;
use std::fmt;
use std::io;
use std::sync::Arc;

/// An i/o error, shared by the clones of what carries it. Two are equal when their kinds and
/// messages are.
#[derive(Clone, Debug)]
pub struct IoFailure(Arc<io::Error>);

impl IoFailure {
    /// The error.
    pub fn error(&self) -> &io::Error {
        &self.0
    }

    /// Its kind.
    pub fn kind(&self) -> io::ErrorKind {
        self.0.kind()
    }
}

impl From<io::Error> for IoFailure {
    fn from(error: io::Error) -> Self {
        IoFailure(Arc::new(error))
    }
}

impl PartialEq for IoFailure {
    fn eq(&self, other: &Self) -> bool {
        self.kind() == other.kind() && self.0.to_string() == other.0.to_string()
    }
}

impl Eq for IoFailure {}

impl fmt::Display for IoFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for IoFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Why the bytes of a peer were refused: not a frame, or a frame not allowed there.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Malformed {
    /// The framing layer refused the bytes (for example a length prefix above the limit).
    #[error(transparent)]
    Framing(IoFailure),
    /// The bytes are not a frame.
    #[error(transparent)]
    Decode(Arc<FrameError>),
    /// A handshake frame came out of order.
    #[error("got {got} while waiting for {waiting}")]
    Unexpected {
        /// The kind of frame received.
        got: &'static str,
        /// The kind of frame the handshake waited for.
        waiting: &'static str,
    },
    /// A handshake frame came after the handshake.
    #[error("{got} frame after the handshake")]
    AfterHandshake {
        /// The kind of frame received.
        got: &'static str,
    },
    /// The peer's `Hello` carried this node's own nonce: a reflection, or a broken random
    /// source.
    #[error("the peer echoed our nonce")]
    EchoedNonce,
    /// A frame after the handshake without the tag of the connection's session (forged,
    /// replayed, reordered, or from someone who relayed another node's handshake).
    #[error("a frame without this connection's session tag")]
    BadTag,
}

impl PartialEq for Malformed {
    fn eq(&self, other: &Self) -> bool {
        use Malformed::*;
        match (self, other) {
            (Framing(a), Framing(b)) => a == b,
            (Decode(a), Decode(b)) => a.to_string() == b.to_string(),
            (
                Unexpected { got, waiting },
                Unexpected {
                    got: got2,
                    waiting: waiting2,
                },
            ) => got == got2 && waiting == waiting2,
            (AfterHandshake { got }, AfterHandshake { got: got2 }) => got == got2,
            (EchoedNonce, EchoedNonce) | (BadTag, BadTag) => true,
            _ => false,
        }
    }
}

impl Eq for Malformed {}

impl From<FrameError> for Malformed {
    fn from(error: FrameError) -> Self {
        Malformed::Decode(Arc::new(error))
    }
}

/// Why a TLS handshake failed, as this node saw it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TlsFailure {
    /// The peer's first bytes are not TLS: a node without TLS settings (or not a node).
    #[error("the peer does not speak TLS (a node without TLS settings?)")]
    NotTls,
    /// The peer's certificate does not chain to this node's CA.
    #[error("the peer's certificate is not signed by this node's CA")]
    Untrusted,
    /// The peer's certificate has expired, or is not valid yet.
    #[error("the peer's certificate has expired or is not valid yet")]
    Expired,
    /// The dialed node's certificate does not carry the expected server name.
    #[error("the peer's certificate does not carry the cluster's TLS server name")]
    WrongName,
    /// The peer presented no certificate.
    #[error("the peer presented no certificate")]
    NoCertificate,
    /// The peer's certificate does not carry the node name the peer gave in the cookie
    /// handshake (node names are bound to certificates, see [`TlsConfig::without_node_names`](crate::net::tls::TlsConfig::without_node_names)).
    #[error("the peer's certificate does not carry the node name {name} it gave")]
    NameNotCertified {
        /// The name the peer gave.
        name: NodeId,
    },
    /// The peer refused the session with this TLS alert: usually it does not trust this node's
    /// certificate (another CA, expired), or does not speak TLS.
    #[error("the peer refused the TLS session (alert: {alert})")]
    RejectedByPeer {
        /// The alert's name, as rustls spells it.
        alert: String,
    },
    /// Any other TLS error.
    #[error("TLS error: {0}")]
    Other(String),
}

impl TlsFailure {
    /// The name of the failure's kind, for rate-limited logs (a fixed set).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            TlsFailure::NotTls => "tls: peer does not speak TLS",
            TlsFailure::Untrusted => "tls: untrusted certificate",
            TlsFailure::Expired => "tls: expired certificate",
            TlsFailure::WrongName => "tls: wrong server name",
            TlsFailure::NoCertificate => "tls: no certificate",
            TlsFailure::NameNotCertified { .. } => "tls: node name not in certificate",
            TlsFailure::RejectedByPeer { .. } => "tls: refused by the peer",
            TlsFailure::Other(_) => "tls: other",
        }
    }

    fn from_rustls(error: &rustls::Error) -> TlsFailure {
        use rustls::{CertificateError as C, Error as E, InvalidMessage as M};
        match error {
            E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => TlsFailure::Untrusted,
            E::InvalidCertificate(
                C::Expired
                | C::ExpiredContext { .. }
                | C::NotValidYet
                | C::NotValidYetContext { .. },
            ) => TlsFailure::Expired,
            E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
                TlsFailure::WrongName
            }
            E::NoCertificatesPresented => TlsFailure::NoCertificate,
            E::AlertReceived(alert) => TlsFailure::RejectedByPeer {
                alert: format!("{alert:?}"),
            },
            E::InvalidMessage(M::InvalidContentType | M::UnknownProtocolVersion) => {
                TlsFailure::NotTls
            }
            other => TlsFailure::Other(other.to_string()),
        }
    }

    /// The TLS failure inside an i/o error from a TLS stream, if it is one.
    pub(crate) fn from_io(error: &io::Error) -> Option<TlsFailure> {
        error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .map(TlsFailure::from_rustls)
    }
}
