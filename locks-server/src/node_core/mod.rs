//! [`NodeCore`]: what the node layer decides around its lock table, as one pure, synchronous
//! state machine: [`NodeInput`] in, [`NodeEffect`]s out, no clock (a delay is a value the
//! effects carry) and no I/O. The lock server actor (`crate::server`) feeds it and carries its
//! effects out, and so do the simulations' nodes (`locks-testing`'s `sim::Tables`, without
//! delays); the table itself (`crate::table`, through `crate::local`) is what it acts on.
//!
//! **Rule** decided here and nowhere else: **the liveness filter**: a `Lock` or a `Watch` of
//! an agent whose node is not connected is ignored: only a node down removes a remote node's
//! agents, and that node's down has been handled already, or it never connected. It is checked
//! when the request is served (after the start-delay for a kept one), so a request on its way
//! when its node went down is covered whatever the order of the two. Other requests
//! (releases) are served: they only take away.
//!
//! **Carried out** here, decided with the rest of the lease rule in [`crate::lease`]
//! ([`NodeDelays`]):
//!
//! - **start-delay**: while the node grants nothing after its start
//!   ([`NodeDelays::start_hold`]), the requests that come are kept, in order, and served when
//!   the delay ends ([`Timer::StartDelayOver`]); only then is the fast path let in
//!   ([`NodeEffect::OpenFastPath`]), so a fast-path request comes after every kept one;
//! - **node down and lock-delay**: the cluster layer asks `lease::link_ended` whether the end
//!   of a link is a node down, then tells this core ([`NodeInput::LinkDown`]) and every local
//!   agent. What it does to the downed peer's agents' entries is
//!   [`NodeDelays::node_down`]'s to say (ghosts, or released at once; nothing for this node
//!   itself): the table makes the ghosts ([`TableInput::NodeDown`]) and says which
//!   ([`NodeInput::Ghosts`]); they are released when [`Timer::LockDelayOver`] fires, after
//!   [`NodeDelays::ghosts_released_after`].
//!
//! The node layer's other decisions are in this module's children, each pure:
//! - [`peer`]: what a peer may say, checked before anything acts on a message from it (called
//!   by the router for every envelope of an authenticated link);
//! - [`delivery`]: where a message for an agent of this node goes (its actor, kept for a
//!   transaction without one, a probe refuted, an agent gone);
//! - [`sharding`]: which shard of the table an input goes to, and what spans shards;
//! - [`quota`]: what one peer's agents may take of the table (applied by `LocalTable::admit`).
//!
//! Invariant: every request given as [`NodeInput::Request`] is served exactly once or ignored
//! by the liveness filter, in the order given.

use crate::lease::{DownedLocks, NodeDelays};
use crate::table::TableInput;
use locks_core::proto::ServerRequest;
use locks_core::{AgentId, NodeId};
use std::time::Duration;

pub mod delivery;
pub mod peer_check;
pub mod quota;
pub mod sharding;

/// What the node knows of its peers when it decides: the router's view, passed in.
pub trait Peers {
    /// Whether `node` (this node, or a peer) is connected now.
    fn connected(&self, node: &NodeId) -> bool;
}

/// An input of the node layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeInput {
    /// The node's lock server started.
    Started,
    /// A request for this node's lock server, from a local agent or from a peer's (whose
    /// envelope `node_core::peer_check::check` admitted).
    Request(ServerRequest),
    /// The link to `node` ended (closed, broken, or its lease ran out).
    LinkDown(NodeId),
    /// The table handed a downed node's agents' entries to these ghosts.
    Ghosts(Vec<AgentId>),
    /// A timer scheduled by [`NodeEffect::Schedule`] fired.
    Timer(Timer),
}

/// A timer of the node layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Timer {
    /// The start-delay has passed.
    StartDelayOver,
    /// The lock-delay of these ghosts has passed.
    LockDelayOver(Vec<AgentId>),
}

