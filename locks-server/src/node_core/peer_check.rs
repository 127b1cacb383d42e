//! What a peer may say: the one place that checks a message from another node against the
//! node it came from, before anything acts on it.
//!
//! A link's peer is authenticated (the cookie handshake, or a certificate under TLS), so the
//! router knows which node sent each envelope. A node speaks only for itself:
//!
//! | message | admitted from node `p` only when |
//! | --- | --- |
//! | `Server(request)` | the request's agent (or watcher) lives on `p` |
//! | `Member { from, .. }` | the sending member lives on `p` |
//! | `Agent(Notice)`, every notice of `Notices`, `Agent(Rejected)`, `Agent(Watched)`, `Agent(Raised)` | the lock server named is `p`'s |
//! | `Agent(Forward { from, .. })` | the forwarding agent lives on `p` |
//! | `Agent(Surrendered { by, .. })` | the surrendering agent lives on `p` |
//! | `Agent(Probe)`, not refuted | it is a cycle, it goes to the waiter of its next edge, and `p` is the node of the agent that passes it on: the waiter of the edge before (the victim's, for the first edge) |
//! | `Agent(Probe)`, refuted | it is a cycle, it goes back to its victim, and `p` is the node of the waiter of the edge it refutes (that waiter refuted it, or `p`'s router found the waiter gone) |
//! | `Introspect`, `TableReport` | always (the introspection layer matches an answer to the node asked) |
//!
//! Every version a message carries (a notice's, its queue's and its note's, a watched or
//! forwarded view's, a surrender's, a probe's edges', the floor of a raise and of its
//! answer) is at most [`version_ceiling`] of this
//! node's clock. A node's versions start at its start time in microseconds times
//! [`VERSIONS_PER_MICROSECOND`] and grow by one per operation, fewer than that many per
//! microsecond (the scheme `version_base` relies on for versions to grow across restarts), so
//! no node whose clock is at most [`MAX_CLOCK_AHEAD`] ahead of this one's has issued a larger
//! version. Versions only grow, so one absurd version (`u64::MAX`) would otherwise hide every
//! later real one of its copy for good. A node with a data directory starts at or above the
//! ceiling it recorded (`crate::data_dir`), which runs ahead of its clock by one reserve
//! (2^32 versions, about 4 s of the clock's allowance) per restart, and by as much as its clock
//! was stepped back since: its versions are admitted while that stays within
//! [`MAX_CLOCK_AHEAD`]. A receiver whose own clock is stepped back by more refuses them (and
//! counts each refusal) until its clock is right again.
//!
//! A message that fails is dropped, counted (`locks_peer_messages_refused_total`, by
//! [`PeerFault::name`]) and warned about at most once per fault per interval
//! ([`crate::log_limit`]); nothing else sees it. Whatever a peer says within these rules
//! about its own locks, agents and members it is entitled to say.

use locks_core::proto::{AgentMessage, LockNotice, LockView, Message, Note, Probe, ServerRequest};
use locks_core::{AgentId, NodeId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How many versions a node may hand out per microsecond since its start at most (see the
/// module documentation; a node's first version is its start time in microseconds times this).
pub const VERSIONS_PER_MICROSECOND: u64 = 1024;

/// How far ahead of this node's clock a peer's clock may be for its versions to be admitted.
pub const MAX_CLOCK_AHEAD: Duration = Duration::from_secs(24 * 60 * 60);

/// Why a message from a peer was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerFault {
    /// A lock server request, forward or surrender for an agent of another node.
    ForeignAgent,
    /// A member message from a member of another node.
    ForeignMember,
    /// A notice, rejection or watched view in the name of another node's lock server.
    ForeignServer,
    /// A probe the sender had no part in passing on, or sent to an agent it does not go to.
    ForeignEdge,
    /// A probe that is not one cycle.
    MalformedProbe,
    /// A version larger than any node could have issued by now (see `node_core/peer_check.rs`).
    FutureVersion,
}

impl PeerFault {
    /// Every fault, in the order of [`PeerFault::index`].
    pub const ALL: [PeerFault; 6] = [
        PeerFault::ForeignAgent,
        PeerFault::ForeignMember,
        PeerFault::ForeignServer,
        PeerFault::ForeignEdge,
        PeerFault::MalformedProbe,
        PeerFault::FutureVersion,
    ];

    /// The fault's name: the `reason` label of its metric, and its log reason.
    pub fn name(self) -> &'static str {
        match self {
            PeerFault::ForeignAgent => "foreign_agent",
            PeerFault::ForeignMember => "foreign_member",
            PeerFault::ForeignServer => "foreign_server",
            PeerFault::ForeignEdge => "foreign_edge",
            PeerFault::MalformedProbe => "malformed_probe",
            PeerFault::FutureVersion => "future_version",
        }
    }

    /// The fault's place in [`PeerFault::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for PeerFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PeerFault::ForeignAgent => "it speaks for an agent of another node",
            PeerFault::ForeignMember => "it speaks for a group member of another node",
            PeerFault::ForeignServer => "it speaks for the lock server of another node",
            PeerFault::ForeignEdge => "it passes on a probe it has no part in",
            PeerFault::MalformedProbe => "it carries a probe that is not a cycle",
            PeerFault::FutureVersion => "it carries a version no node can have issued yet",
        })
    }
}

