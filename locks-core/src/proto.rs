//! The messages agents and lock servers exchange, locally and over the wire.
//!
//! ```text
//!   agent ──ServerRequest──▶ lock server        (lock, convert, unlock, surrender, remove, watch,
//!                                                raise versions)
//!   agent ◀──AgentMessage::Notice── lock server (the agent's entry on one lock changed)
//!   agent ◀──AgentMessage::Raised── lock server (versions raised while the agent holds the lock)
//!   agent ◀──AgentMessage::Forward── agent      (a lock view passed on for deadlock detection)
//!   agent ◀──AgentMessage::Surrendered── agent  (the sender surrendered a lock of a cycle)
//!   agent ◀──AgentMessage::Probe── agent        (a cycle to confirm, edge by edge, by its waiters)
//!   member ◀──Message::Member── member          (leader election, opaque payload)
//!   node ──Message::Introspect──▶ node          (a copy of the peer's lock table, at most N locks)
//!   node ◀──Message::TableReport── node         (its answer, matched by id)
//! ```
//!
//! Every notice carries the lock's version on its server; versions only grow, so an agent keeps
//! the newest copy of each `(lock, node)` and drops the rest (the Arts algorithm needs this).
//! A grant's version is a fencing version: it grows with every new holder.
//!
//! On the wire every message travels in an [`Envelope`] that carries [`PROTOCOL_VERSION`];
//! [`crate::codec`] encodes it with a size limit.

