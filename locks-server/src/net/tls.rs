//! Mutual TLS under the cookie handshake (optional).
//!
//! This module owns the TLS settings of a node ([`TlsConfig`]: its certificate chain, its
//! private key, the CA its peers' certificates must chain to, and the name a dialing node checks
//! in the certificate of the node it dials), the upgrade of a freshly accepted or dialed TCP
//! stream to a TLS session (`upgrade`, crate-private), and what a failed TLS handshake is called
//! ([`TlsFailure`]). rustls runs on the *ring* provider (no C library of its own, no OpenSSL).
//!
//! Invariants:
//! - Both sides verify. The acceptor requires a client certificate and verifies it against the
//!   CA; the dialer verifies the acceptor's certificate against the same CA and checks that it
//!   carries [`TlsConfig::server_name`] as a DNS name. Expiry is checked on both sides.
//! - The name checked during the TLS handshake is a *cluster* name, not a node name nor an
//!   address: the dialer knows only the address it dials (a peer's node name is learnt in the
//!   cookie handshake, after TLS), and addresses change (NAT, containers, 127.0.0.1 for every
//!   node of a laptop cluster). So every node certificate of a cluster carries the cluster's
//!   name (default [`DEFAULT_SERVER_NAME`]), and the cookie handshake, which runs inside the
//!   session unchanged, is still the membership check.
//! - **A node name is bound to its certificate** (unless turned off with
//!   [`TlsConfig::without_node_names`]): once the cookie handshake tells each side the name
//!   the other claims, each checks that the peer's verified certificate carries that name as a
//!   DNS name too, before the name reaches the node's registry; otherwise the handshake is
//!   refused ([`TlsFailure::NameNotCertified`], and the peer is told). So a leaked key lets its
//!   holder speak only as the node it was made for, and a misbehaving member only as itself:
//!   neither can take over another node's name, its links or its locks. A node checks its own certificate for its own name
//!   when it starts ([`TlsConfig::check_own_name`]), so a certificate made without the name is
//!   a start-up error, not a cluster that never connects.
//! - A TLS node never speaks clear text: a peer whose first bytes are not a TLS record is
//!   refused ([`TlsFailure::NotTls`]) before anything is sent to it.
//! - The TLS handshake shares the cookie handshake's deadline (the handshake timeout), and a
//!   failure is a [`Refusal::Tls`] like any other refusal: logged at most once per kind of
//!   failure per interval as a warning (the rest at DEBUG, so a stranger cannot flood the
//!   log), counted by cause ([`HandshakeRefusals`](crate::HandshakeRefusals)), and it closes
//!   that one connection only.

use crate::net::Role;
use crate::net::failure::Malformed;
pub use crate::net::failure::TlsFailure;
use crate::net::handshake::Refusal;
use crate::net::stream::NodeStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout_at;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The name a dialing node expects in the certificate of the node it dials, unless configured
/// otherwise ([`TlsConfig::with_server_name`]). `node --gen-certs` puts it in every certificate.
pub const DEFAULT_SERVER_NAME: &str = "locks";

/// The first byte of a TLS record carrying a handshake message (a ClientHello). A node's own
/// frames start with a 4-byte length below 2^24, so with a zero byte: the two never mix up.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// How long the acceptor of a failed TLS handshake waits for its alert to be read before it
/// drops the socket (closing with unread input would reset the connection and destroy it).
const ALERT_LINGER: Duration = Duration::from_secs(1);

