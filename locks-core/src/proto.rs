//! The messages agents and lock servers exchange, locally and over the wire.
//!
//! ```text
//!   agent ──ServerRequest──▶ lock server        (lock, convert, unlock, surrender, remove, watch)
//!   agent ◀──AgentMessage::Notice── lock server (the agent's entry on one lock changed)
//!   agent ◀──AgentMessage::Forward── agent      (a lock view passed on for deadlock detection)
//!   agent ◀──AgentMessage::Surrendered── agent  (the sender surrendered a lock of a cycle)
//!   member ◀──Message::Member── member          (leader election, opaque payload)
//! ```
//!
//! Every notice carries the lock's version on its server; versions only grow, so an agent keeps
//! the newest copy of each `(lock, node)` and drops the rest (the Arts algorithm needs this).
//! A grant's version is a fencing token: it grows with every new holder.
//!
//! On the wire every message travels in an [`Envelope`] that carries [`PROTOCOL_VERSION`];
//! [`crate::codec`] encodes it with a size limit.

use crate::{AgentId, LockId, MemberId, Mode, NodeId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The version of the wire protocol. A peer speaking another version is refused.
pub const PROTOCOL_VERSION: u16 = 2;

/// A request from an agent to the lock server of one node.
///
/// Requests are one-way; the server answers with [`AgentMessage::Notice`]s (or a
/// [`AgentMessage::Rejected`]) to the agent named in the request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerRequest {
    /// Lock `lock` in `mode` for `agent`, taking the intention mode on every ancestor. If the
    /// agent already holds the lock, a mode it covers is a no-op and a stronger one is an
    /// up-conversion to `group(mode, held)`.
    Lock {
        /// The requesting agent.
        agent: AgentId,
        /// The lock.
        lock: LockId,
        /// The requested mode.
        mode: Mode,
    },
    /// Convert the agent's direct lock on `lock` down to a weaker mode (seed 000's S→IS, the
    /// lock word's W→U), whatever the state of its entry there: a granted entry is
    /// down-converted, a waiting one waits for the weaker mode in its place, and a converting
    /// one (converting up for a lock on a descendant or a stronger lock on the same id) gives up
    /// at once the part of its held mode it no longer asks for, then stops converting if what it
    /// holds covers what it needs, or keeps converting to what it needs. Never waits. Refused
    /// only if the agent has no direct lock on `lock` or `mode` is not weaker than its direct
    /// mode, so an agent's request and the server's direct lock never part.
    Convert {
        /// The agent.
        agent: AgentId,
        /// The lock it holds.
        lock: LockId,
        /// The weaker mode.
        mode: Mode,
    },
    /// Release one direct lock of the agent, or withdraw its pending request on it, together
    /// with the intention entries that lock caused on its ancestors.
    Unlock {
        /// The agent.
        agent: AgentId,
        /// The lock.
        lock: LockId,
    },
    /// Move the agent's entry on `lock` (and on the lock's descendants) to the back of the
    /// queues, if the lock is still at `version`; ignored otherwise.
    Surrender {
        /// The surrendering agent.
        agent: AgentId,
        /// The lock that closes the cycle.
        lock: LockId,
        /// The version of the agent's copy of the lock when it decided to surrender.
        version: u64,
    },
    /// Drop every entry and watch of the agent (it ended, died, or its node went down).
    RemoveAgent {
        /// The agent.
        agent: AgentId,
    },
    /// Send `watcher` a [`AgentMessage::Watched`] view on every change of `lock`, including a
    /// lock that does not exist yet.
    Watch {
        /// Who gets the views.
        watcher: AgentId,
        /// The watched lock.
        lock: LockId,
    },
    /// Stop watching `lock`.
    Unwatch {
        /// The watcher.
        watcher: AgentId,
        /// The lock.
        lock: LockId,
    },
}