use crate::{AgentId, LockId, MemberId, Mode, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

/// The version of the wire protocol. A peer speaking another version is refused.
///
/// 3: cluster introspection ([`Message::Introspect`], [`Message::TableReport`]), so that a node
/// of version 2, which could not decode them, is refused at the handshake instead of dropping
/// the connection on the first such frame.
///
/// 4: [`Rejection::QuotaExceeded`], which a node of version 3 could not decode.
///
/// 5: [`ServerRequest::TryLock`] and [`Rejection::Busy`], which a node of version 4 could not
/// decode.
///
/// 6: [`ServerRequest::RaiseVersions`] and [`AgentMessage::Raised`], which a node of version 5
/// could not decode.
///
/// 7: [`Message::Notices`], which a node of version 6 could not decode.
pub const PROTOCOL_VERSION: u16 = 7;

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
    /// Convert the agent's direct lock on `lock` down to a weaker mode (StickyLocking's S→IS, the
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
    /// queues, if the lock is still at `version` and every wait of `waits` still holds on this
    /// server; ignored otherwise.
    Surrender {
        /// The surrendering agent.
        agent: AgentId,
        /// The lock that closes the cycle.
        lock: LockId,
        /// The version of the agent's copy of the lock when it decided to surrender.
        version: u64,
        /// The waits of the cycle being broken that are on this server's locks: the server
        /// checks them against its own queues, so a cycle broken meanwhile by anything on this
        /// node (another victim's surrender, a grant, a release) costs nobody its place.
        waits: Vec<Wait>,
    },
    /// Surrender `lock` to `to`, voluntarily (the Erlang original's `surrender_nowait/4`): if
    /// the agent holds the lock and `to` waits or converts on it, the agent's entries on the
    /// lock and its descendants move to the back of their queues, as for [`Self::Surrender`]
    /// at the lock's current version, and their notices carry [`Note::SurrenderedTo`].
    /// Otherwise nothing changes and the agent gets [`Rejection::SurrenderNotHeld`] or
    /// [`Rejection::NotWaiting`]. The server decides on its own queue, so `to` waiting is
    /// checked where it is known for sure.
    SurrenderTo {
        /// The surrendering agent.
        agent: AgentId,
        /// The lock it holds.
        lock: LockId,
        /// The agent that must be waiting for it.
        to: AgentId,
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
    /// [`Self::Lock`], only if the table can grant it at once, on the lock and the intention on
    /// every ancestor, to an agent with no entry on any of them yet; otherwise nothing changes
    /// and the agent gets [`Rejection::Busy`]. Never waits, so it adds no wait to any queue: an
    /// agent asks with it for the copies of a request it will ask for again, plainly, once it
    /// holds the request's first copy (`locks-agent`'s `core/agent/gate.rs`). Last of the
    /// variants, so that the others keep their encoding on the wire.
    TryLock {
        /// The requesting agent.
        agent: AgentId,
        /// The lock.
        lock: LockId,
        /// The requested mode.
        mode: Mode,
    },
    /// Every version the server hands out for `lock` from now on is above `floor` (with a data
    /// directory, also after a restart); then, if `agent` holds `lock` here, it is told so with
    /// [`AgentMessage::Raised`] (otherwise nothing is said, and the raise stands all the same).
    /// Changes no queue and never waits. A `locks-leader` leader leaves its term this way on a
    /// node where no member of its group runs: whoever is granted `lock` there after it gets a
    /// version, and so a term, above it. After [`Self::TryLock`], so that the others keep their
    /// encoding on the wire.
    RaiseVersions {
        /// The agent to tell.
        agent: AgentId,
        /// The lock it must hold for the answer.
        lock: LockId,
        /// The version every later one is above.
        floor: u64,
    },
}

impl ServerRequest {
    /// The agent (or watcher) the request is about.
    pub fn agent(&self) -> &AgentId {
        match self {
            ServerRequest::Lock { agent, .. }
            | ServerRequest::TryLock { agent, .. }
            | ServerRequest::Convert { agent, .. }
            | ServerRequest::Unlock { agent, .. }
            | ServerRequest::Surrender { agent, .. }
            | ServerRequest::SurrenderTo { agent, .. }
            | ServerRequest::RemoveAgent { agent }
            | ServerRequest::RaiseVersions { agent, .. } => agent,
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

    /// Whether `agent` is in the queue at all (holding, converting or waiting), without
    /// building the list [`LockView::agents`] makes.
    pub fn lists(&self, agent: &AgentId) -> bool {
        self.holds(agent)
            || self.converting.iter().any(|c| &c.agent == agent)
            || self.waiting.iter().any(|e| &e.agent == agent)
    }

    /// Whether anybody waits (to convert or for a new grant).
    pub fn has_waiters(&self) -> bool {
        !self.converting.is_empty() || !self.waiting.is_empty()
    }

    /// Every agent in the queue, holders first, each once. Linear in the queue: a hot lock's
    /// view lists thousands of agents, and a converter is listed among the holders too.
    pub fn agents(&self) -> Vec<&AgentId> {
        let mut seen: HashSet<&AgentId> = HashSet::with_capacity(self.granted.len());
        self.granted
            .iter()
            .map(|e| &e.agent)
            .chain(self.converting.iter().map(|c| &c.agent))
            .chain(self.waiting.iter().map(|e| &e.agent))
            .filter(|a| seen.insert(*a))
            .collect()
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
    /// `agent` surrendered the lock at `version` to break a deadlock.
    Surrendered {
        /// Who surrendered.
        agent: AgentId,
        /// The version it surrendered.
        version: u64,
    },
    /// This notice answers the recipient's own [`ServerRequest::Surrender`] at `version`, which
    /// was not carried out (the lock had changed, or a wait of the cycle no longer held): the
    /// recipient's entries are where they were, and the notice shows the queue now.
    NotSurrendered {
        /// The version named in the surrender.
        version: u64,
    },
    /// This notice answers the recipient's own [`ServerRequest::Unlock`] of the lock. Until it
    /// comes, a grant of the lock sent before the unlock may still be on its way, and an agent
    /// that asks for the lock again must not count it.
    Unlocked,
    /// `agent` surrendered the lock at `version` to the waiter `to`, of its own will
    /// ([`ServerRequest::SurrenderTo`]); no deadlock was involved.
    SurrenderedTo {
        /// Who surrendered.
        agent: AgentId,
        /// The waiter it surrendered to.
        to: AgentId,
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
    /// Why, when it is more than a queue change. Boxed: a note is rare, and inline it was 80
    /// of the notice's 136 bytes, moved with every notice of a hot lock's queue.
    pub note: Option<Box<Note>>,
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
    /// The lock id is deeper or larger than the server accepts. The text comes from the
    /// server: it is shown escaped and cut at 200 characters.
    #[error("lock id too large: {}", crate::escape::Escaped::bounded(.0, 200))]
    LockIdTooLarge(String),
    /// The server is shutting down.
    #[error("the lock server is shutting down")]
    ShuttingDown,
    /// A [`ServerRequest::SurrenderTo`] named a lock the agent does not hold.
    #[error("cannot surrender the lock to {to}: the agent does not hold it")]
    SurrenderNotHeld {
        /// The agent it was to be surrendered to.
        to: AgentId,
    },
    /// A [`ServerRequest::SurrenderTo`] named an agent that does not wait for the lock.
    #[error("cannot surrender the lock to {to}: it does not wait for it")]
    NotWaiting {
        /// The agent named.
        to: AgentId,
    },
    /// The lock's queue is too large to be sent to the agent in one message (the lock server's
    /// node limits the size of what it sends to another node): the request cannot be served
    /// there, and the server has withdrawn it (a watch, likewise, has been dropped).
    #[error("the lock's queue is too large to be sent to the agent's node")]
    QueueTooLarge,
    /// A `Lock` from an agent of another node would take that node's agents past one of the
    /// lock server's per-peer quotas (`NodeConfig::peer_quotas` in `locks-server`): nothing
    /// changed. What the peer's agents hold is not touched; once they release enough, the same
    /// request may succeed.
    #[error("this node's per-peer quota is used up: at most {limit} {quota} for one peer node")]
    QuotaExceeded {
        /// Which quota.
        quota: Quota,
        /// Its limit on the lock server's node.
        limit: u64,
    },
    /// A [`ServerRequest::TryLock`] that the table could not grant at once: nothing changed.
    /// (Last of the variants, so that the others keep their encoding on the wire.)
    #[error("the lock cannot be granted at once")]
    Busy,
}

/// A per-peer quota of a lock server (see [`Rejection::QuotaExceeded`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Quota {
    /// Entries on locks (a lock and each of its ancestors count once per agent), granted or not.
    Locks,
    /// Entries waiting or converting.
    Queued,
    /// Bytes of the lock ids of the entries (each entry counts its whole id's key payload).
    Bytes,
}

impl Quota {
    /// The quota's name, as metrics label it: `locks`, `queued` or `bytes`.
    pub fn name(self) -> &'static str {
        match self {
            Quota::Locks => "locks",
            Quota::Queued => "queued",
            Quota::Bytes => "bytes",
        }
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quota::Locks => "locks (entries on lock ids)",
            Quota::Queued => "queued requests",
            Quota::Bytes => "bytes of lock ids",
        })
    }
}

impl Rejection {
    /// A short name of the kind of refusal, for logs and metrics (never text from the server).
    pub fn name(&self) -> &'static str {
        match self {
            Rejection::ModeNotInTable(_) => "mode not in table",
            Rejection::NotHeld => "not held",
            Rejection::NotWeaker { .. } => "not weaker",
            Rejection::LockIdTooLarge(_) => "lock id too large",
            Rejection::ShuttingDown => "shutting down",
            Rejection::SurrenderNotHeld { .. } => "surrender not held",
            Rejection::NotWaiting { .. } => "not waiting",
            Rejection::QueueTooLarge => "queue too large",
            Rejection::QuotaExceeded { .. } => "quota exceeded",
            Rejection::Busy => "busy",
        }
    }
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
    /// From another agent: a cycle of the wait-for graph on its way round, to be confirmed by
    /// the waiter of each edge from what it knows first hand before its victim acts.
    Probe(Probe),
    /// From a lock server: a request was refused.
    Rejected {
        /// The server's node.
        node: NodeId,
        /// The lock named in the request.
        lock: LockId,
        /// Why.
        reason: Rejection,
    },
    /// From a lock server: it raised its versions above `floor`
    /// ([`ServerRequest::RaiseVersions`]) while the agent held `lock` there.
    Raised {
        /// The server's node.
        node: NodeId,
        /// The lock the agent held.
        lock: LockId,
        /// Every version handed out after this one is above it.
        floor: u64,
    },
}

