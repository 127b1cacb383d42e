//! Where a message for an agent of this node goes: the router's delivery rules, decided from
//! what the router knows of the agent's mailbox. The router (`crate::router`) looks the
//! mailbox up and carries out the answer; it decides nothing itself.
//!
//! | the agent's mailbox | the message | what happens ([`ForAgent`]) |
//! | --- | --- | --- |
//! | its actor's, open | any | delivered to the actor |
//! | kept for a transaction without an actor that waits for nothing | a deadlock probe | refuted: sent back to its victim |
//! | kept for a transaction without an actor | anything else, and probes once it waits | kept, in order, for its actor |
//! | its actor's, closed | any | the mailbox is dropped and the agent is gone |
//! | none (the agent ended, never began, or is of an earlier incarnation) | any | the agent is gone |
//!
//! An agent that is gone is reported to the sender as `RouteError::UnknownAgent`, which the
//! lock server takes as the agent's death (`TableInput::Undelivered`). A probe for it is
//! refuted back to its victim ([`refuted`]): an agent that ended waits for nobody, and the
//! victim must not wait for the probe. A refuted probe is never refuted again, so a probe
//! bounces at most once. When the message came from a peer, that peer's lock server is told to
//! remove the agent ([`gone_from_peer`]): the sender is that server (a notice) or an agent
//! there, and either way that server must not keep locks for an agent that is gone.
//!
//! Why a transaction without an actor refutes probes: it took its locks on the fast path and
//! waits for nothing, so it is in no cycle. The table marks it waiting (`waits`) before it
//! tells anybody of a wait of its, so no probe that followed a real edge through it is refuted.

use locks_core::AgentId;
use locks_core::proto::{AgentMessage, ServerRequest};

/// What the router knows of a local agent's mailbox when a message for it comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MailboxState {
    /// Its actor's mailbox, still open.
    Open,
    /// Its actor's mailbox, closed (the actor stopped).
    Closed,
    /// Kept for a transaction without an actor; `waits` once the table queued a request of it.
    Kept {
        /// Whether the transaction waits in the table.
        waits: bool,
    },
    /// None: the agent ended, never began, or belongs to an earlier incarnation.
    Missing,
}

/// What to do with a message for a local agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForAgent {
    /// Deliver it to the actor.
    Deliver,
    /// Keep it, in order, for the actor that will take the transaction over.
    Keep,
    /// Refute it (a probe) back to its victim; the agent is not gone.
    Refute,
    /// The agent is gone (dropping its closed mailbox when `drop_mailbox`): refute a probe
    /// back to its victim and report the agent unknown.
    Gone {
        /// Whether the mailbox is to be dropped.
        drop_mailbox: bool,
    },
}

/// Decides where `msg` for a local agent with `mailbox` goes (see the module documentation).
pub fn for_agent(mailbox: MailboxState, msg: &AgentMessage) -> ForAgent {
    match mailbox {
        MailboxState::Open => ForAgent::Deliver,
        MailboxState::Kept { waits: false } if matches!(msg, AgentMessage::Probe(_)) => {
            ForAgent::Refute
        }
        MailboxState::Kept { .. } => ForAgent::Keep,
        MailboxState::Closed => ForAgent::Gone { drop_mailbox: true },
        MailboxState::Missing => ForAgent::Gone {
            drop_mailbox: false,
        },
    }
}

/// The refuted probe to send back to its victim when `msg`, a probe not refuted yet, could not
/// go on; `None` for any other message.
pub fn refuted(msg: AgentMessage) -> Option<(AgentId, AgentMessage)> {
    match msg {
        AgentMessage::Probe(probe) => probe
            .refuted_back()
            .map(|(victim, probe)| (victim, AgentMessage::Probe(probe))),
        _ => None,
    }
}

/// What to tell the lock server of the peer a message for `agent`, a local agent that is gone,
/// came from.
pub fn gone_from_peer(agent: AgentId) -> ServerRequest {
    ServerRequest::RemoveAgent { agent }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::proto::{EntryState, LockNotice, Probe, ProbeEdge};
    use locks_core::{LockId, Mode, NodeId};

    fn node() -> NodeId {
        NodeId::new("a").unwrap()
    }

    fn agent(serial: u64) -> AgentId {
        AgentId::new(node(), 1, serial)
    }

    /// A probe round agents 1 and 2 (victim 2).
    fn probe(refuted: bool) -> AgentMessage {
        let edge = |waiter, blocker| ProbeEdge {
            waiter: agent(waiter),
            blocker: agent(blocker),
            lock: LockId::new(["x"]).unwrap(),
            node: node(),
            version: 1,
        };
        AgentMessage::Probe(Probe {
            edges: vec![edge(1, 2), edge(2, 1)],
            next: 0,
            epoch: 0,
            refuted,
        })
    }

    fn notice() -> AgentMessage {
        AgentMessage::Notice(LockNotice {
            node: node(),
            lock: LockId::new(["x"]).unwrap(),
            version: 1,
            state: EntryState::Granted(Mode::X),
            queue: None,
            note: None,
        })
    }

    #[test]
    fn an_open_mailbox_gets_every_message() {
        assert_eq!(for_agent(MailboxState::Open, &notice()), ForAgent::Deliver);
        assert_eq!(
            for_agent(MailboxState::Open, &probe(false)),
            ForAgent::Deliver
        );
    }

    #[test]
    fn a_transaction_without_an_actor_refutes_probes_until_it_waits() {
        let idle = MailboxState::Kept { waits: false };
        let waiting = MailboxState::Kept { waits: true };
        assert_eq!(for_agent(idle, &probe(false)), ForAgent::Refute);
        assert_eq!(for_agent(idle, &notice()), ForAgent::Keep);
        assert_eq!(for_agent(waiting, &probe(false)), ForAgent::Keep);
        assert_eq!(for_agent(waiting, &notice()), ForAgent::Keep);
    }

    #[test]
    fn a_closed_or_missing_mailbox_is_an_agent_gone() {
        assert_eq!(
            for_agent(MailboxState::Closed, &notice()),
            ForAgent::Gone { drop_mailbox: true }
        );
        assert_eq!(
            for_agent(MailboxState::Missing, &probe(false)),
            ForAgent::Gone {
                drop_mailbox: false
            }
        );
    }

    #[test]
    fn a_probe_is_refuted_back_to_its_victim_once() {
        let Some((victim, back)) = refuted(probe(false)) else {
            panic!("a probe not refuted yet is sent back");
        };
        let AgentMessage::Probe(p) = &back else {
            panic!("a probe goes back");
        };
        assert!(p.refuted);
        assert_eq!(victim, agent(2));
        assert_eq!(
            refuted(back),
            None,
            "a refuted probe is never refuted again"
        );
        assert_eq!(refuted(notice()), None);
    }

    #[test]
    fn a_peer_is_told_to_remove_an_agent_gone() {
        assert_eq!(
            gone_from_peer(agent(7)),
            ServerRequest::RemoveAgent { agent: agent(7) }
        );
    }
}