/// What the node layer wants done, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEffect {
    /// Admit the request to the table (after the per-peer quotas: `LocalTable::admit`).
    Admit(ServerRequest),
    /// Apply this input to the table (`LocalTable::apply`); feed the ghosts it makes back as
    /// [`NodeInput::Ghosts`].
    Table(TableInput),
    /// Feed [`NodeInput::Timer`] with `timer` back in after `after`.
    Schedule {
        /// How long from now.
        after: Duration,
        /// Which timer.
        timer: Timer,
    },
    /// The start-delay is over: the fast path may grant from now on.
    OpenFastPath,
}

/// The node layer's state machine (see the module documentation).
#[derive(Clone, Debug)]
pub struct NodeCore {
    node: NodeId,
    /// The start-delay and the lock-delay, and what they decide ([`NodeDelays`]).
    delays: NodeDelays,
    /// The requests kept during the start-delay (`None` once it has passed).
    held_back: Option<Vec<ServerRequest>>,
}

impl NodeCore {
    /// The core of node `node` with these delays (both zero for a node outside a cluster).
    pub fn new(node: NodeId, lock_delay: Duration, start_delay: Duration) -> NodeCore {
        let delays = NodeDelays {
            lock_delay,
            start_delay,
        };
        NodeCore {
            node,
            delays,
            held_back: delays.start_hold().map(|_| Vec::new()),
        }
    }

    /// Whether the node is in its start-delay (granting nothing).
    #[cfg(test)]
    fn in_start_delay(&self) -> bool {
        self.held_back.is_some()
    }

    /// Applies one input and returns what to do, in order; `peers` says which nodes are
    /// connected now.
    pub fn step(&mut self, input: NodeInput, peers: &impl Peers) -> Vec<NodeEffect> {
        match input {
            NodeInput::Started => match self.delays.start_hold() {
                Some(delay) if self.held_back.is_some() => {
                    tracing::info!(node = %self.node, ?delay, "granting nothing until the start-delay has passed");
                    vec![NodeEffect::Schedule {
                        after: delay,
                        timer: Timer::StartDelayOver,
                    }]
                }
                _ => Vec::new(),
            },
            NodeInput::Request(request) => match &mut self.held_back {
                Some(held) => {
                    held.push(request);
                    Vec::new()
                }
                None => self.admit(request, peers).into_iter().collect(),
            },
            NodeInput::Timer(Timer::StartDelayOver) => {
                let Some(held) = self.held_back.take() else {
                    return Vec::new();
                };
                tracing::debug!(node = %self.node, requests = held.len(), "start-delay over; serving");
                let mut out: Vec<NodeEffect> = held
                    .into_iter()
                    .filter_map(|request| self.admit(request, peers))
                    .collect();
                out.push(NodeEffect::OpenFastPath);
                out
            }
            NodeInput::LinkDown(node) => match self.delays.node_down(&self.node, &node) {
                None => Vec::new(),
                Some(downed) => vec![NodeEffect::Table(TableInput::NodeDown {
                    node,
                    ghosts: downed == DownedLocks::ToGhosts,
                })],
            },
            NodeInput::Ghosts(ghosts) => match self.delays.ghosts_released_after(&ghosts) {
                None => Vec::new(),
                Some(after) => vec![NodeEffect::Schedule {
                    after,
                    timer: Timer::LockDelayOver(ghosts),
                }],
            },
            NodeInput::Timer(Timer::LockDelayOver(ghosts)) => {
                vec![NodeEffect::Table(TableInput::DelayOver(ghosts))]
            }
        }
    }

    /// A request to serve now, unless the liveness filter ignores it.
    fn admit(&self, request: ServerRequest, peers: &impl Peers) -> Option<NodeEffect> {
        let newcomer = match &request {
            ServerRequest::Lock { agent, .. }
            | ServerRequest::TryLock { agent, .. }
            | ServerRequest::Watch { watcher: agent, .. } => Some(agent.node()),
            _ => None,
        };
        if let Some(node) = newcomer.filter(|n| !peers.connected(n)) {
            tracing::debug!(node = %self.node, agent = %request.agent(), peer = %node, "request of an agent whose node is not connected ignored");
            return None;
        }
        Some(NodeEffect::Admit(request))
    }
}

#[cfg(test)]
mod tests;
