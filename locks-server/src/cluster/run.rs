//! The tasks of the cluster layer, all on the node's thread: the accept loop, the dialers, one
//! task per handshake, and per link its driver, pump and flusher; and what a link's arrival and
//! end do (see the contracts in the [module documentation](super)).

use super::backoff::Backoff;
use super::membership::{HandshakeId, LinkId, LinkRejection, NameRefusal};
use super::remote::ClusterLink;
use super::{Cluster, ConnectError, LinkEntry, LinkInfo, NodeEvent};
use crate::config::ClusterConfig;
use crate::lease;
use crate::log_limit::Verdict;
use crate::net::admission::{Admission, Ticket};
use crate::net::{self, Connection, DownReason, Link, Refusal, RefusalCode, Role, establish};
use crate::router::Router;
use locks_core::NodeId;
use locks_core::proto::Envelope;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// After a failed `accept` (for example: out of file descriptors), wait this long before the
/// next, so that the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What this node's own name check said about a handshake's peer, when it refused it.
type RefusedAs = Mutex<Option<(NodeId, NameRefusal)>>;

impl Cluster {
    /// Node thread: binds the listener (if configured), starts accepting and starts a dialer for
    /// every configured peer.
    pub(crate) async fn start(
        node: NodeId,
        config: ClusterConfig,
        router: Arc<Router>,
    ) -> std::io::Result<Arc<Cluster>> {
        let listener = match config.listen {
            Some(addr) => Some(TcpListener::bind(addr).await?),
            None => None,
        };
        let local_addr = listener.as_ref().map(|l| l.local_addr()).transpose()?;
        let peers = config.peers.clone();
        if config.tls.is_none() {
            // Once per node: a cluster node without TLS sends everything in clear text.
            tracing::warn!(
                %node,
                "node links are not encrypted (no TLS settings): run this cluster on a trusted network only"
            );
        }
        let cluster = Arc::new(Cluster::new(node, config, router, local_addr));
        if let Some(listener) = listener {
            tracing::info!(node = %cluster.node, addr = ?local_addr, "accepting peers");
            actix::spawn(cluster.clone().accept_loop(listener));
        }
        for addr in peers {
            cluster.ensure_dialer(addr);
        }
        Ok(cluster)
    }

    /// Node thread: connects to the node at `addr` (if it is not connected already), lets it
    /// back in if it was kept apart, and keeps a dialer on `addr` from then on.
    pub(crate) async fn connect(self: Arc<Self>, addr: SocketAddr) -> Result<NodeId, ConnectError> {
        let known = self.state().addr_names.get(&addr).cloned();
        if let Some(peer) = &known {
            self.reconnect(peer);
            if self.state().membership.link(peer).is_some() {
                self.ensure_dialer(addr);
                return Ok(peer.clone());
            }
        }
        // Failures of other handshakes with the peer recorded from here on are what this call
        // reports if its own dial gives way to them.
        let since = self.state().failures_seen;
        let mut result = self.dial(addr).await;
        if let Err(ConnectError::Refused {
            peer,
            reason: NameRefusal::Apart,
        }) = &result
        {
            self.reconnect(&peer.clone());
            result = self.dial(addr).await;
        }
        if let Err(error) = &result
            && is_duplicate(error)
        {
            // Connected already, or another handshake with that node (ours or its own) is
            // under way: its outcome is this call's, as soon as it is known (a handshake
            // timeout at most). (A peer that keeps this node apart refuses it the same way,
            // but then nothing is under way here.)
            let peer = self.state().addr_names.get(&addr).cloned();
            let by_peer = matches!(error, ConnectError::Net(_));
            if let Some(peer) = peer {
                match self.wait_outcome(&peer, since, by_peer).await {
                    Some(Ok(())) => result = Ok(peer),
                    Some(Err(error)) => {
                        result = Err(ConnectError::Concurrent {
                            peer,
                            error: Box::new(error),
                        });
                    }
                    None => {}
                }
            }
        }
        if result.is_ok() {
            self.ensure_dialer(addr);
        }
        result
    }

