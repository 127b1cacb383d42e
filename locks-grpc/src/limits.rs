//! What one client may hold, and the configuration of the gRPC server.
//!
//! A client is counted by its IP address: it may hold at most
//! [`Limits::max_sessions_per_client`] sessions at once, and the node at most
//! [`Limits::max_sessions`]; a session beyond either is refused with `RESOURCE_EXHAUSTED`,
//! except that a full node lets in the session of an address holding fewer sessions than the
//! heaviest address, whose newest session is evicted (see `Sessions`). Inside
//! a session, at most [`Limits::max_pending`] `lock` calls may wait at once and at most
//! [`Limits::max_locks`] locks may be requested; a request beyond them gets an `Error` event with
//! `RESOURCE_EXHAUSTED`. The counts are released when the session ends, whatever ends it.

pub use crate::port::PortLimits;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

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
    /// Locks requested (and not unlocked) by the sessions of one IP address together.
    pub max_locks_per_client: usize,
    /// Bytes of the lock ids requested by the sessions of one IP address together.
    pub max_lock_bytes_per_client: usize,
    /// Locks requested (and not unlocked) by every session of the node together.
    pub max_locks_total: usize,
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
            max_locks_per_client: 262_144,
            max_lock_bytes_per_client: 64 * 1024 * 1024,
            max_locks_total: 1_048_576,
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
    /// Called each time a session ends or a client connection closes (see [`ReleaseHook`]).
    pub on_release: Option<ReleaseHook>,
}

/// What the server calls each time a session ends (its transaction's locks are being
/// released) or a client connection closes (its buffers are freed): the moments when memory
/// held for a client may have been freed. An application whose allocator keeps freed memory
/// (glibc's malloc keeps its arenas' free pages) can use it to give memory back; the `node`
/// program does (`malloc_trim`, from a thread of its own).
///
/// It runs on the server's thread, the node's thread when the server runs there: it must only
/// note the event (set a flag, nudge a thread), never do the work itself.
#[derive(Clone)]
pub struct ReleaseHook(Arc<dyn Fn() + Send + Sync>);

impl ReleaseHook {
    /// A hook that calls `f`.
    pub fn new(f: impl Fn() + Send + Sync + 'static) -> ReleaseHook {
        ReleaseHook(Arc::new(f))
    }

    /// Calls the hook.
    pub(crate) fn call(&self) {
        (self.0)();
    }
}

impl std::fmt::Debug for ReleaseHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReleaseHook")
    }
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
            on_release: None,
        }
    }
}

/// The open sessions, by client address. Cheap to clone.
///
/// When the node holds [`Limits::max_sessions`], a new session of an address that holds fewer
/// than the address holding the most (by two or more) is let in, and the newest session of that
/// address is evicted: it ends with `RESOURCE_EXHAUSTED` saying why. So no set of addresses can
/// keep a newcomer out by filling the node; each address keeps at least a fair share.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sessions(Arc<Mutex<Counts>>);

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    /// Locks requested by every session, and their ids' bytes.
    locks: usize,
    /// By address: locks requested by its sessions, and their ids' bytes.
    locks_by_client: HashMap<IpAddr, (usize, usize), ahash::RandomState>,
    next: u64,
    /// By address: its sessions, by id (increasing with age), each with the token that evicts it.
    by_client: HashMap<IpAddr, BTreeMap<u64, CancellationToken>>,
    /// Told when a session ends.
    on_release: Option<ReleaseHook>,
}

/// One open session, counted until dropped; [`SessionPermit::evicted`] resolves when the node
/// evicts it to make room for another address.
#[derive(Debug)]
pub(crate) struct SessionPermit {
    sessions: Sessions,
    client: IpAddr,
    id: u64,
    evicted: CancellationToken,
}

/// Why an evicted session ended.
pub(crate) const EVICTED: &str = "the node holds as many sessions as it allows and this \
     client's address holds the most of them: this session was ended to let another address in";