/// The largest version any node may have issued at `now` of this node's clock (see the module
/// documentation).
pub fn version_ceiling(now: SystemTime) -> u64 {
    let micros = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_add(MAX_CLOCK_AHEAD)
        .as_micros();
    u64::try_from(micros)
        .unwrap_or(u64::MAX)
        .saturating_mul(VERSIONS_PER_MICROSECOND)
}

/// [`version_ceiling`] as of the last time the clock was read: read again only for a version
/// above it (the ceiling only grows), so the common message costs no clock read.
#[derive(Debug, Default)]
pub struct VersionCeiling(AtomicU64);

impl VersionCeiling {
    /// Whether `version` is at most the ceiling now.
    pub fn admits(&self, version: u64) -> bool {
        if version <= self.0.load(Ordering::Relaxed) {
            return true;
        }
        let ceiling = version_ceiling(SystemTime::now());
        self.0.fetch_max(ceiling, Ordering::Relaxed);
        version <= ceiling
    }
}

/// Checks `message`, received from the authenticated peer `from`, against the rules of the
/// module documentation. `admits` says whether a version is within the ceiling.
pub fn check(
    from: &NodeId,
    message: &Message,
    admits: impl Fn(u64) -> bool,
) -> Result<(), PeerFault> {
    let own = |agent: &AgentId| agent.node() == from;
    match message {
        Message::Server(request) => {
            ensure(own(request.agent()), PeerFault::ForeignAgent)?;
            match request {
                ServerRequest::RaiseVersions { floor, .. } => {
                    ensure(admits(*floor), PeerFault::FutureVersion)
                }
                _ => Ok(()),
            }
        }
        Message::Member { from: member, .. } => {
            ensure(member.node() == from, PeerFault::ForeignMember)
        }
        Message::Notices { notices, .. } => notices
            .iter()
            .try_for_each(|notice| check_notice(from, notice, &admits)),
        Message::Agent { to, msg } => match msg {
            AgentMessage::Notice(notice) => check_notice(from, notice, &admits),
            AgentMessage::Rejected { node, .. } => ensure(node == from, PeerFault::ForeignServer),
            AgentMessage::Raised { node, floor, .. } => {
                ensure(node == from, PeerFault::ForeignServer)?;
                ensure(admits(*floor), PeerFault::FutureVersion)
            }
            AgentMessage::Watched { node, view, .. } => {
                ensure(node == from, PeerFault::ForeignServer)?;
                ensure(admits(view.version), PeerFault::FutureVersion)
            }
            AgentMessage::Forward {
                from: agent, view, ..
            } => {
                ensure(own(agent), PeerFault::ForeignAgent)?;
                ensure(admits(view.version), PeerFault::FutureVersion)
            }
            AgentMessage::Surrendered { by, version, .. } => {
                ensure(own(by), PeerFault::ForeignAgent)?;
                ensure(admits(*version), PeerFault::FutureVersion)
            }
            AgentMessage::Probe(probe) => {
                check_probe(from, to, probe)?;
                ensure(
                    probe.edges.iter().all(|e| admits(e.version)),
                    PeerFault::FutureVersion,
                )
            }
        },
        Message::Introspect(_) | Message::TableReport(_) => Ok(()),
    }
}

/// A notice must come from its own server, with versions within the ceiling.
fn check_notice(
    from: &NodeId,
    notice: &LockNotice,
    admits: &impl Fn(u64) -> bool,
) -> Result<(), PeerFault> {
    ensure(&notice.node == from, PeerFault::ForeignServer)?;
    ensure(
        notice_versions(notice).all(admits),
        PeerFault::FutureVersion,
    )
}

/// The probe rows of the table in the module documentation.
fn check_probe(from: &NodeId, to: &AgentId, probe: &Probe) -> Result<(), PeerFault> {
    let (sender, recipient) = probe_route(probe).ok_or(PeerFault::MalformedProbe)?;
    ensure(
        sender.node() == from && recipient == to,
        PeerFault::ForeignEdge,
    )
}

/// The agent that passes `probe` on and the agent it goes to, if it is a cycle: not refuted,
/// the waiter of the edge before `next` (the victim's, for the first edge) sends it to the
/// waiter of `next`; refuted, the waiter of `next` sends it back to the victim.
pub(crate) fn probe_route(probe: &Probe) -> Option<(&AgentId, &AgentId)> {
    if !probe.is_cycle() {
        return None;
    }
    let n = probe.edges.len();
    let next = probe.next as usize;
    Some(if probe.refuted {
        (&probe.edges[next].waiter, &probe.edges[n - 1].waiter)
    } else {
        (
            &probe.edges[(next + n - 1) % n].waiter,
            &probe.edges[next].waiter,
        )
    })
}

/// Every version a notice carries.
fn notice_versions(notice: &LockNotice) -> impl Iterator<Item = u64> + '_ {
    let note = notice.note.as_deref().and_then(|note| match note {
        Note::Surrendered { version, .. }
        | Note::NotSurrendered { version }
        | Note::SurrenderedTo { version, .. } => Some(*version),
        Note::Unlocked | Note::Converted => None,
    });
    std::iter::once(notice.version)
        .chain(notice.queue.as_deref().map(|q: &LockView| q.version))
        .chain(note)
}

fn ensure(ok: bool, fault: PeerFault) -> Result<(), PeerFault> {
    if ok { Ok(()) } else { Err(fault) }
}

#[cfg(test)]
mod tests;