    /// Waits (at most a handshake timeout) for the outcome of the handshakes with `peer` under
    /// way: `Ok` once it is connected, the failure of one of them recorded after `since`, or
    /// `None` if none is under way (or none decided in time).
    ///
    /// When the peer refused this node's dial as a duplicate (`by_peer`), the peer's own dial
    /// may have arrived here without having proved the cookie yet, so it is not known to be the
    /// peer's: while an accepted handshake has not reached its name check, the wait goes on.
    async fn wait_outcome(
        &self,
        peer: &NodeId,
        since: u64,
        by_peer: bool,
    ) -> Option<Result<(), ConnectError>> {
        let wait = async {
            loop {
                let notified = self.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                {
                    let state = self.state();
                    if state.membership.link(peer).is_some() {
                        return Some(Ok(()));
                    }
                    if let Some((seen, error)) = state.last_failure.get(peer)
                        && *seen > since
                    {
                        return Some(Err(error.clone()));
                    }
                    let under_way = state.membership.is_handshaking(peer)
                        || (by_peer && state.membership.has_unchecked_acceptor());
                    if !under_way {
                        return None;
                    }
                }
                notified.await;
            }
        };
        tokio::time::timeout(self.net.handshake_timeout, wait)
            .await
            .ok()
            .flatten()
    }

    fn ensure_dialer(self: &Arc<Self>, addr: SocketAddr) {
        if self.state().dialers.insert(addr) {
            actix::spawn(self.clone().dialer(addr));
        }
    }