impl ServerRequest {
    /// The agent (or watcher) the request is about.
    pub fn agent(&self) -> &AgentId {
        match self {
            ServerRequest::Lock { agent, .. }
            | ServerRequest::Convert { agent, .. }
            | ServerRequest::Unlock { agent, .. }
            | ServerRequest::Surrender { agent, .. }
            | ServerRequest::RemoveAgent { agent } => agent,
            ServerRequest::Watch { watcher, .. } | ServerRequest::Unwatch { watcher, .. } => {
                watcher
            }
        }
    }
}

/// One agent's entry in a lock queue, as shown to agents.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QueueEntry {
    /// The agent.
    pub agent: AgentId,
    /// For a holder: the mode it holds. For a waiter: the mode it waits for.
    pub mode: Mode,
}

/// A holder waiting to convert its lock to a stronger mode.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Conversion {
    /// The agent.
    pub agent: AgentId,
    /// The mode it holds now.
    pub held: Mode,
    /// The mode it waits for.
    pub requested: Mode,
}

/// The queue of one lock at one version: who holds it, who waits to convert, who waits.
///
/// Each agent appears at most once in `granted` and at most once in `converting` or
/// `waiting` (an agent's direct request and the intention modes its locks on descendants
/// need are combined into one entry per lock).
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LockView {
    /// The version of the lock on its server when the view was taken.
    pub version: u64,
    /// The group mode of the holders (`None` when nobody holds the lock).
    pub group: Option<Mode>,
    /// The holders, in grant order.
    pub granted: Vec<QueueEntry>,
    /// Holders waiting to convert, in FIFO order. Served before `waiting`.
    pub converting: Vec<Conversion>,
    /// New requests waiting, in FIFO order.
    pub waiting: Vec<QueueEntry>,
}

impl LockView {
    /// Whether `agent` is among the holders.
    pub fn holds(&self, agent: &AgentId) -> bool {
        self.granted.iter().any(|e| &e.agent == agent)
    }

    /// Whether anybody waits (to convert or for a new grant).
    pub fn has_waiters(&self) -> bool {
        !self.converting.is_empty() || !self.waiting.is_empty()
    }

    /// Every agent in the queue, holders first, each once.
    pub fn agents(&self) -> Vec<&AgentId> {
        let mut out: Vec<&AgentId> = Vec::new();
        let all = self
            .granted
            .iter()
            .map(|e| &e.agent)
            .chain(self.converting.iter().map(|c| &c.agent))
            .chain(self.waiting.iter().map(|e| &e.agent));
        for a in all {
            if !out.contains(&a) {
                out.push(a);
            }
        }
        out
    }
}

/// Where the recipient of a notice stands on the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryState {
    /// It holds the lock in this mode (a direct lock, or the intention mode for its locks on
    /// descendants, or the group of both).
    Granted(Mode),
    /// It holds `held` and waits to convert to `requested`.
    Converting {
        /// The mode held now.
        held: Mode,
        /// The mode waited for.
        requested: Mode,
    },
    /// It waits for a new grant in this mode.
    Waiting(Mode),
    /// It has no entry on the lock (released, or its request withdrawn).
    Absent,
}

impl EntryState {
    /// The mode held, if any.
    pub fn held(self) -> Option<Mode> {
        match self {
            EntryState::Granted(m) | EntryState::Converting { held: m, .. } => Some(m),
            EntryState::Waiting(_) | EntryState::Absent => None,
        }
    }

    /// Whether the recipient waits on this lock.
    pub fn is_waiting(self) -> bool {
        matches!(self, EntryState::Converting { .. } | EntryState::Waiting(_))
    }
}

/// Why the server sent a notice, beyond "the queue changed".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Note {
    /// `agent` surrendered the lock at `version` (`reference/erlang-locks.md` 3.7).
    Surrendered {
        /// Who surrendered.
        agent: AgentId,
        /// The version it surrendered.
        version: u64,
    },
    /// This notice answers the recipient's own [`ServerRequest::Convert`] of the lock (it is the
    /// one notice the requester is always sent). Until it comes, the agent cannot tell a notice
    /// sent before the server applied the conversion from one sent after, and an older grant
    /// may overstate what it holds.
    Converted,
}

