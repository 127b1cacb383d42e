//! What one client may hold, and the configuration of the gRPC server.
//!
//! A client is counted by its IP address: it may hold at most
//! [`Limits::max_sessions_per_client`] sessions at once, and the node at most
//! [`Limits::max_sessions`]; a session beyond either is refused with `RESOURCE_EXHAUSTED`. Inside
//! a session, at most [`Limits::max_pending`] `lock` calls may wait at once and at most
//! [`Limits::max_locks`] locks may be requested; a request beyond them gets an `Error` event with
//! `RESOURCE_EXHAUSTED`. The counts are released when the session ends, whatever ends it.

pub use crate::port::PortLimits;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The bounds on what clients may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Sessions open at once on the node.
    pub max_sessions: usize,
    /// Sessions open at once from one IP address.
    pub max_sessions_per_client: usize,
    /// `lock` calls waiting at once in one session.
    pub max_pending: usize,
    /// Locks requested (and not unlocked) in one session.
    pub max_locks: usize,
    /// Keys in one lock id.
    pub max_id_keys: usize,
    /// Bytes of keys in one lock id.
    pub max_id_bytes: usize,
    /// Nodes named in one request.
    pub max_nodes: usize,
    /// Bytes in one request message: a larger session request is refused with an `Error`
    /// event (`RESOURCE_EXHAUSTED`) and the session goes on.
    pub max_message_bytes: usize,
    /// Bytes in one message on the wire: a larger one is not read, and ends its call with
    /// `RESOURCE_EXHAUSTED`.
    pub max_frame_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sessions: 4096,
            max_sessions_per_client: 256,
            max_pending: 1024,
            max_locks: 65_536,
            max_id_keys: 64,
            max_id_bytes: 4096,
            max_nodes: 64,
            max_message_bytes: 64 * 1024,
            max_frame_bytes: 4 * 1024 * 1024,
        }
    }
}

/// The configuration of a node's gRPC server ([`crate::serve`]).
#[derive(Clone, Debug)]
pub struct GrpcConfig {
    /// The address to listen on (port 0 picks one).
    pub listen: SocketAddr,
    /// The bearer token every call must carry (`authorization: Bearer <token>`); `None` lets
    /// every call in.
    pub token: Option<String>,
    /// How long a client may stay silent: the node pings each connection every half of it and
    /// drops one whose ping is not answered within the other half; its sessions end then, and
    /// their transactions release their locks.
    pub keepalive: Duration,
    /// What one client may hold.
    pub limits: Limits,
    /// The bounds of the port itself: connections, unproven and idle ones, calls, headers.
    pub port: PortLimits,
    /// TLS for the clients' connections; `None` serves plain HTTP/2.
    pub tls: Option<ServerTls>,
}

/// The server's TLS settings, PEM-encoded.
#[derive(Clone)]
pub struct ServerTls {
    /// The server's certificate chain.
    pub cert: Vec<u8>,
    /// Its private key.
    pub key: Vec<u8>,
    /// With a CA, every client must present a certificate that chains to it.
    pub client_ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("client_ca", &self.client_ca.is_some())
            .finish_non_exhaustive()
    }
}

impl GrpcConfig {
    /// A server on `listen` with no token and no TLS, a keepalive bound of 10 s and the default
    /// limits.
    pub fn new(listen: SocketAddr) -> GrpcConfig {
        GrpcConfig {
            listen,
            token: None,
            keepalive: Duration::from_secs(10),
            limits: Limits::default(),
            port: PortLimits::default(),
            tls: None,
        }
    }
}

/// The open sessions, by client address. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sessions(Arc<Mutex<Counts>>);

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
}

/// One open session, counted until dropped.
#[derive(Debug)]
pub(crate) struct SessionPermit {
    sessions: Sessions,
    client: IpAddr,
}

impl Sessions {
    /// Counts a new session of `client`, or says which limit it would break.
    pub(crate) fn open(
        &self,
        client: IpAddr,
        limits: &Limits,
    ) -> Result<SessionPermit, &'static str> {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if counts.total >= limits.max_sessions {
            return Err("the node has as many sessions as it allows");
        }
        let mine = counts.by_client.entry(client).or_default();
        if *mine >= limits.max_sessions_per_client {
            return Err("this client has as many sessions as it may");
        }
        *mine += 1;
        counts.total += 1;
        Ok(SessionPermit {
            sessions: self.clone(),
            client,
        })
    }
}

impl Drop for SessionPermit {
    fn drop(&mut self) {
        let mut counts = self
            .sessions
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        counts.total -= 1;
        if let Some(n) = counts.by_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                counts.by_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_bounded_per_client_and_in_all_and_released_on_drop() {
        let limits = Limits {
            max_sessions: 3,
            max_sessions_per_client: 2,
            ..Limits::default()
        };
        let sessions = Sessions::default();
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let a1 = sessions.open(a, &limits).unwrap();
        let _a2 = sessions.open(a, &limits).unwrap();
        assert!(
            sessions
                .open(a, &limits)
                .unwrap_err()
                .contains("this client")
        );
        let _b1 = sessions.open(b, &limits).unwrap();
        assert!(sessions.open(b, &limits).unwrap_err().contains("the node"));
        drop(a1);
        assert!(sessions.open(a, &limits).is_ok());
    }
}