    /// Dials `addr` whenever the node behind it is neither connected nor kept apart.
    async fn dialer(self: Arc<Self>, addr: SocketAddr) {
        let mut backoff = Backoff::new(self.config.reconnect_min, self.config.reconnect_max);
        let mut failures = 0u32;
        loop {
            self.wait_dialable(addr).await;
            match self.dial(addr).await {
                Ok(_)
                | Err(ConnectError::Refused {
                    reason: NameRefusal::Connected,
                    ..
                }) => {
                    backoff.reset();
                    failures = 0;
                }
                Err(error) if is_duplicate(&error) => {
                    // The two nodes are connected, or about to be, by another handshake.
                    tracing::debug!(node = %self.node, %addr, %error, "peer reached by another connection");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(error) => {
                    if failures == 0 {
                        tracing::info!(node = %self.node, %addr, %error, "cannot reach a peer; retrying");
                    } else {
                        tracing::debug!(node = %self.node, %addr, %error, failures, "cannot reach a peer");
                    }
                    failures = failures.saturating_add(1);
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }

    /// Returns once the node behind `addr` (if known) is neither connected nor kept apart.
    async fn wait_dialable(&self, addr: SocketAddr) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.state();
                match state.addr_names.get(&addr) {
                    None => return,
                    Some(peer) => {
                        if state.membership.link(peer).is_none() && !state.membership.is_apart(peer)
                        {
                            return;
                        }
                    }
                }
            }
            notified.await;
        }
    }

    /// One dial of `addr`: TCP connect, handshake as initiator, registration.
    async fn dial(self: &Arc<Self>, addr: SocketAddr) -> Result<NodeId, ConnectError> {
        let hs = self.state().membership.begin(Role::Initiator);
        let refused_as: RefusedAs = Mutex::new(None);
        let result = net::connect(addr, &self.net, |peer: &NodeId| {
            self.name_in_use(hs, peer, Some(addr), &refused_as)
        })
        .await;
        match result {
            Ok(conn) => self.admit(hs, conn),
            Err(error) => {
                self.state().membership.failed(hs);
                let error = match take(&refused_as) {
                    Some((peer, reason)) => ConnectError::Refused { peer, reason },
                    None => ConnectError::Net(error),
                };
                // The name behind the address, if this or an earlier handshake learnt it.
                let peer = self.state().addr_names.get(&addr).cloned();
                self.handshake_failed(peer, &error);
                Err(error)
            }
        }
    }

    /// Accepts connections; each handshake runs in its own task, so a slow or hostile client
    /// delays nobody, and a handshake whose peer has not proved the cookie gives its place up
    /// to newer connections ([`crate::net::admission`]).
    async fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        let admission = Admission::new(self.net.max_pending_handshakes);
        loop {
            match listener.accept().await {
                Ok((stream, addr)) => {
                    let (ticket, evicted) = admission.admit();
                    if evicted {
                        tracing::debug!(
                            node = %self.node, peer_addr = %addr,
                            "too many unproven node handshakes; the oldest was closed"
                        );
                    }
                    let this = self.clone();
                    actix::spawn(async move {
                        // Refusals are logged by `establish` and `admit`.
                        let _ = this.accept(stream, ticket).await;
                    });
                }
                Err(e) => {
                    match self.net.warnings.event("accept failed") {
                        Verdict::Warn { suppressed } => tracing::warn!(
                            node = %self.node, error = %e,
                            suppressed_since_last_warning = suppressed,
                            "accepting a node connection failed"
                        ),
                        Verdict::Quiet => {
                            tracing::debug!(node = %self.node, error = %e, "accepting a node connection failed")
                        }
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    }

    async fn accept(
        self: Arc<Self>,
        stream: TcpStream,
        ticket: Ticket,
    ) -> Result<NodeId, ConnectError> {
        let hs = self.state().membership.begin(Role::Acceptor);
        let refused_as: RefusedAs = Mutex::new(None);
        // The name check comes with the peer's verified proof: from then on the handshake
        // keeps its place.
        let handshake = establish(stream, Role::Acceptor, &self.net, |peer: &NodeId| {
            ticket.proven();
            self.name_in_use(hs, peer, None, &refused_as)
        });
        let result = tokio::select! {
            result = handshake => result,
            () = ticket.evicted() => Err(Refusal::Evicted),
        };
        match result {
            Ok(conn) => self.admit(hs, conn),
            Err(refusal) => {
                self.state().membership.failed(hs);
                let (peer, error) = match take(&refused_as) {
                    Some((peer, reason)) => {
                        (Some(peer.clone()), ConnectError::Refused { peer, reason })
                    }
                    // The acceptor learns the peer's name for sure only with its proof.
                    None => (None, ConnectError::Handshake(refusal)),
                };
                self.handshake_failed(peer, &error);
                // A `connect` may be waiting for the unchecked accepted handshakes to end.
                self.changed.notify_waiters();
                Err(error)
            }
        }
    }

    /// A handshake (dialed or accepted) with `peer` (if its name is known) failed: count it,
    /// and unless it gave way to another handshake with that peer, record it for a `connect`
    /// that gave way to it.
    fn handshake_failed(&self, peer: Option<NodeId>, error: &ConnectError) {
        let mut reason = "";
        self.refusals.send_modify(|r| reason = r.count(error));
        self.router.metrics().refused(reason);
        let gave_way = is_duplicate(error)
            || matches!(
                error,
                ConnectError::NotKept {
                    reason: LinkRejection::Superseded | LinkRejection::Connected,
                    ..
                }
            );
        if let Some(peer) = peer
            && !gave_way
        {
            let mut state = self.state();
            state.failures_seen += 1;
            let seen = state.failures_seen;
            state.last_failure.insert(peer, (seen, error.clone()));
            drop(state);
            self.changed.notify_waiters();
        }
    }

    /// The handshake's name check: refuses (returns `true`) unless the membership lets the
    /// handshake go on. Learns the name behind a dialed address.
    fn name_in_use(
        &self,
        hs: HandshakeId,
        peer: &NodeId,
        dialed: Option<SocketAddr>,
        refused_as: &RefusedAs,
    ) -> bool {
        let mut state = self.state();
        if let Some(addr) = dialed {
            state.addr_names.insert(addr, peer.clone());
        }
        match state.membership.check(hs, peer) {
            Ok(()) => false,
            Err(reason) => {
                tracing::debug!(node = %self.node, %peer, %reason, "handshake refused by the membership");
                *refused_as.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some((peer.clone(), reason));
                true
            }
        }
    }

    /// Registers an established connection as its peer's link, or closes it.
    fn admit(self: &Arc<Self>, hs: HandshakeId, conn: Connection) -> Result<NodeId, ConnectError> {
        let peer = conn.peer().clone();
        let info = LinkInfo {
            peer: peer.clone(),
            role: conn.role(),
            peer_addr: conn.peer_addr(),
        };
        let mut state = self.state();
        let registered = match state.membership.established(hs, &peer) {
            Ok(registered) => registered,
            Err(reason) => {
                drop(state);
                crate::limited!(self.net.warnings, "connection not kept", info, node = %self.node, %peer, %reason, "connection not kept; closed");
                let error = ConnectError::NotKept {
                    peer: peer.clone(),
                    reason,
                };
                self.handshake_failed(Some(peer), &error);
                return Err(error);
            }
        };
        let (link, driver) = conn.split();
        let Link {
            sender,
            incoming,
            down,
            lease,
            ..
        } = link;
        let remote = ClusterLink::new(peer.clone(), sender);
        actix::spawn(self.drivers.track_future(async move {
            driver.run().await;
        }));
        actix::spawn(remote.clone().flush());
        actix::spawn(
            self.clone()
                .pump(peer.clone(), registered.link, incoming, down),
        );
        self.router.set_lease(peer.clone(), lease);
        self.router.add_remote(peer.clone(), remote.clone());
        state.last_failure.remove(&peer);
        state
            .links
            .insert(registered.link, LinkEntry { info, remote });
        self.router.broadcast_node_event(&peer, true);
        state.emit(NodeEvent::Up(peer.clone()));
        drop(state);
        crate::limited!(self.net.warnings, "node up", info, node = %self.node, %peer, role = ?registered.role, "node up");
        self.changed.notify_waiters();
        Ok(peer)
    }

    /// Hands every envelope the peer sent to the router, then handles the link's end.
    async fn pump(
        self: Arc<Self>,
        peer: NodeId,
        link: LinkId,
        mut incoming: mpsc::Receiver<Envelope>,
        down: oneshot::Receiver<DownReason>,
    ) {
        while let Some(envelope) = incoming.recv().await {
            if let Err(err) = self.router.deliver_from(&peer, envelope) {
                tracing::debug!(node = %self.node, %peer, %err, "envelope from a peer not delivered");
            }
        }
        let reason = down.await.ok();
        self.link_down(&peer, link, reason.as_ref());
    }

    /// A link ended, after everything it delivered was handed on: whether the peer is down, and
    /// why, is `lease::link_ended`'s to say (see the module documentation for the order of
    /// the effects).
    fn link_down(&self, peer: &NodeId, link: LinkId, reason: Option<&DownReason>) {
        let mut state = self.state();
        if let Some(entry) = state.links.remove(&link) {
            entry.remote.close();
        }
        let current = state.membership.link_down(peer, link);
        let ran_out = matches!(reason, Some(DownReason::LeaseExpired { .. }));
        let down = lease::link_ended(current, ran_out);
        if let Some(cause) = down {
            self.router.remove_remote(peer);
            self.router.server_link_down(peer.clone());
            self.router.broadcast_node_down(peer, cause);
            state.emit(NodeEvent::Down(peer.clone()));
        }
        let waiters = state.down_waiters.remove(&link).unwrap_or_default();
        drop(state);
        if down.is_some() {
            let reason = reason.map_or_else(
                || "the connection was dropped".to_owned(),
                ToString::to_string,
            );
            crate::limited!(self.net.warnings, "node down", info, node = %self.node, %peer, reason, "node down");
        }
        for waiter in waiters {
            let _ = waiter.send(());
        }
        self.changed.notify_waiters();
    }
}

/// Whether a dial failed because one side already has (or is making) a connection between
/// the two nodes.
fn is_duplicate(error: &ConnectError) -> bool {
    match error {
        ConnectError::Refused { reason, .. } => {
            matches!(reason, NameRefusal::Connected | NameRefusal::Handshaking)
        }
        ConnectError::Net(net::DialError::Refused { refusal, .. }) => {
            *refusal == Refusal::ByPeer(RefusalCode::DuplicateName)
        }
        _ => false,
    }
}

fn take(refused_as: &RefusedAs) -> Option<(NodeId, NameRefusal)> {
    refused_as
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
}