/// A lock server's report to one agent about one lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockNotice {
    /// The node of the lock server.
    pub node: NodeId,
    /// The lock.
    pub lock: LockId,
    /// The lock's version after the change; when `state` is `Granted` this is the fencing
    /// token of the grant.
    pub version: u64,
    /// The recipient's entry on the lock.
    pub state: EntryState,
    /// The whole queue, sent when the recipient waits on the lock (it needs to know whom it
    /// waits for). Holders are not sent views, so a lock with many holders stays cheap.
    pub queue: Option<Arc<LockView>>,
    /// Why, when it is more than a queue change.
    pub note: Option<Note>,
}

/// Why a lock server refused a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Rejection {
    /// The mode is not in the server's mode table.
    #[error("mode {0} is not in this node's mode table")]
    ModeNotInTable(Mode),
    /// A conversion or unlock named a lock the agent has no direct lock on (granted or not).
    #[error("the agent has no lock on this id")]
    NotHeld,
    /// A down-conversion asked for a mode that is not weaker than the agent's direct mode.
    #[error("cannot convert down from {held} to {requested}: not a weaker mode")]
    NotWeaker {
        /// The agent's direct mode on the lock (granted or not).
        held: Mode,
        /// The mode asked for.
        requested: Mode,
    },
    /// The lock id is deeper or larger than the server accepts.
    #[error("lock id too large: {0}")]
    LockIdTooLarge(String),
    /// The server is shutting down.
    #[error("the lock server is shutting down")]
    ShuttingDown,
}

/// A message to an agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AgentMessage {
    /// From a lock server: the agent's entry on a lock changed.
    Notice(LockNotice),
    /// From a lock server: a watched lock changed.
    Watched {
        /// The server's node.
        node: NodeId,
        /// The lock.
        lock: LockId,
        /// Its queue now (empty when the lock is free).
        view: Arc<LockView>,
    },
    /// From another agent: a lock view it knows, passed on so that cycles can be seen whole.
    Forward {
        /// The forwarding agent.
        from: AgentId,
        /// The node of the lock.
        node: NodeId,
        /// The lock.
        lock: LockId,
        /// The view, with its original server version.
        view: Arc<LockView>,
    },
    /// From another agent: it surrendered `lock` on `node` at `version` to break a cycle that
    /// involves the recipient.
    Surrendered {
        /// The surrendering agent.
        by: AgentId,
        /// The node of the lock.
        node: NodeId,
        /// The lock.
        lock: LockId,
        /// The version surrendered.
        version: u64,
    },
    /// From a lock server: a request was refused.
    Rejected {
        /// The server's node.
        node: NodeId,
        /// The lock named in the request.
        lock: LockId,
        /// Why.
        reason: Rejection,
    },
}

/// Anything that travels between nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// To the lock server of the receiving node.
    Server(ServerRequest),
    /// To an agent living on the receiving node.
    Agent {
        /// The recipient.
        to: AgentId,
        /// The message.
        msg: AgentMessage,
    },
    /// To a member of a leader-election group living on the receiving node. The payload is the
    /// group's own message, encoded by `locks-leader` with [`crate::codec`]; routers carry it
    /// without looking inside.
    Member {
        /// The recipient.
        to: MemberId,
        /// The sender.
        from: MemberId,
        /// The encoded message.
        payload: Vec<u8>,
    },
}

/// The versioned envelope of every message on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub version: u16,
    /// The message.
    pub message: Message,
}

impl Envelope {
    /// Wraps a message with the current protocol version.
    pub fn new(message: Message) -> Envelope {
        Envelope {
            version: PROTOCOL_VERSION,
            message,
        }
    }
}
