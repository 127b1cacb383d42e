//! The one place that knows where a message goes.
//!
//! Every message between agents and lock servers passes through the node's [`Router`]: to the
//! lock server of a node, or to an agent by [`AgentId`]. A destination on this node is an actix
//! address; a destination on another node is a [`RemoteLink`] (the cluster transport), so
//! senders never care where the receiver lives. Members of leader-election groups
//! (`locks-leader`) talk to each other the same way, by [`MemberId`], with opaque payloads
//! ([`Router::send_member`], delivered as [`MemberDelivery`]).
//!
//! Invariants: an agent is registered from its actor's start until it stops (or its state is
//! dropped after a panic), and a transaction without an actor is live from its `begin` to its
//! end, with a mailbox made when the first message for it comes (`agents`); a message to a
//! local agent that is neither fails with [`RouteError::UnknownAgent`], which the lock server
//! takes as the agent's death. Members
//! likewise; a message to an unregistered member fails with [`RouteError::UnknownMember`] and
//! is dropped (members detect each other's end on their own).
//!
//! Cluster introspection ([`crate::introspect`]) passes through here too: a peer's
//! `Introspect` is answered from the node's table as it arrives, and a `TableReport` is handed
//! to the local caller waiting for it (or dropped), both only from [`Router::deliver_from`],
//! which knows the sender.

pub(crate) mod agents;
use crate::node_core::delivery::{self, ForAgent};
pub(crate) use crate::node_core::peer_check;
mod port;
pub(crate) use crate::route::LinkDown;
pub use crate::route::{Deliver, DownCause, MemberDelivery, RemoteLink, RouteError, ToServer};
pub use agents::Presence;
use agents::{Agents, Mailbox};
pub use port::{AgentPort, FreshAgent, Port};

use crate::introspect::{self, Introspection, ReportSource};
use crate::lease::LeaseCell;
use actix::prelude::*;
use locks_core::proto::{
    AgentMessage, Envelope, LockNotice, Message as WireMessage, ServerRequest,
};
use locks_core::{AgentId, MemberId, NodeId};
use std::collections::HashMap;

/// The router's maps are looked up once or twice per message; SipHash over a node name showed
/// up at ~4 % of an uncontended transaction, and these keys come from the node itself, not
/// from untrusted input that could aim at collisions.
type FastMap<K, V> = HashMap<K, V, ahash::RandomState>;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, Weak};

/// The local lock server's mailbox, as the router sees it (the router does not know the actor
/// type, so that the server can use the router without a circle).
struct ServerMailbox {
    requests: Recipient<ToServer>,
    link_down: Recipient<LinkDown>,
}

/// Routes messages to the local lock server, local agents and remote nodes.
pub struct Router {
    node: NodeId,
    server: OnceLock<ServerMailbox>,
    /// Local agents' mailboxes, and which transactions are live without one, sharded by
    /// block of serials (`agents`). Whatever must happen in order for one agent (its kept
    /// messages before later ones) happens under its shard's lock; nothing is ordered across
    /// agents. Shared with the node's agent ids, which register their blocks in it.
    agents: Arc<Agents>,
    members: Mutex<FastMap<MemberId, Recipient<MemberDelivery>>>,
    remotes: RwLock<FastMap<NodeId, Arc<dyn RemoteLink>>>,
    /// Every peer ever connected (authenticated peers only, so bounded by the cluster): what
    /// tells a node that is down from one never heard of in an error.
    heard: RwLock<std::collections::HashSet<NodeId>>,
    /// The lease of each peer's link (see [`crate::lease`]).
    leases: RwLock<FastMap<NodeId, Arc<LeaseCell>>>,
    /// The node is leaving the cluster: no claim on a peer is valid any more.
    leaving: std::sync::atomic::AtomicBool,
    /// Introspection: the table to answer from, questions in flight, the peers' budgets.
    introspection: Introspection,
    /// The node's metric handles (`crate::metrics`), registered with the router.
    metrics: crate::metrics::NodeMetrics,
    /// The largest version a peer's message may carry (`peer`).
    ceiling: peer_check::VersionCeiling,
    /// Warnings about refused peer messages, at most one per fault per interval.
    warnings: crate::log_limit::LogLimiter,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Router {
    /// A router for node `node`, with no server, agents or peers yet.
    pub fn new(node: NodeId) -> Router {
        Router {
            server: OnceLock::new(),
            agents: Arc::default(),
            members: Mutex::new(FastMap::default()),
            remotes: RwLock::new(FastMap::default()),
            heard: RwLock::default(),
            leases: RwLock::new(FastMap::default()),
            leaving: std::sync::atomic::AtomicBool::new(false),
            introspection: Introspection::default(),
            metrics: crate::metrics::NodeMetrics::register(&node),
            ceiling: peer_check::VersionCeiling::default(),
            warnings: crate::log_limit::LogLimiter::default(),
            node,
        }
    }

    /// Sets the node's table and the largest frame its links carry, for answering peers'
    /// introspection questions; done once when the node starts.
    pub fn set_table<T: ReportSource + 'static>(&self, table: Weak<T>, max_frame: usize) {
        self.introspection.set_table(table, max_frame);
    }

