//! The byte stream under a connection's framing: plain TCP, or TLS over TCP.
//!
//! [`NodeStream`] is chosen once, when a connection is accepted or dialed (see
//! [`crate::net::tls`]), and the framing, the handshake and the link above it never look at
//! which it is. It is an enum rather than a boxed trait object so that the plain case costs
//! one branch per read or write and no allocation.
//!
//! Invariant: the end of the peer's stream reads as an end of stream (zero bytes) for both
//! kinds, whether or not a TLS peer said goodbye with a close_notify first.

use rustls::pki_types::CertificateDer;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsStream;

/// A connection's byte stream: plain TCP, or a TLS session over TCP.
#[derive(Debug)]
pub enum NodeStream {
    /// Clear text (a node without TLS settings).
    Plain(TcpStream),
    /// A TLS session, established and verified both ways (boxed: the session state is large).
    Tls(Box<TlsStream<TcpStream>>),
}

impl NodeStream {
    /// Whether the stream is a TLS session.
    pub fn is_tls(&self) -> bool {
        matches!(self, NodeStream::Tls(_))
    }

    /// The peer's own certificate (the first of the chain it presented), verified by the TLS
    /// handshake; `None` on plain TCP.
    pub fn peer_certificate(&self) -> Option<CertificateDer<'static>> {
        match self {
            NodeStream::Plain(_) => None,
            NodeStream::Tls(s) => s
                .get_ref()
                .1
                .peer_certificates()?
                .first()
                .map(|c| c.clone().into_owned()),
        }
    }
}

impl AsyncRead for NodeStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NodeStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            NodeStream::Tls(s) => match Pin::new(s.as_mut()).poll_read(cx, buf) {
                // A peer that closes without a TLS close_notify (a node that stops, or is
                // killed) is an end of stream, as on plain TCP: every frame carries its own
                // length, so a truncated frame is still detected by the framing layer.
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    Poll::Ready(Ok(()))
                }
                other => other,
            },
        }
    }
}

impl AsyncWrite for NodeStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            NodeStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            NodeStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            NodeStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            NodeStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            NodeStream::Plain(s) => s.is_write_vectored(),
            NodeStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NodeStream::Plain(s) => Pin::new(s).poll_flush(cx),
            NodeStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NodeStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            NodeStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