impl Sessions {
    /// No session yet; `on_release` is called each time one ends.
    pub(crate) fn new(on_release: Option<ReleaseHook>) -> Sessions {
        Sessions(Arc::new(Mutex::new(Counts {
            on_release,
            ..Counts::default()
        })))
    }

    /// Counts a new session of `client`, or says which limit it would break.
    pub(crate) fn open(
        &self,
        client: IpAddr,
        limits: &Limits,
    ) -> Result<SessionPermit, &'static str> {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = counts.by_client.get(&client).map_or(0, BTreeMap::len);
        if mine >= limits.max_sessions_per_client {
            return Err("this client has as many sessions as it may");
        }
        if counts.total >= limits.max_sessions {
            let heaviest = counts
                .by_client
                .iter()
                .max_by_key(|(_, s)| s.len())
                .map(|(ip, s)| (*ip, s.len()));
            match heaviest {
                Some((ip, most)) if most > mine + 1 => counts.evict_newest(ip),
                _ => return Err("the node has as many sessions as it allows"),
            }
        }
        let id = counts.next;
        counts.next += 1;
        let evicted = CancellationToken::new();
        counts
            .by_client
            .entry(client)
            .or_default()
            .insert(id, evicted.clone());
        counts.total += 1;
        Ok(SessionPermit {
            sessions: self.clone(),
            client,
            id,
            evicted,
        })
    }
}

impl Counts {
    /// Evicts the newest session of `client`: it is no longer counted, and is told to end.
    fn evict_newest(&mut self, client: IpAddr) {
        if let Some(sessions) = self.by_client.get_mut(&client)
            && let Some((_, token)) = sessions.pop_last()
        {
            token.cancel();
            self.total -= 1;
            if sessions.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }
}

impl SessionPermit {
    /// The booking of the session's locks against its address's and the node's bounds.
    pub(crate) fn booking(&self) -> LockBooking {
        LockBooking {
            sessions: self.sessions.clone(),
            client: self.client,
            locks: 0,
            bytes: 0,
        }
    }

    /// Resolves when the node evicts this session (see [`Sessions`]); owns what it waits on,
    /// so a session can keep one such wait while it gives its permit back.
    pub(crate) fn evicted(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.evicted.clone().cancelled_owned()
    }
}

/// The locks one session has requested, booked against the bounds its address's sessions and
/// every session of the node share ([`Limits::max_locks_per_client`],
/// [`Limits::max_lock_bytes_per_client`], [`Limits::max_locks_total`]); given back when dropped.
#[derive(Debug)]
pub(crate) struct LockBooking {
    sessions: Sessions,
    client: IpAddr,
    locks: usize,
    bytes: usize,
}

impl LockBooking {
    /// Books one more lock whose id has `bytes` bytes of keys, or says which bound refuses it.
    pub(crate) fn take(&mut self, bytes: usize, limits: &Limits) -> Result<(), String> {
        let mut counts = self
            .sessions
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if counts.locks >= limits.max_locks_total {
            return Err(format!(
                "the node's sessions have requested {} locks (max_locks_total)",
                counts.locks
            ));
        }
        let (locks, held) = counts.locks_by_client.entry(self.client).or_default();
        if *locks >= limits.max_locks_per_client {
            return Err(format!(
                "this client's sessions have requested {locks} locks (max_locks_per_client)"
            ));
        }
        if held.saturating_add(bytes) > limits.max_lock_bytes_per_client {
            return Err(format!(
                "this client's sessions have requested locks of {held} bytes of ids \
                 (max_lock_bytes_per_client)"
            ));
        }
        *locks += 1;
        *held += bytes;
        counts.locks += 1;
        self.locks += 1;
        self.bytes += bytes;
        Ok(())
    }

    /// Gives back one lock of `bytes` bytes booked before.
    pub(crate) fn give(&mut self, bytes: usize) {
        self.release(1, bytes);
        self.locks -= 1;
        self.bytes -= bytes;
    }