    /// The node's introspection state (see [`crate::introspect`]).
    pub(crate) fn introspection(&self) -> &Introspection {
        &self.introspection
    }

    /// How many introspection questions of this node wait for an answer (none once every
    /// [`crate::Node::cluster_view`] has returned: nothing is kept per question after it).
    pub fn introspections_waiting(&self) -> usize {
        self.introspection.in_flight()
    }

    /// Sends an envelope to a connected peer as it is (introspection questions).
    pub(crate) fn send_node(&self, node: &NodeId, envelope: Envelope) -> Result<(), RouteError> {
        self.remote(node)?.send(envelope)
    }

    /// The shard of `agent`'s mailbox, locked.
    /// The registry of the agents' mailboxes and blocks, shared with the node's agent ids.
    pub(crate) fn agents(&self) -> &Arc<Agents> {
        &self.agents
    }

    /// This node's id.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// The node's metric handles (registered when the router was made).
    pub fn metrics(&self) -> &crate::metrics::NodeMetrics {
        &self.metrics
    }

    /// The node's limit on log lines that peers can cause, one per reason per interval (see
    /// `crate::log_limit`).
    pub fn warnings(&self) -> &crate::log_limit::LogLimiter {
        &self.warnings
    }

    /// Sets the local lock server's mailbox; done once when the node starts.
    pub(crate) fn set_server(&self, requests: Recipient<ToServer>, link_down: Recipient<LinkDown>) {
        let _ = self.server.set(ServerMailbox {
            requests,
            link_down,
        });
    }

    /// Whether the local lock server runs (the node has started and not stopped).
    pub fn server_running(&self) -> bool {
        self.server.get().is_some_and(|s| s.requests.connected())
    }

    /// Tells the local lock server that the link to `peer` ended (the cluster layer does).
    pub(crate) fn server_link_down(&self, peer: NodeId) {
        if let Some(server) = self.server.get() {
            server.link_down.do_send(LinkDown(peer));
        }
    }

    /// Registers a local agent's mailbox.
    pub fn register_agent(&self, agent: AgentId, recipient: Recipient<Deliver>) {
        self.agents
            .shard(&agent)
            .mailboxes
            .insert(agent, Mailbox::Running(recipient));
    }

    /// Registers a local transaction that has no actor yet: messages for it are kept until
    /// [`Router::attach_agent`] (see `Mailbox::Idle`). (A transaction begun with
    /// [`crate::embed::NodeInternals::begin_agent`] needs none: its mailbox is made when
    /// the first message for it comes; this is for the crate's tests.)
    #[cfg(test)]
    pub(crate) fn register_idle_agent(&self, agent: AgentId) {
        self.agents.register_idle(agent);
    }

    /// An idle transaction now waits in the local table: from now on its probes are kept for
    /// its actor too (see `Mailbox::Idle`).
    pub fn idle_agent_waits(&self, agent: &AgentId) {
        if let Some(Mailbox::Idle { waits, .. }) = self.agents.shard(agent).mailbox(agent) {
            *waits = true;
        }
    }

    /// Gives an idle transaction its actor: the messages kept for it are queued in
    /// `recipient`'s mailbox, in the order they came, and every later message goes there too.
    /// Done under the registry's lock, so no message overtakes the kept ones.
    pub fn attach_agent(&self, agent: &AgentId, recipient: Recipient<Deliver>) {
        let mut shard = self.agents.shard(agent);
        if let Some(Mailbox::Idle { kept, .. }) = shard.mailbox(agent) {
            for msg in kept.drain(..) {
                recipient.do_send(Deliver::Message(msg));
            }
        }
        shard
            .mailboxes
            .insert(agent.clone(), Mailbox::Running(recipient));
    }