/// One wait of a deadlock's cycle: `waiter` waits for `blocker` on `lock` (on the server the
/// [`ServerRequest::Surrender`] naming it goes to).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Wait {
    /// The waiting agent.
    pub waiter: AgentId,
    /// The agent it waits for.
    pub blocker: AgentId,
    /// The lock.
    pub lock: LockId,
}

/// One edge of a [`Probe`]: `waiter` waits for `blocker` on `lock` at `node`, as a view of
/// version `version` showed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProbeEdge {
    /// The waiting agent: the one that confirms this edge.
    pub waiter: AgentId,
    /// The agent it waits for.
    pub blocker: AgentId,
    /// The lock.
    pub lock: LockId,
    /// The lock's node.
    pub node: NodeId,
    /// The version of the newest view known to show the edge (raised by the waiter when it
    /// confirms from a newer one).
    pub version: u64,
}

/// A cycle of waiting agents that some agent saw in the views it was sent, travelling round the
/// cycle so that each waiter confirms its own edge from what it knows first hand. The last edge
/// is the victim's own; once the victim has confirmed it, every edge has been confirmed and the
/// victim gives way (`locks-agent`'s `core/agent/probe.rs` describes the protocol).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Probe {
    /// The edges in cycle order: `edges[i].blocker == edges[i + 1].waiter`, and the last edge's
    /// blocker is the first edge's waiter. The last edge's waiter is the victim.
    pub edges: Vec<ProbeEdge>,
    /// The index of the edge to confirm next; the probe travels to that edge's waiter.
    pub next: u32,
    /// The victim's count of what it had learnt when it sent the probe: a probe that returns
    /// after the victim learnt of a change of its own entries or of another surrender is
    /// dropped (the victim probes again if the cycle is still there).
    pub epoch: u64,
    /// Set by the waiter of `edges[next]` when it does not wait on that copy at all as of
    /// `edges[next].version` (it is not queued there, or none of its pending requests needs
    /// the copy): the probe then goes straight back to the victim, which leaves that waiter's
    /// edges from that copy out of its analysis until it learns something new. (A waiter that
    /// still waits there, for others, sends the victim its newer view instead.)
    pub refuted: bool,
}