    fn release(&self, locks: usize, bytes: usize) {
        let mut counts = self
            .sessions
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        counts.locks -= locks;
        if let Some((l, b)) = counts.locks_by_client.get_mut(&self.client) {
            *l -= locks;
            *b -= bytes;
            if *l == 0 {
                counts.locks_by_client.remove(&self.client);
            }
        }
    }
}

impl Drop for LockBooking {
    fn drop(&mut self) {
        if self.locks > 0 {
            self.release(self.locks, self.bytes);
        }
    }
}

impl Drop for SessionPermit {
    fn drop(&mut self) {
        let mut counts = self
            .sessions
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // An evicted session was uncounted when it was evicted.
        if let Some(sessions) = counts.by_client.get_mut(&self.client)
            && sessions.remove(&self.id).is_some()
        {
            if sessions.is_empty() {
                counts.by_client.remove(&self.client);
            }
            counts.total -= 1;
        }
        let hook = counts.on_release.clone();
        drop(counts);
        // Outside the mutex: the hook is the application's.
        if let Some(hook) = hook {
            hook.call();
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

    #[test]
    fn locks_are_bounded_per_address_and_on_the_node_and_given_back() {
        let limits = Limits {
            max_locks_per_client: 2,
            max_lock_bytes_per_client: 10,
            max_locks_total: 3,
            ..Limits::default()
        };
        let sessions = Sessions::default();
        let ip = |n: u8| IpAddr::from([127, 0, 0, n]);
        let a1 = sessions.open(ip(1), &limits).unwrap();
        let a2 = sessions.open(ip(1), &limits).unwrap();
        let (mut x, mut y) = (a1.booking(), a2.booking());
        x.take(4, &limits).unwrap();
        assert!(
            y.take(7, &limits)
                .unwrap_err()
                .contains("max_lock_bytes_per_client")
        );
        y.take(6, &limits).unwrap();
        assert!(
            y.take(0, &limits)
                .unwrap_err()
                .contains("max_locks_per_client")
        );
        let b = sessions.open(ip(2), &limits).unwrap();
        let mut z = b.booking();
        z.take(1, &limits).unwrap();
        assert!(z.take(1, &limits).unwrap_err().contains("max_locks_total"));
        x.give(4);
        z.take(1, &limits).unwrap();
        // A session's booking is given back whole when it ends.
        drop(y);
        x.take(10, &limits).unwrap();
        let mut w = a1.booking();
        assert!(w.take(0, &limits).unwrap_err().contains("max_locks_total"));
        drop(z);
        w.take(0, &limits).unwrap();
    }

    #[test]
    fn a_full_node_evicts_the_newest_session_of_the_heaviest_address_for_a_lighter_one() {
        let limits = Limits {
            max_sessions: 4,
            max_sessions_per_client: 4,
            ..Limits::default()
        };
        let sessions = Sessions::default();
        let ip = |n: u8| IpAddr::from([127, 0, 0, n]);
        let flood: Vec<SessionPermit> = (0..4)
            .map(|_| sessions.open(ip(1), &limits).unwrap())
            .collect();
        // A newcomer gets in; the flooding address's newest session is told to end.
        let newcomer = sessions.open(ip(2), &limits).unwrap();
        assert!(flood[3].evicted.is_cancelled());
        assert!(flood[..3].iter().all(|p| !p.evicted.is_cancelled()));
        // 3 against 1: one more of the newcomer's address evicts again, a third does not (2-2).
        let second = sessions.open(ip(2), &limits).unwrap();
        assert!(flood[2].evicted.is_cancelled());
        assert!(
            sessions
                .open(ip(2), &limits)
                .unwrap_err()
                .contains("the node")
        );
        // The evicted sessions' permits, dropped, uncount nothing twice.
        drop(flood);
        assert!(sessions.open(ip(3), &limits).is_ok());
        assert!(sessions.open(ip(3), &limits).is_ok());
        drop((newcomer, second));
    }
}
