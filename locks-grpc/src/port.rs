//! The client port's bookkeeping: which connections may stay open, and which calls may start.
//! Pure: the server (`on_node.rs`) asks it at every accept, every call and every tick, and
//! carries out its answers (closing the connections it names, refusing the calls it refuses).
//!
//! A connection is *unproven* from its acceptance until it makes a call that carries the node's
//! client token (every call proves it on a node without a token). Then it is *proven*, and
//! *idle* while it has no call open.
//!
//! - At most [`PortLimits::max_unproven`] connections are unproven at once: one more evicts the
//!   oldest unproven connection of the address that has the most unproven connections (as the
//!   peer port treats unproven handshakes, and fairly between addresses), so a flood of silent
//!   or slow connections from a few addresses never pushes out a real client's connection
//!   between its acceptance and its first call; and an unproven connection is closed
//!   [`PortLimits::unproven_deadline`] after its acceptance whatever happens.
//! - At most [`PortLimits::max_connections`] connections are open at once (the server keeps the
//!   file descriptors the peer port needs out of this bound), and at most
//!   [`PortLimits::max_connections_per_client`] from one IP address. One more evicts an
//!   unproven connection (as above), else the oldest idle one (of that address, for its
//!   bound); when every one is busy, the newcomer is closed at once.
//! - A proven connection idle for [`PortLimits::idle_timeout`] is closed (a gRPC client opens a
//!   new one when it next calls).
//! - At most [`PortLimits::max_calls`] calls are open on the node and
//!   [`PortLimits::max_calls_per_client`] for one IP address; a call past either is refused
//!   before anything of its body is read.
//!
//! Invariant: every count equals what the open connections and calls add up to; a closed
//! connection counts for nothing.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The bounds of the client port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortLimits {
    /// Connections open at once (the node lowers it to fit its file-descriptor limit, keeping
    /// a reserve for the peer port and its data directory).
    pub max_connections: usize,
    /// Connections open at once from one IP address.
    pub max_connections_per_client: usize,
    /// Connections that have not made a call with the token yet.
    pub max_unproven: usize,
    /// How long a connection may stay unproven.
    pub unproven_deadline: Duration,
    /// How long a proven connection may stay without an open call.
    pub idle_timeout: Duration,
    /// Calls open at once on one connection (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`).
    pub max_calls_per_connection: u32,
    /// Calls open at once on the node.
    pub max_calls: usize,
    /// Calls open at once from one IP address.
    pub max_calls_per_client: usize,
    /// Bytes of request headers in one call.
    pub max_header_bytes: u32,
}

impl Default for PortLimits {
    fn default() -> Self {
        PortLimits {
            max_connections: 4096,
            max_connections_per_client: 256,
            max_unproven: 64,
            unproven_deadline: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_calls_per_connection: 512,
            max_calls: 8192,
            max_calls_per_client: 1024,
            max_header_bytes: 16 * 1024,
        }
    }
}

/// Names one accepted connection; ids grow with age.
pub(crate) type ConnId = u64;

/// What [`PortBook::accept`] decided: the connections of `evict` are to be closed either way
/// (they are closed in the book already).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Accept {
    /// The connection is open as `id`.
    Open { id: ConnId, evict: Vec<ConnId> },
    /// The connection is to be closed at once: every connection that could make room is busy.
    Refused {
        why: &'static str,
        evict: Vec<ConnId>,
    },
}

#[derive(Clone, Debug)]
struct Conn {
    client: IpAddr,
    proven: bool,
    calls: usize,
    opened: Instant,
    /// Since when it has had no call open.
    idle_since: Instant,
}