/// Why TLS settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// A PEM file could not be read.
    #[error("cannot read the TLS {what} file {path}: {error}")]
    Read {
        /// Which file: `certificate`, `key` or `CA`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The PEM text could not be parsed.
    #[error("the TLS {what} is not valid PEM: {error}")]
    Pem {
        /// Which input: `certificate`, `key` or `CA`.
        what: &'static str,
        /// Why.
        error: String,
    },
    /// The PEM text holds no certificate (`-----BEGIN CERTIFICATE-----`).
    #[error("the TLS {what} holds no certificate")]
    NoCertificate {
        /// Which input: `certificate` or `CA`.
        what: &'static str,
    },
    /// The key PEM holds no private key (PKCS#8, PKCS#1 or SEC1).
    #[error("the TLS key holds no private key")]
    NoKey,
    /// A CA certificate was refused as a trust anchor.
    #[error("the TLS CA certificate is not usable: {0}")]
    BadCa(String),
    /// The private key does not fit the certificate, or is of a kind not supported.
    #[error("the TLS key does not match the certificate, or is not supported: {0}")]
    KeyMismatch(String),
    /// The server name is not a valid DNS name.
    #[error(
        "invalid TLS server name {}: it must be a DNS name",
        locks_core::escape::Escaped::bounded(.0, 128)
    )]
    BadServerName(String),
    /// Node names are bound to certificates ([`TlsConfig::without_node_names`] was not called)
    /// and this node's certificate does not carry its own node name as a DNS name (or the name
    /// is not a DNS name at all).
    #[error(
        "this node's TLS certificate does not carry its node name {name:?} as a DNS name: make \
         the certificate with it (`node --gen-certs` does), or turn the check off \
         (`node_names = false` in [tls], TlsConfig::without_node_names)"
    )]
    OwnNameNotCertified {
        /// The node's name.
        name: String,
    },
    /// rustls refused the settings for another reason.
    #[error("invalid TLS settings: {0}")]
    Rustls(String),
}