    /// Forgets a local agent's mailbox (its actor stopped). Messages to it fail from now on.
    pub fn unregister_agent(&self, agent: &AgentId) {
        self.agents.shard(agent).mailboxes.remove(agent);
    }

    /// The transaction of `presence` ended: messages to it fail from now on, and a mailbox
    /// made or registered for it is forgotten.
    pub fn end_transaction(&self, presence: &Presence) {
        self.agents.end(presence);
    }

    /// Whether `agent` is a running agent of this node, or a live transaction without one.
    pub fn has_agent(&self, agent: &AgentId) -> bool {
        self.agents.has(agent)
    }

    /// How many agents run on this node, live transactions without an actor included.
    pub fn agent_count(&self) -> usize {
        self.agents.count()
    }

    /// Registers a local group member's mailbox.
    pub fn register_member(&self, member: MemberId, recipient: Recipient<MemberDelivery>) {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(member, recipient);
    }

    /// Forgets a local group member. Messages to it fail from now on.
    pub fn unregister_member(&self, member: &MemberId) {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(member);
    }

    /// Whether `member` is a running group member of this node.
    pub fn has_member(&self, member: &MemberId) -> bool {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(member)
    }

    /// Sends an encoded message from member `from` to member `to`, wherever it lives. Messages
    /// from one sender to one recipient arrive in the order sent (one mailbox on this node, one
    /// connection to another).
    pub fn send_member(
        &self,
        to: &MemberId,
        from: MemberId,
        payload: Vec<u8>,
    ) -> Result<(), RouteError> {
        if to.node() == &self.node {
            let recipient = self
                .members
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(to)
                .cloned()
                .ok_or_else(|| RouteError::UnknownMember(to.clone()))?;
            if !recipient.connected() {
                self.unregister_member(to);
                return Err(RouteError::UnknownMember(to.clone()));
            }
            recipient.do_send(MemberDelivery { from, payload });
            Ok(())
        } else {
            self.remote(to.node())?
                .send(Envelope::new(WireMessage::Member {
                    to: to.clone(),
                    from,
                    payload,
                }))
        }
    }

