//! Accepting and opening connections.
//!
//! A [`Listener`] owns an accept loop (a tokio task) that runs each incoming connection's
//! handshake in its own task, so a slow or hostile client delays nobody; established
//! connections come out of [`Listener::accept`], refused ones are logged and closed, and the
//! loop goes on. Handshakes whose peer has not proved the cookie are bounded by
//! [`NetConfig::max_pending_handshakes`], the oldest giving its place up to a newer connection
//! ([`crate::net::admission`]). [`connect`] opens a connection to a peer and runs the handshake as initiator.

use crate::log_limit::Verdict;
use crate::net::NetConfig;
use crate::net::admission::Admission;
use crate::net::conn::{Connection, establish};
use crate::net::handshake::{Refusal, Role};
use locks_core::NodeId;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

/// Whether a node name already has a connection to this node (the owner's registry). Asked
/// during each handshake about the peer's name.
pub type NameInUse = Arc<dyn Fn(&NodeId) -> bool + Send + Sync>;

/// After a failed `accept` (for example: out of file descriptors), wait this long before the
/// next, so that the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Accepts connections from peer nodes and authenticates them.
///
/// Dropping the listener stops accepting and aborts the handshakes in progress; connections
/// already returned by [`Listener::accept`] are not affected.
#[derive(Debug)]
pub struct Listener {
    local_addr: SocketAddr,
    established: mpsc::Receiver<Connection>,
    task: JoinHandle<()>,
}

impl Listener {
    /// Binds `addr` and starts accepting on the current tokio runtime.
    pub async fn bind(
        addr: SocketAddr,
        config: NetConfig,
        name_in_use: NameInUse,
    ) -> io::Result<Listener> {
        let listener = TcpListener::bind(addr).await?;
        Listener::start(listener, config, name_in_use)
    }

    /// Starts accepting on a bound listener, on the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime, like `tokio::spawn`.
    pub fn start(
        listener: TcpListener,
        config: NetConfig,
        name_in_use: NameInUse,
    ) -> io::Result<Listener> {
        let local_addr = listener.local_addr()?;
        let (tx, established) = mpsc::channel(16);
        let task = tokio::spawn(accept_loop(listener, config, name_in_use, tx));
        Ok(Listener {
            local_addr,
            established,
            task,
        })
    }

    /// The address the listener is bound to (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The next connection that completed its handshake. `None` only if the accept loop is
    /// gone (it does not stop on its own).
    pub async fn accept(&mut self) -> Option<Connection> {
        self.established.recv().await
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    config: NetConfig,
    name_in_use: NameInUse,
    tx: mpsc::Sender<Connection>,
) {
    let config = Arc::new(config);
    let admission = Admission::new(config.max_pending_handshakes);
    // Dropping the set (when this task is aborted) aborts the handshakes in progress.
    let mut handshakes = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let (ticket, evicted) = admission.admit();
                    if evicted {
                        tracing::debug!(
                            node = %config.node, peer_addr = %addr,
                            "too many unproven node handshakes; the oldest was closed"
                        );
                    }
                    let (config, name_in_use, tx) = (config.clone(), name_in_use.clone(), tx.clone());
                    handshakes.spawn(async move {
                        // The name check comes with the peer's verified proof: from then on
                        // the handshake keeps its place. A refusal is logged by `establish`.
                        let handshake = establish(stream, Role::Acceptor, &config, |n| {
                            ticket.proven();
                            name_in_use(n)
                        });
                        tokio::select! {
                            result = handshake => if let Ok(conn) = result {
                                let _ = tx.send(conn).await;
                            },
                            () = ticket.evicted() => {}
                        }
                    });
                }
                Err(e) => {
                    match config.warnings.event("accept failed") {
                        Verdict::Warn { suppressed } => tracing::warn!(
                            node = %config.node, error = %e,
                            suppressed_since_last_warning = suppressed,
                            "accepting a node connection failed"
                        ),
                        Verdict::Quiet => tracing::debug!(node = %config.node, error = %e, "accepting a node connection failed"),
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = handshakes.join_next() => {}
            () = tx.closed() => return,
        }
    }
}

/// Why [`connect`] failed. (`Clone`, so that one failure can answer every caller waiting on
/// the same peer.)
#[derive(Clone, Debug, thiserror::Error)]
pub enum DialError {
    /// The TCP connection was not established within [`NetConfig::connect_timeout`].
    #[error("connecting to {addr} timed out after {after:?}")]
    Timeout {
        /// The address.
        addr: SocketAddr,
        /// The timeout.
        after: Duration,
    },
    /// The TCP connection failed.
    #[error("cannot connect to {addr}: {error}")]
    Io {
        /// The address.
        addr: SocketAddr,
        /// The error.
        error: Arc<io::Error>,
    },
    /// The handshake failed.
    #[error("handshake with {addr} failed: {refusal}")]
    Refused {
        /// The address.
        addr: SocketAddr,
        /// Why.
        refusal: Refusal,
    },
}

/// Connects to the node at `addr` within [`NetConfig::connect_timeout`] and runs the handshake
/// as initiator (bounded by [`NetConfig::handshake_timeout`]).
pub async fn connect(
    addr: SocketAddr,
    config: &NetConfig,
    name_in_use: impl Fn(&NodeId) -> bool,
) -> Result<Connection, DialError> {
    let stream = match tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr)).await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            return Err(DialError::Io {
                addr,
                error: Arc::new(error),
            });
        }
        Err(_) => {
            return Err(DialError::Timeout {
                addr,
                after: config.connect_timeout,
            });
        }
    };
    establish(stream, Role::Initiator, config, name_in_use)
        .await
        .map_err(|refusal| DialError::Refused { addr, refusal })
}