/// The TLS settings of a node: both halves (acceptor and dialer) built once, cheap to clone.
///
/// Build it from PEM text ([`TlsConfig::from_pem`]) or PEM files
/// ([`TlsConfig::from_pem_files`]); every error (a missing file, bad PEM, no key, a key that
/// does not match the certificate) is a [`TlsConfigError`] at that moment, never at the first
/// connection.
#[derive(Clone)]
pub struct TlsConfig {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    server_name: ServerName<'static>,
    /// This node's own certificate (the first of its chain), for [`TlsConfig::check_own_name`].
    own: CertificateDer<'static>,
    /// Whether a peer's certificate must carry the node name the peer claims.
    node_names: bool,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("server_name", &self.server_name)
            .field("node_names", &self.node_names)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Settings from PEM text: `cert_chain` (this node's certificate first, then any
    /// intermediates), `key` (its private key) and `ca` (one or more certificates the peers'
    /// certificates must chain to). The server name is [`DEFAULT_SERVER_NAME`].
    pub fn from_pem(cert_chain: &[u8], key: &[u8], ca: &[u8]) -> Result<TlsConfig, TlsConfigError> {
        let chain = certificates(cert_chain, "certificate")?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => TlsConfigError::NoKey,
            e => TlsConfigError::Pem {
                what: "key",
                error: e.to_string(),
            },
        })?;
        let ca = certificates(ca, "CA")?;
        TlsConfig::from_der(chain, key, ca)
    }

    /// Settings from PEM files (see [`TlsConfig::from_pem`]).
    pub fn from_pem_files(
        cert_chain: impl AsRef<Path>,
        key: impl AsRef<Path>,
        ca: impl AsRef<Path>,
    ) -> Result<TlsConfig, TlsConfigError> {
        let read = |what, path: &Path| {
            std::fs::read(path).map_err(|error| TlsConfigError::Read {
                what,
                path: path.to_owned(),
                error,
            })
        };
        TlsConfig::from_pem(
            &read("certificate", cert_chain.as_ref())?,
            &read("key", key.as_ref())?,
            &read("CA", ca.as_ref())?,
        )
    }

    /// Settings from DER: this node's chain, its key, and the CA certificates.
    pub fn from_der(
        cert_chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        ca: Vec<CertificateDer<'static>>,
    ) -> Result<TlsConfig, TlsConfigError> {
        if cert_chain.is_empty() {
            return Err(TlsConfigError::NoCertificate {
                what: "certificate",
            });
        }
        if ca.is_empty() {
            return Err(TlsConfigError::NoCertificate { what: "CA" });
        }
        let own = cert_chain[0].clone();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for cert in ca {
            roots
                .add(cert)
                .map_err(|e| TlsConfigError::BadCa(e.to_string()))?;
        }
        let roots = Arc::new(roots);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| TlsConfigError::BadCa(e.to_string()))?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsConfigError::Rustls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(cert_chain.clone(), key.clone_key())
            .map_err(|e| key_error(&e))?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsConfigError::Rustls(e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(cert_chain, key)
            .map_err(|e| key_error(&e))?;
        Ok(TlsConfig {
            server: Arc::new(server),
            client: Arc::new(client),
            server_name: ServerName::try_from(DEFAULT_SERVER_NAME)
                .map_err(|_| TlsConfigError::BadServerName(DEFAULT_SERVER_NAME.to_owned()))?,
            own,
            node_names: true,
        })
    }

    /// The same settings, without binding node names to certificates: a peer is then
    /// accepted under any name its cookie handshake gives, as long as its certificate chains to
    /// the CA and carries the server name. For clusters whose certificates do not carry the
    /// node names (one certificate shared by every node, say); any holder of such a
    /// certificate can then speak as any node.
    pub fn without_node_names(mut self) -> TlsConfig {
        self.node_names = false;
        self
    }

    /// Whether a peer's certificate must carry the node name the peer claims (the default).
    pub fn binds_node_names(&self) -> bool {
        self.node_names
    }

    /// Checks that this node's own certificate carries `name`, its node name, as a DNS name
    /// (nothing to check when node names are not bound). [`Node::start`](crate::Node::start)
    /// calls it, so that a certificate made without the name fails at start, with an error
    /// that says so, rather than every peer refusing the node.
    pub fn check_own_name(&self, name: &str) -> Result<(), TlsConfigError> {
        if !self.node_names || certifies(&self.own, name) {
            Ok(())
        } else {
            Err(TlsConfigError::OwnNameNotCertified {
                name: name.to_owned(),
            })
        }
    }

    /// Whether a peer whose verified certificate is `peer` may use the node name `name`:
    /// always when node names are not bound; otherwise only if the certificate carries the
    /// name as a DNS name (no certificate: never).
    pub(crate) fn admits(&self, peer: Option<&CertificateDer<'_>>, name: &str) -> bool {
        !self.node_names || peer.is_some_and(|cert| certifies(cert, name))
    }

    /// The same settings, with `name` as the DNS name a dialing node expects in the
    /// certificate of the node it dials (every node certificate of the cluster must carry it).
    pub fn with_server_name(mut self, name: &str) -> Result<TlsConfig, TlsConfigError> {
        self.server_name = ServerName::try_from(name.to_owned())
            .map_err(|_| TlsConfigError::BadServerName(name.to_owned()))?;
        Ok(self)
    }

    /// The DNS name a dialing node expects in the certificate of the node it dials.
    pub fn server_name(&self) -> String {
        self.server_name.to_str().into_owned()
    }
}

/// Whether `cert` carries `name` as a DNS name (webpki's matching rules, as for a server
/// name). A name that is not a DNS name is carried by no certificate.
fn certifies(cert: &CertificateDer<'_>, name: &str) -> bool {
    let Ok(name) = ServerName::try_from(name) else {
        return false;
    };
    ParsedCertificate::try_from(cert)
        .is_ok_and(|parsed| rustls::client::verify_server_name(&parsed, &name).is_ok())
}

fn certificates(
    pem: &[u8],
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsConfigError::Pem {
            what,
            error: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsConfigError::NoCertificate { what });
    }
    Ok(certs)
}

fn key_error(e: &rustls::Error) -> TlsConfigError {
    TlsConfigError::KeyMismatch(e.to_string())
}