impl Conn {
    fn idle(&self) -> bool {
        self.proven && self.calls == 0
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Client {
    conns: usize,
    /// Of `conns`, those not proven yet.
    unproven: usize,
    calls: usize,
}

/// The open connections and calls of the client port (see the module documentation).
#[derive(Debug)]
pub(crate) struct PortBook {
    limits: PortLimits,
    next: ConnId,
    conns: BTreeMap<ConnId, Conn>,
    clients: HashMap<IpAddr, Client>,
    unproven: usize,
    calls: usize,
}

impl PortBook {
    pub(crate) fn new(limits: PortLimits) -> PortBook {
        PortBook {
            limits,
            next: 0,
            conns: BTreeMap::new(),
            clients: HashMap::new(),
            unproven: 0,
            calls: 0,
        }
    }

    pub(crate) fn limits(&self) -> &PortLimits {
        &self.limits
    }

    /// A connection from `client` was accepted at `now`.
    pub(crate) fn accept(&mut self, client: IpAddr, now: Instant) -> Accept {
        let mut evict = Vec::new();
        let mine = self.clients.get(&client).map_or(0, |c| c.conns);
        if mine >= self.limits.max_connections_per_client.max(1) {
            let same = |c: &Conn| c.client == client;
            match self.oldest(|c| same(c) && !c.proven, |c| same(c) && c.idle()) {
                Some(id) => evict.push(self.close(id)),
                None => {
                    let why = "this address has as many busy connections as it may";
                    return Accept::Refused { why, evict };
                }
            }
        }
        if self.unproven >= self.limits.max_unproven.max(1)
            && let Some(id) = self.heaviest_unproven()
        {
            evict.push(self.close(id));
        }
        if self.conns.len() >= self.limits.max_connections.max(1) {
            match self
                .heaviest_unproven()
                .or_else(|| self.oldest(Conn::idle, |_| false))
            {
                Some(id) => evict.push(self.close(id)),
                None => {
                    let why = "the node has as many busy connections as it allows";
                    return Accept::Refused { why, evict };
                }
            }
        }
        let id = self.next;
        self.next += 1;
        let conn = Conn {
            client,
            proven: false,
            calls: 0,
            opened: now,
            idle_since: now,
        };
        self.conns.insert(id, conn);
        let entry = self.clients.entry(client).or_default();
        entry.conns += 1;
        entry.unproven += 1;
        self.unproven += 1;
        Accept::Open { id, evict }
    }

    /// The oldest unproven connection of the address with the most unproven connections: a
    /// flood from a few addresses evicts its own connections, not those of an address that
    /// has one connection between its acceptance and its first call.
    fn heaviest_unproven(&self) -> Option<ConnId> {
        let unproven_of = |c: &Conn| self.clients.get(&c.client).map_or(0, |k| k.unproven);
        let most = self.clients.values().map(|k| k.unproven).max()?;
        self.oldest(|c| !c.proven && unproven_of(c) == most, |_| false)
    }

    /// The oldest connection that `first` selects, else the oldest that `then` selects.
    fn oldest(
        &self,
        first: impl Fn(&Conn) -> bool,
        then: impl Fn(&Conn) -> bool,
    ) -> Option<ConnId> {
        let find = |pick: &dyn Fn(&Conn) -> bool| {
            self.conns.iter().find(|(_, c)| pick(c)).map(|(id, _)| *id)
        };
        find(&first).or_else(|| find(&then))
    }

    /// Connection `id` made a call with the token.
    pub(crate) fn proven(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(&id)
            && !c.proven
        {
            c.proven = true;
            self.unproven -= 1;
            if let Some(client) = self.clients.get_mut(&c.client) {
                client.unproven -= 1;
            }
        }
    }

    /// Connection `id` opens a call: refused past the node's or the address's bound.
    pub(crate) fn call_opened(&mut self, id: ConnId) -> Result<(), &'static str> {
        let Some(c) = self.conns.get_mut(&id) else {
            return Err("the connection is closing");
        };
        if self.calls >= self.limits.max_calls {
            return Err("the node has as many calls open as it allows (max_calls)");
        }
        let client = self.clients.entry(c.client).or_default();
        if client.calls >= self.limits.max_calls_per_client {
            return Err("this address has as many calls open as it may (max_calls_per_client)");
        }
        client.calls += 1;
        c.calls += 1;
        self.calls += 1;
        Ok(())
    }

    /// A call of connection `id` ended at `now`.
    pub(crate) fn call_closed(&mut self, id: ConnId, now: Instant) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.calls -= 1;
            if c.calls == 0 {
                c.idle_since = now;
            }
            if let Some(client) = self.clients.get_mut(&c.client) {
                client.calls -= 1;
            }
            self.calls -= 1;
        }
    }

    /// Connection `id` is closed: it counts for nothing any more (its calls included).
    pub(crate) fn closed(&mut self, id: ConnId) {
        self.close(id);
    }

    fn close(&mut self, id: ConnId) -> ConnId {
        if let Some(c) = self.conns.remove(&id) {
            self.unproven -= usize::from(!c.proven);
            self.calls -= c.calls;
            if let Some(client) = self.clients.get_mut(&c.client) {
                client.conns -= 1;
                client.unproven -= usize::from(!c.proven);
                client.calls -= c.calls;
                if client.conns == 0 {
                    self.clients.remove(&c.client);
                }
            }
        }
        id
    }

    /// The connections to close at `now`: unproven past their deadline, idle past the idle
    /// timeout. They are closed in the book.
    pub(crate) fn expired(&mut self, now: Instant) -> Vec<ConnId> {
        let limits = &self.limits;
        let due: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                (!c.proven && now.duration_since(c.opened) >= limits.unproven_deadline)
                    || (c.idle() && now.duration_since(c.idle_since) >= limits.idle_timeout)
            })
            .map(|(id, _)| *id)
            .collect();
        due.into_iter().map(|id| self.close(id)).collect()
    }

    /// Connections open now, unproven ones among them, and calls open now.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        (self.conns.len(), self.unproven, self.calls)
    }
}

#[cfg(test)]
mod tests;
