//! What runs a node's cores on a live node, as a public API for shells of one's own (the agent
//! actor of `locks-agent` and the member actor of `locks-leader` are two): a node's [`Port`]
//! (its router as an agent or a group member of the node may use it, [`NodeInternals`]), the
//! port of one agent ([`AgentPort`]) and what it delivers ([`Deliver`], [`MemberDelivery`]),
//! fresh agent ids ([`FreshAgent`], [`Presence`]), the node's table in shards as the fast path
//! uses it ([`LocalTable`], [`FastLock`], [`Touched`]), the lock server actor
//! ([`LockServer`]), a link's lease ([`LeaseCell`]) and the rate limiter of logs that outside
//! input can trigger ([`LogLimiter`]). A [`Router`] made here is the caller's own. The pure
//! state machines are in [`crate::state_machine`], the transport in [`crate::transport`].
//!
//! # What it cannot do
//!
//! A process that embeds a node may run code it does not fully trust with the node handle (a
//! library, a plugin), so the seam is sealed by construction rather than by convention: a live
//! node hands out its router only as a [`Port`], whose methods send to agents and members,
//! register the mailbox of an agent id the node just handed out ([`FreshAgent`], consumed) or
//! of a transaction the caller began ([`Presence`], which only `begin_agent` makes), make the
//! [`AgentPort`] through which such an agent sends requests to lock servers, messages to
//! agents and to group members in its own name only and drops its own mailbox, and read
//! leases and metrics. Its table changes the entries of the transaction whose
//! [`Presence`] the caller holds, and of no other. The forging operations stay private to the
//! crate: delivering a message as if a peer sent it (only the cluster link, which
//! authenticated the peer, does), telling the lock table a node went down, giving an existing
//! agent id another mailbox or dropping it, and acting for an agent id the caller was not
//! handed.
//!
//! No cargo feature turns them on either: a feature is unified across a build, so any crate of
//! a program could switch it on for all. The workspace's tests reach a live node as any caller
//! does (the ports of agents they were handed, transactions they began, peers that speak the
//! handshake, real faults); the few that must forge on a live node are unit tests of this
//! crate.
//!
//! None of these compiles from outside the crate. Dropping a live node's locks:
//!
//! ```compile_fail
//! use locks_core::NodeId;
//! use locks_server::Node;
//! use locks_server::embed::NodeInternals;
//! use locks_server::state_machine::TableInput;
//!
//! fn drop_node(node: &Node, peer: NodeId) {
//!     node.local_table().apply(TableInput::NodeDown { node: peer, ghosts: false });
//! }
//! ```
//!
//! Delivering a message as if `peer` had sent it:
//!
//! ```compile_fail
//! use locks_core::NodeId;
//! use locks_core::proto::Envelope;
//! use locks_server::Node;
//! use locks_server::embed::NodeInternals;
//!
//! fn as_peer(node: &Node, peer: NodeId, envelope: Envelope) {
//!     let _ = node.router().deliver_from(&peer, envelope);
//! }
//! ```
//!
//! Taking over another transaction's mailbox, by attaching to it or by registering its id:
//!
//! ```compile_fail
//! use locks_core::AgentId;
//! use locks_server::Node;
//! use locks_server::embed::{Deliver, NodeInternals};
//!
//! fn take_mailbox(node: &Node, victim: AgentId, mine: actix::Recipient<Deliver>) {
//!     node.router().attach_agent(&victim, mine);
//! }
//! ```
//!
//! ```compile_fail
//! use locks_core::AgentId;
//! use locks_server::Node;
//! use locks_server::embed::{Deliver, NodeInternals};
//!
//! fn take_mailbox(node: &Node, victim: AgentId, mine: actix::Recipient<Deliver>) {
//!     node.router().register_agent(victim, mine, None);
//! }
//! ```
//!
//! Dropping another agent's mailbox or another group member (an agent's mailbox and its
//! member are dropped only through that agent's [`AgentPort`], which names no other):
//!
//! ```compile_fail
//! use locks_core::AgentId;
//! use locks_server::Node;
//! use locks_server::embed::NodeInternals;
//!
//! fn drop_theirs(node: &Node, victim: AgentId) {
//!     node.router().unregister_agent(&victim);
//! }
//! ```
//!
//! ```compile_fail
//! use locks_core::MemberId;
//! use locks_server::Node;
//! use locks_server::embed::NodeInternals;
//!
//! fn drop_theirs(node: &Node, victim: MemberId) {
//!     node.router().unregister_member(&victim);
//! }
//! ```
//!
//! Acting for another transaction of this node on its table (the fast path changes the table
//! only for the transaction whose [`Presence`] the caller holds, and a presence is made only
//! by `begin_agent`, with a fresh id):
//!
//! ```compile_fail
//! use locks_core::{AgentId, LockId, Mode};
//! use locks_server::Node;
//! use locks_server::embed::{NodeInternals, Touched};
//!
//! fn release_theirs(node: &Node, victim: &AgentId, lock: &LockId) {
//!     let _ = node.local_table().unlock(victim, lock);
//!     node.local_table().release(victim, &Touched::all());
//! }
//! ```
//!
//! ```compile_fail
//! use locks_core::AgentId;
//! use locks_server::embed::Presence;
//!
//! fn their_presence(victim: AgentId) -> Presence {
//!     Presence { id: victim, block: None }
//! }
//! ```
//!
//! Sending a lock server a request in another agent's name: the node's [`Port`] sends no
//! request, only the [`AgentPort`] of one agent does, and it refuses a request that names
//! another (`RouteError::NotThisAgent`):
//!
//! ```compile_fail
//! use locks_core::{AgentId, proto::ServerRequest};
//! use locks_server::Node;
//! use locks_server::embed::NodeInternals;
//!
//! fn release_theirs(node: &Node, victim: AgentId) {
//!     let _ = node.router().send_server(node.id(), ServerRequest::RemoveAgent { agent: victim });
//! }
//! ```
//!
//! Sending another agent or a group member a message as if from another: the node's
//! [`Port`] sends none, an [`AgentPort`] refuses an agent message whose sender is not its
//! agent (`RouteError::NotThisAgent`) and sends a member message from its own member only:
//!
//! ```compile_fail
//! use locks_core::{AgentId, proto::AgentMessage};
//! use locks_server::Node;
//! use locks_server::embed::NodeInternals;
//!
//! fn as_them(node: &Node, to: AgentId, msg: AgentMessage) {
//!     let _ = node.router().send_agent(&to, msg);
//! }
//! ```
//!
//! ```compile_fail
//! use locks_core::MemberId;
//! use locks_server::Node;
//! use locks_server::embed::NodeInternals;
//!
//! fn as_them(node: &Node, to: MemberId, victim: MemberId) {
//!     let _ = node.router().send_member(&to, victim, Vec::new());
//! }
//! ```
//!
//! ```compile_fail
//! use locks_core::MemberId;
//! use locks_server::Node;
//! use locks_server::embed::NodeInternals;
//!
//! fn as_them(node: &Node, to: MemberId, victim: MemberId) {
//!     let fresh = node.next_agent_id();
//!     let _ = node.router().for_agent(&fresh).send_member(&to, victim, Vec::new());
//! }
//! ```
//!
//! What the owner of a transaction does compiles:
//!
//! ```no_run
//! use locks_core::{LockId, Mode, proto::ServerRequest};
//! use locks_server::Node;
//! use locks_server::embed::{NodeInternals, Touched};
//!
//! fn mine(node: &Node, lock: &LockId) {
//!     let presence = node.begin_agent();
//!     let touched = Touched::default();
//!     let _ = node.local_table().fast_lock(&presence, lock, Mode::X, &touched);
//!     let port = node.router().for_transaction(&presence);
//!     let request = ServerRequest::RemoveAgent { agent: presence.id().clone() };
//!     let _ = port.send_server(node.id(), request);
//!     node.local_table().release(&presence, &touched);
//!     node.router().end_transaction(&presence);
//! }
//!
//! fn stop_mine(node: &Node) {
//!     let fresh = node.next_agent_id();
//!     let port = node.router().for_agent(&fresh);
//!     let _ = port.send_member(&fresh.member(), Vec::new());
//!     port.unregister_agent();
//!     port.unregister_member();
//! }
//! ```

pub use crate::lease::{Expired, LeaseCell};
pub use crate::local::{After, Delivery, FastLock, LocalTable, Touched};
pub use crate::log_limit::{LogLimiter, Verdict, WARN_INTERVAL};
pub use crate::node::NodeInternals;
pub use crate::router::{
    AgentPort, Deliver, DownCause, FreshAgent, MemberDelivery, Port, Presence, RemoteLink, Router,
    ToServer,
};
pub use crate::server::{LockServer, Snapshot, Watchers};