    /// Adds (or replaces) the link to a connected peer.
    pub fn add_remote(&self, node: NodeId, link: Arc<dyn RemoteLink>) {
        let heard = self
            .heard
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&node);
        if !heard {
            self.heard
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(node.clone());
        }
        self.remotes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(node, link);
    }

    /// Whether `node` is this node or a peer it was ever connected to.
    pub fn has_heard_of(&self, node: &NodeId) -> bool {
        *node == self.node
            || self
                .heard
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(node)
    }

    /// Sets the lease of the link to a peer (the cluster layer does, with the link).
    pub fn set_lease(&self, node: NodeId, lease: Arc<LeaseCell>) {
        self.leases
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(node, lease);
    }

    /// Whether this node's claim on `node`'s locks is valid now: true for this node itself,
    /// true while the link to `node` has a lease that has not run out, false otherwise (not
    /// connected, or its lease expired). An expiry seen here is final for that link: the link
    /// ends and its agents are told, as when the link's own timer sees it (see
    /// [`crate::lease`]). Agents consult it before they say a lock is held.
    pub fn lease_valid(&self, node: &NodeId) -> bool {
        if node == &self.node {
            return true;
        }
        if self.leaving.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        self.leases
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(node)
            .is_some_and(|lease| lease.valid(std::time::Instant::now()))
    }

    /// Whether the lease of the link to `node` ran out while the link stood: an agent that finds
    /// [`Router::lease_valid`] false reports its locks there lost to an expired lease if so, and
    /// to the node going down otherwise (its link ended, or is gone already; the node down is
    /// on its way). Also true for every link once this node is leaving.
    pub fn lease_ran_out(&self, node: &NodeId) -> bool {
        self.leases
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(node)
            .is_some_and(|lease| lease.ran_out())
    }

    /// The node is leaving the cluster (a clean shutdown): every lease ends now, so that no
    /// local agent says it holds a lock on a peer after the peer was told to release it.
    pub fn expire_leases(&self) {
        self.leaving
            .store(true, std::sync::atomic::Ordering::Release);
        for lease in self
            .leases
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            lease.expire();
        }
    }

    /// The ids of the agents of this node that have a mailbox, in no particular order. (A
    /// transaction without one has asked only this node's table for locks.)
    pub fn agent_ids(&self) -> Vec<AgentId> {
        self.agents
            .shards()
            .flat_map(|shard| shard.mailboxes.keys().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// Removes the link to a peer (it went down or was disconnected), and its lease.
    pub fn remove_remote(&self, node: &NodeId) -> bool {
        if let Some(lease) = self
            .leases
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(node)
        {
            lease.end();
        }
        self.remotes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(node)
            .is_some()
    }

    /// The peers with a link, sorted.
    pub fn remote_nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self
            .remotes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        nodes.sort();
        nodes
    }

    /// Whether `node` is this node or a connected peer.
    pub fn is_reachable(&self, node: &NodeId) -> bool {
        node == &self.node
            || self
                .remotes
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .contains_key(node)
    }

    fn remote(&self, node: &NodeId) -> Result<Arc<dyn RemoteLink>, RouteError> {
        self.remotes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(node)
            .cloned()
            .ok_or_else(|| RouteError::NotConnected(node.clone()))
    }

    /// Sends a request to the lock server of `node`.
    pub fn send_server(&self, node: &NodeId, request: ServerRequest) -> Result<(), RouteError> {
        tracing::trace!(target: "lock_path", hop = 5, agent = %request.agent(), %node, "to its lock server");
        if node == &self.node {
            let server = self.server.get().ok_or(RouteError::ServerStopped)?;
            if !server.requests.connected() {
                return Err(RouteError::ServerStopped);
            }
            server.requests.do_send(ToServer(request));
            Ok(())
        } else {
            self.remote(node)?
                .send(Envelope::new(WireMessage::Server(request)))
        }
    }

    /// Sends `notices` to `to`: to an agent of another node as one message
    /// ([`WireMessage::Notices`]; on an error nothing was sent), to a local one (a run
    /// received from a peer) one by one, as [`Router::send_agent`] sends each.
    pub fn send_agent_notices(
        &self,
        to: &AgentId,
        notices: Vec<LockNotice>,
    ) -> Result<(), RouteError> {
        if to.node() != &self.node {
            return self
                .remote(to.node())?
                .send(Envelope::new(WireMessage::Notices {
                    to: to.clone(),
                    notices,
                }));
        }
        // In order, as that many messages; once one finds the agent gone, so would the rest.
        notices
            .into_iter()
            .try_for_each(|notice| self.send_agent(to, AgentMessage::Notice(notice)))
    }

    /// Sends a message to an agent, wherever it lives; to a local one as
    /// `node_core::delivery::for_agent` decides (a probe for a local agent that is gone goes back
    /// to its victim, refuted).
    pub fn send_agent(&self, to: &AgentId, msg: AgentMessage) -> Result<(), RouteError> {
        if to.node() != &self.node {
            return self
                .remote(to.node())?
                .send(Envelope::new(WireMessage::Agent {
                    to: to.clone(),
                    msg,
                }));
        }
        tracing::trace!(target: "lock_path", hop = 9, agent = %to, "to the agent's mailbox");
        let mut shard = self.agents.shard(to);
        let mailbox = shard.mailbox(to);
        let seen = match &mailbox {
            Some(Mailbox::Running(recipient)) if recipient.connected() => {
                delivery::MailboxState::Open
            }
            Some(Mailbox::Running(_)) => delivery::MailboxState::Closed,
            Some(Mailbox::Idle { waits, .. }) => delivery::MailboxState::Kept { waits: *waits },
            None => delivery::MailboxState::Missing,
        };
        match (delivery::for_agent(seen, &msg), mailbox) {
            // `do_send` queues even when the mailbox is full; the volume is bounded by the
            // agent's own requests. (Sent under the lock: queueing never blocks, and a clone of
            // the recipient would be an allocation per message.)
            (ForAgent::Deliver, Some(Mailbox::Running(recipient))) => {
                recipient.do_send(Deliver::Message(msg));
                Ok(())
            }
            (ForAgent::Keep, Some(Mailbox::Idle { kept, .. })) => {
                kept.push(msg);
                Ok(())
            }
            (ForAgent::Refute, _) => {
                drop(shard);
                self.refute(msg);
                Ok(())
            }
            (ForAgent::Gone { drop_mailbox }, _) => {
                if drop_mailbox {
                    shard.mailboxes.remove(to);
                }
                drop(shard);
                self.refute(msg);
                Err(RouteError::UnknownAgent(to.clone()))
            }
            (decided, _) => unreachable!("{decided:?} for a mailbox it does not fit"),
        }
    }

    /// Sends a probe that could not go on back to its victim, refuted
    /// (`node_core::delivery::refuted`).
    fn refute(&self, msg: AgentMessage) {
        if let Some((victim, back)) = delivery::refuted(msg)
            && let Err(err) = self.send_agent(&victim, back)
        {
            tracing::trace!(%victim, %err, "a refuted probe found no victim");
        }
    }

    /// Tells every local agent that `node` went down (`up == false`, as
    /// [`DownCause::Disconnected`]) or came back.
    pub fn broadcast_node_event(&self, node: &NodeId, up: bool) {
        if up {
            self.broadcast(|| Deliver::NodeUp(node.clone()));
        } else {
            self.broadcast_node_down(node, DownCause::Disconnected);
        }
    }

    /// Tells every local agent that `node` went down, and why.
    pub fn broadcast_node_down(&self, node: &NodeId, cause: DownCause) {
        self.broadcast(|| Deliver::NodeDown(node.clone(), cause));
    }

    fn broadcast(&self, event: impl Fn() -> Deliver) {
        // An idle transaction is not told: it has locks on this node only, and a request it
        // makes later on another node finds out whether that node is reachable as it is sent.
        let agents: Vec<Recipient<Deliver>> = self
            .agents
            .shards()
            .flat_map(|shard| {
                shard
                    .mailboxes
                    .values()
                    .filter_map(|m| match m {
                        Mailbox::Running(r) => Some(r.clone()),
                        Mailbox::Idle { .. } => None,
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        for agent in agents {
            agent.do_send(event());
        }
    }

    /// Delivers an envelope that arrived from the node `from` to its local destination.
    ///
    /// A message for an agent of this node that is gone is answered with a `RemoveAgent` for
    /// that agent to `from`'s lock server (`node_core::delivery::gone_from_peer`), and the error
    /// is returned as well.
    ///
    /// A peer speaks only for itself: every envelope is checked against `from` first
    /// (`peer_check::check`, whose documentation states the rules), and one that fails is dropped,
    /// counted and warned about (at most once per fault per interval), and refused with
    /// [`RouteError::Refused`].
    pub fn deliver_from(&self, from: &NodeId, envelope: Envelope) -> Result<(), RouteError> {
        if let Err(fault) = peer_check::check(from, &envelope.message, |v| self.ceiling.admits(v)) {
            self.metrics.peer_refused(fault);
            crate::limited!(
                self.warnings, fault.name(), warn,
                node = %self.node, peer = %from, reason = fault.name(),
                "a message from a peer refused: {fault}"
            );
            return Err(RouteError::Refused {
                from: from.clone(),
                fault,
            });
        }
        let intercepted =
            introspect::intercept(&self.introspection, from, envelope, || self.remote(from));
        let Some(envelope) = intercepted else {
            return Ok(());
        };
        match self.deliver_incoming(envelope) {
            Err(RouteError::UnknownAgent(agent)) if agent.node() == &self.node => {
                if let Err(err) = self.send_server(from, delivery::gone_from_peer(agent.clone())) {
                    tracing::debug!(node = %self.node, peer = %from, %agent, %err, "cannot report an unknown agent");
                }
                Err(RouteError::UnknownAgent(agent))
            }
            other => other,
        }
    }

    /// Delivers an envelope to its local destination, trusting it: nothing checks whom the
    /// sender may speak for. Envelopes from a peer go through [`Router::deliver_from`]. (The
    /// lock server itself ignores a `Lock` or `Watch` of an agent whose node is not
    /// connected, whatever path it took.)
    pub fn deliver_incoming(&self, envelope: Envelope) -> Result<(), RouteError> {
        match envelope.message {
            WireMessage::Server(request) => {
                let node = self.node.clone();
                self.send_server(&node, request)
            }
            WireMessage::Agent { to, msg } => {
                if to.node() != &self.node {
                    return Err(RouteError::UnknownAgent(to));
                }
                self.send_agent(&to, msg)
            }
            WireMessage::Notices { to, notices } => {
                if to.node() != &self.node {
                    return Err(RouteError::UnknownAgent(to));
                }
                self.send_agent_notices(&to, notices)
            }
            WireMessage::Member { to, from, payload } => {
                if to.node() != &self.node {
                    return Err(RouteError::UnknownMember(to));
                }
                self.send_member(&to, from, payload)
            }
            // Both need the sending node (to answer it, or to check the answer is its own):
            // they are handled by `deliver_from`, and dropped here.
            WireMessage::Introspect(_) | WireMessage::TableReport(_) => {
                tracing::trace!(node = %self.node, "an introspection message without a sender dropped");
                Ok(())
            }
        }
    }
}
