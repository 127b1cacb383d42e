//! Identities of nodes and agents.
//!
//! A [`NodeId`] is a node's name, unique in its cluster. An [`AgentId`] names one transaction
//! agent: the node it lives on, the node's incarnation (taken from the clock when the node
//! starts, and with a data directory above every earlier one whatever the clock, so ids are
//! never reused across a restart) and a serial number, unique on that
//! incarnation, that grows with every agent one thread of the node's process creates (threads
//! take serials in blocks, so ids made on different threads order by block, not by time).
//!
//! The total order on agent ids is what the deadlock algorithm uses to pick a victim (the
//! largest agent of a cycle surrenders, as in the Erlang original). Agents compare by
//! node name, then incarnation, then serial, so an agent created later on the same thread of a
//! node compares larger, and every node computes the same order.
//!
//! A [`MemberId`] names a member of a leader-election group (`locks-leader`): the same three
//! parts, in its own namespace, so that messages between members are routed apart from agents.
//! A candidate's member id has the same parts as the id of the agent it competes with, which is
//! how members recognise each other in the election lock's queue.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// The longest node name accepted, in bytes.
pub const MAX_NODE_NAME: usize = 255;

/// Why a node name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeNameError {
    /// The name is empty.
    #[error("a node name cannot be empty")]
    Empty,
    /// The name is longer than [`MAX_NODE_NAME`] bytes.
    #[error("node name is {0} bytes long; the limit is {MAX_NODE_NAME}")]
    TooLong(usize),
    /// The name has a character outside the safe set: ASCII letters and digits, `-`, `_`, `.`
    /// and `@` (so that a name reads the same everywhere it is shown and splits no list).
    #[error(
        "node name \"{}\" has a character other than ASCII letters, digits, '-', '_', '.' and '@'",
        crate::escape::Escaped::bounded(.0, 64)
    )]
    BadCharacter(String),
}

/// The name of a node, unique within its cluster.
///
/// Encoded as its name's string (`wire_ids.rs`).
#[derive(Clone)]
pub struct NodeId(Arc<str>);

/// By name, the pointer first (`Arc`'s own equality has that shortcut only for sized values).
impl PartialEq for NodeId {
    fn eq(&self, other: &NodeId) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || crate::id::cmp_bytes(self.0.as_bytes(), other.0.as_bytes()).is_eq()
    }
}

impl Eq for NodeId {}

/// By name, as equality is.
impl std::hash::Hash for NodeId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// By name. The ids of one node are nearly always clones of a few `Arc`s (one per thread that
/// makes agent ids), and agent ids order by their node first: comparing the pointer first
/// spares a string comparison in every look-up and sort of agent ids and of `(lock, node)`
/// keys.
impl Ord for NodeId {
    fn cmp(&self, other: &NodeId) -> std::cmp::Ordering {
        crate::id::shared_first(&self.0, &other.0, |a, b| {
            crate::id::cmp_bytes(a.as_bytes(), b.as_bytes())
        })
    }
}

impl PartialOrd for NodeId {
    fn partial_cmp(&self, other: &NodeId) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl NodeId {
    /// Checks and wraps a node name: 1 to 255 bytes of ASCII letters, digits, `-`, `_`, `.`
    /// and `@` ([`NodeNameError::BadCharacter`] says why).
    pub fn new(name: impl AsRef<str>) -> Result<NodeId, NodeNameError> {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(NodeNameError::Empty);
        }
        if name.len() > MAX_NODE_NAME {
            return Err(NodeNameError::TooLong(name.len()));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'))
        {
            return Err(NodeNameError::BadCharacter(name.to_owned()));
        }
        Ok(NodeId(Arc::from(name)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for NodeId {
    type Error = NodeNameError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        NodeId::new(s)
    }
}

impl TryFrom<&str> for NodeId {
    type Error = NodeNameError;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        NodeId::new(s)
    }
}

impl From<NodeId> for String {
    fn from(n: NodeId) -> Self {
        n.0.to_string()
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The identity of one transaction agent, unique in the cluster and across node restarts.
///
/// Ordered by `(node, incarnation, serial)`: an agent made later on the same thread of a node
/// is larger.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AgentId {
    node: NodeId,
    incarnation: u64,
    serial: u64,
}

/// By incarnation and serial, not by the node's name: equal ids hash alike, as `Hash` requires,
/// and ids that differ only in their node are few (a node's incarnation is its start time in
/// microseconds, and a peer may speak only for its own agents, so a table meets at most one
/// such id per node of the cluster). Hashing the name cost a pass over its bytes in every
/// look-up of an agent: the table interns, looks up and forgets each transaction's agent, and
/// the router registers and forgets its mailbox.
impl std::hash::Hash for AgentId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.incarnation.hash(state);
        self.serial.hash(state);
    }
}

impl AgentId {
    /// An agent id. Nodes hand these out with a growing `serial`; tests may build their own.
    pub fn new(node: NodeId, incarnation: u64, serial: u64) -> AgentId {
        AgentId {
            node,
            incarnation,
            serial,
        }
    }

    /// The node the agent lives on.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// The incarnation of the node that created the agent.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The agent's serial number on its node incarnation.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// The incarnation reserved for ghosts (no node incarnation is `u64::MAX`).
    pub const GHOST_INCARNATION: u64 = u64::MAX;

    /// A ghost made by the lock server of `node`: the placeholder, one per agent of a downed
    /// node, that holds that agent's locks in `node`'s table during the lock-delay. It is never sent anything and never asks for
    /// anything; the lock server removes it when the delay has passed.
    pub fn ghost(node: NodeId, serial: u64) -> AgentId {
        AgentId::new(node, AgentId::GHOST_INCARNATION, serial)
    }

    /// Whether this is a ghost ([`AgentId::ghost`]).
    pub fn is_ghost(&self) -> bool {
        self.incarnation == AgentId::GHOST_INCARNATION
    }
}

impl fmt::Debug for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_ghost() {
            return write!(f, "<{}.ghost.{}>", self.node, self.serial);
        }
        write!(f, "<{}.{}.{}>", self.node, self.incarnation, self.serial)
    }
}

/// The identity of a member of a leader-election group (see `locks-leader`), unique in the
/// cluster and across node restarts; ordered like [`AgentId`], by `(node, incarnation, serial)`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MemberId {
    node: NodeId,
    incarnation: u64,
    serial: u64,
}

impl MemberId {
    /// A member id. Nodes hand out the serials (from the same counter as agent ids).
    pub fn new(node: NodeId, incarnation: u64, serial: u64) -> MemberId {
        MemberId {
            node,
            incarnation,
            serial,
        }
    }

    /// The member id with the same parts as `agent`: a candidate is known by its agent.
    pub fn of_agent(agent: &AgentId) -> MemberId {
        MemberId::new(agent.node().clone(), agent.incarnation(), agent.serial())
    }

    /// The agent id with the same parts (the agent a candidate competes with).
    pub fn agent(&self) -> AgentId {
        AgentId::new(self.node.clone(), self.incarnation, self.serial)
    }

    /// The node the member lives on.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// The incarnation of the node that created the member.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The member's serial number on its node incarnation.
    pub fn serial(&self) -> u64 {
        self.serial
    }
}

impl fmt::Debug for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m<{}.{}.{}>", self.node, self.incarnation, self.serial)
    }
}