impl Probe {
    /// The agent that gives way once every edge is confirmed: the waiter of the last edge.
    pub fn victim(&self) -> Option<&AgentId> {
        self.edges.last().map(|e| &e.waiter)
    }

    /// This probe refuted, with the victim to send it back to: what becomes of a probe that
    /// cannot go on, because the agent it asks waits for nobody (it ended, aborted, or took its
    /// locks without waiting) or because the edge at `next` is gone. `None` for a probe
    /// refuted already (a probe goes back at most once) or without edges.
    pub fn refuted_back(mut self) -> Option<(AgentId, Probe)> {
        if self.refuted {
            return None;
        }
        let victim = self.victim()?.clone();
        self.refuted = true;
        Some((victim, self))
    }

    /// Whether the edges form one cycle (each edge's blocker is the next edge's waiter).
    pub fn is_cycle(&self) -> bool {
        let n = self.edges.len();
        n >= 2
            && (0..n).all(|i| self.edges[i].blocker == self.edges[(i + 1) % n].waiter)
            && (self.next as usize) < n
    }
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
    /// To the receiving node itself: send back a copy of your lock table (cluster
    /// introspection). Answered with a [`Message::TableReport`] carrying the same `id`, from
    /// the table directly (no agent is involved), or not at all when the receiver is answering
    /// too many such requests from the sender (the asker bounds its wait anyway).
    Introspect(IntrospectRequest),
    /// The answer to a [`Message::Introspect`]. An answer nobody waits for (late, or never
    /// asked for) is dropped.
    TableReport(TableReport),
    /// Several notices of one lock server to one agent living on the receiving node, in the
    /// order the server sent them: the receiver delivers them as that many
    /// [`Message::Agent`]s with [`AgentMessage::Notice`]. A server sends the notices of one
    /// operation to one agent this way (a lock and its ancestors' intention entries change
    /// together), one frame instead of one per notice.
    Notices {
        /// The recipient.
        to: AgentId,
        /// The notices, in order; every one from the sending node's server.
        notices: Vec<LockNotice>,
    },
}

/// A request for a node's lock table (see [`Message::Introspect`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntrospectRequest {
    /// Chosen by the asker to match the answer; echoed in [`TableReport::id`].
    pub id: u64,
    /// The most locks the answer may list (the answering node lowers it to its own cap).
    pub max_locks: u32,
    /// The largest frame the asker accepts, in bytes: the answer lists fewer locks if that is
    /// what it takes to fit (a frame the asker cannot read would end the connection).
    pub max_bytes: u32,
}

/// A node's lock table, or its first locks by id (see [`Message::TableReport`]).
///
/// Invariant: `locks` is sorted by lock id and holds at most `total_locks` entries; fewer
/// means the report was truncated (to the asker's `max_locks`, the answerer's cap, or the
/// frame size).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableReport {
    /// The [`IntrospectRequest::id`] this answers (0 for a report not sent over the wire).
    pub id: u64,
    /// The node whose table this is.
    pub node: NodeId,
    /// The last version the table handed out.
    pub version: u64,
    /// How many locks the table has (with entries or watchers), listed or not.
    pub total_locks: u64,
    /// The locks listed, by lock id.
    pub locks: Vec<LockReport>,
}

impl TableReport {
    /// Whether some locks of the table were left out.
    pub fn truncated(&self) -> bool {
        (self.locks.len() as u64) < self.total_locks
    }
}

/// One lock of a [`TableReport`]: its id and its queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockReport {
    /// The lock.
    pub lock: LockId,
    /// Its queue as agents see it (with the lock's version).
    pub view: LockView,
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