/// A refusal of the cookie handshake that was really the TLS session failing: with TLS 1.3 the
/// dialer finishes its half of the TLS handshake before the acceptor has checked the dialer's
/// certificate, so the acceptor's verdict (an alert) arrives during the cookie handshake.
/// (tokio-rustls reports a TLS error as an `InvalidData` i/o error, which the framing layer
/// passes on as a framing failure.)
pub(crate) fn reclassify(refusal: Refusal) -> Refusal {
    match &refusal {
        Refusal::Io(failure) | Refusal::Malformed(Malformed::Framing(failure)) => {
            match TlsFailure::from_io(failure.error()) {
                Some(tls) => Refusal::Tls(tls),
                None => refusal,
            }
        }
        _ => refusal,
    }
}

/// Turns a freshly accepted or dialed TCP stream into a verified TLS session, by `deadline`.
///
/// The acceptor first checks that the peer's first byte starts a TLS handshake record, so a
/// plain-TCP node is refused as [`TlsFailure::NotTls`] without anything being sent to it.
pub(crate) async fn upgrade(
    stream: TcpStream,
    role: Role,
    tls: &TlsConfig,
    deadline: Instant,
) -> Result<NodeStream, Refusal> {
    let deadline = tokio::time::Instant::from_std(deadline);
    match role {
        Role::Acceptor => accept(stream, tls, deadline).await,
        Role::Initiator => {
            let connect =
                TlsConnector::from(tls.client.clone()).connect(tls.server_name.clone(), stream);
            match timeout_at(deadline, connect).await {
                Ok(Ok(session)) => Ok(NodeStream::Tls(Box::new(session.into()))),
                Ok(Err(error)) => Err(io_refusal(error)),
                Err(_) => Err(Refusal::Timeout),
            }
        }
    }
}

/// The acceptor's half. Each wait is bounded by `deadline` on its own, so that the linger
/// after a refusal (itself bounded) never turns the refusal into a timeout.
async fn accept(
    stream: TcpStream,
    tls: &TlsConfig,
    deadline: tokio::time::Instant,
) -> Result<NodeStream, Refusal> {
    let mut first = [0u8; 1];
    match timeout_at(deadline, stream.peek(&mut first)).await {
        Err(_) => return Err(Refusal::Timeout),
        Ok(Ok(0)) => return Err(Refusal::Closed),
        Ok(Ok(_)) if first[0] != TLS_HANDSHAKE_RECORD => {
            linger(stream).await;
            return Err(Refusal::Tls(TlsFailure::NotTls));
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(Refusal::Io(e.into())),
    }
    let accept = TlsAcceptor::from(tls.server.clone())
        .accept(stream)
        .into_fallible();
    match timeout_at(deadline, accept).await {
        Err(_) => Err(Refusal::Timeout),
        Ok(Ok(session)) => Ok(NodeStream::Tls(Box::new(session.into()))),
        Ok(Err((error, stream))) => {
            // rustls has queued its alert; let the dialer read it before the socket closes.
            linger(stream).await;
            Err(io_refusal(error))
        }
    }
}

fn io_refusal(error: io::Error) -> Refusal {
    match TlsFailure::from_io(&error) {
        Some(tls) => Refusal::Tls(tls),
        None if error.kind() == io::ErrorKind::UnexpectedEof => Refusal::Closed,
        None => Refusal::Io(error.into()),
    }
}

/// Shuts down our direction and discards input until the peer hangs up, for at most
/// [`ALERT_LINGER`]. (The handshake slot stays taken meanwhile, so the bound on unproven
/// handshakes still bounds what a stranger can hold.)
async fn linger(mut stream: TcpStream) {
    let drain = async {
        if stream.shutdown().await.is_err() {
            return;
        }
        let mut buf = [0u8; 1024];
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(ALERT_LINGER, drain).await;
}
