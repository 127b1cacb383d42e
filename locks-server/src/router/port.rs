//! [`Port`]: a node's router as the other crates of the workspace reach it, with only the
//! capabilities an agent or a group member of this node needs; [`AgentPort`]: the same for one
//! agent, which sends requests to lock servers, messages to agents and to group members only in
//! that agent's name.
//!
//! What it leaves out is what would let code in the process forge: delivering a message as if
//! a peer sent it (only the cluster link, which authenticated the peer, may), registering a
//! mailbox under an agent id this node did not just hand out (taking over another
//! transaction's messages), dropping the mailbox of an agent or member other than the
//! port's own, telling the server a node went down, or sending a lock server, an agent or a
//! group member a message in the name of another agent (a message is sent only through the
//! [`AgentPort`] of the agent that sends it, made from the [`Presence`] or [`FreshAgent`] its
//! owner was handed; one naming any other sender is refused with [`RouteError::NotThisAgent`],
//! and a member's message is stamped with the port's own member). The [`Router`] behind it
//! stays private to the node; a test builds a router of its own ([`Router::new`]), which no
//! live node uses.

use super::{Deliver, MemberDelivery, Presence, RouteError, Router};
use crate::log_limit::LogLimiter;
use crate::metrics::NodeMetrics;
use crate::node_core::peer_check::probe_route;
use actix::Recipient;
use locks_core::proto::{AgentMessage, ServerRequest};
use locks_core::{AgentId, MemberId, NodeId};
use std::sync::Arc;

/// A node's router, as the agents and members of that node use it: make the [`AgentPort`] of an agent id it was handed, give a mailbox to an agent id the node just handed out ([`FreshAgent`],
/// [`Presence`]), read leases, metrics and the warning limiter. Made only by the node.
#[derive(Clone)]
pub struct Port(Arc<Router>);

/// An agent id this node has just handed out and nobody has registered a mailbox for:
/// [`Port::register_agent`] consumes it, so each id gets one mailbox, by whoever asked for it.
#[derive(Debug)]
pub struct FreshAgent(AgentId);

impl FreshAgent {
    pub(crate) fn new(id: AgentId) -> FreshAgent {
        FreshAgent(id)
    }

    /// The agent id.
    pub fn id(&self) -> &AgentId {
        &self.0
    }

    /// The id, given up with the right to register it.
    pub fn into_id(self) -> AgentId {
        self.0
    }

    /// The group member id of this agent.
    pub fn member(&self) -> MemberId {
        MemberId::of_agent(&self.0)
    }
}

impl Port {
    pub(crate) fn new(router: Arc<Router>) -> Port {
        Port(router)
    }

    /// The node.
    pub fn node(&self) -> &NodeId {
        self.0.node()
    }

    /// The node's metric handles.
    pub fn metrics(&self) -> &NodeMetrics {
        self.0.metrics()
    }

    /// The node's limiter of warnings that others can cause.
    pub fn warnings(&self) -> &LogLimiter {
        self.0.warnings()
    }

    /// Whether this node's lease on `node` is valid now ([`Router::lease_valid`]).
    pub fn lease_valid(&self, node: &NodeId) -> bool {
        self.0.lease_valid(node)
    }

    /// Whether the lease on `node` ran out, rather than the link going down
    /// ([`Router::lease_ran_out`]).
    pub fn lease_ran_out(&self, node: &NodeId) -> bool {
        self.0.lease_ran_out(node)
    }

    /// The port of the transaction of `presence`, which sends requests in its name only.
    pub fn for_transaction(&self, presence: &Presence) -> AgentPort {
        AgentPort::new(self.clone(), presence.id().clone())
    }

    /// The port of the agent id `fresh`, which sends requests in its name only.
    pub fn for_agent(&self, fresh: &FreshAgent) -> AgentPort {
        AgentPort::new(self.clone(), fresh.id().clone())
    }

    /// Registers the mailbox of an agent with the id the node handed out, and (for a group
    /// member) the member's mailbox under that agent's member id.
    pub fn register_agent(
        &self,
        agent: FreshAgent,
        recipient: Recipient<Deliver>,
        member: Option<Recipient<MemberDelivery>>,
    ) {
        if let Some(member) = member {
            self.0.register_member(agent.member(), member);
        }
        self.0.register_agent(agent.0, recipient);
    }

    /// Gives the transaction of `presence`, which had no actor, its actor
    /// ([`Router::attach_agent`]): only the one who began the transaction holds its presence.
    pub fn attach_agent(&self, presence: &Presence, recipient: Recipient<Deliver>) {
        self.0.attach_agent(presence.id(), recipient);
    }

    /// Whether `agent` is a running agent of this node, or a live transaction without one.
    pub fn has_agent(&self, agent: &AgentId) -> bool {
        self.0.has_agent(agent)
    }

    /// How many agents run on this node, live transactions without an actor included.
    pub fn agent_count(&self) -> usize {
        self.0.agent_count()
    }

    /// Whether the node's lock server runs.
    pub fn server_running(&self) -> bool {
        self.0.server_running()
    }

    /// How many cluster queries wait for answers from other nodes.
    pub fn introspections_waiting(&self) -> usize {
        self.0.introspections_waiting()
    }

    /// Whether `node` is this node or a peer it was ever connected to (a node not heard of is
    /// unknown rather than down: a misspelt name, a node not started).
    pub fn has_heard_of(&self, node: &NodeId) -> bool {
        self.0.has_heard_of(node)
    }

    /// The transaction of `presence` ended ([`Router::end_transaction`]).
    pub fn end_transaction(&self, presence: &Presence) {
        self.0.end_transaction(presence);
    }
}

/// The [`Port`] of one agent of this node (it dereferences to the node's port): it sends
/// requests to lock servers in that agent's name only. Made only from what the agent's owner
/// was handed ([`Port::for_transaction`], [`Port::for_agent`]), so code that holds one agent's
/// port cannot speak for another agent of the process, as the node-to-node check
/// (`node_core::peer_check`) keeps a peer from speaking for an agent of another node.
#[derive(Clone)]
pub struct AgentPort {
    port: Port,
    agent: AgentId,
}

impl AgentPort {
    fn new(port: Port, agent: AgentId) -> AgentPort {
        AgentPort { port, agent }
    }

    /// The agent this port speaks for.
    pub fn agent(&self) -> &AgentId {
        &self.agent
    }

    /// Sends a request to the lock server of `node` ([`Router::send_server`]), if it names
    /// this port's agent; a request about any other agent is refused
    /// ([`RouteError::NotThisAgent`]) and not sent.
    pub fn send_server(&self, node: &NodeId, request: ServerRequest) -> Result<(), RouteError> {
        if request.agent() != &self.agent {
            return Err(RouteError::NotThisAgent {
                port: self.agent.clone(),
                named: request.agent().clone(),
            });
        }
        self.port.0.send_server(node, request)
    }

    /// Sends a message to an agent, wherever it lives ([`Router::send_agent`]), if this
    /// port's agent is its sender, by the rule the node-to-node check applies to a peer
    /// (`node_core::peer_check`): the forwarding agent of a `Forward`, the surrendering agent of a
    /// `Surrendered`, the agent that passes a probe on. One naming another sender is refused
    /// ([`RouteError::NotThisAgent`]), one naming none (a lock server's message, a probe that
    /// is not a cycle) too ([`RouteError::NoAgentSender`]); neither is sent.
    pub fn send_agent(&self, to: &AgentId, msg: AgentMessage) -> Result<(), RouteError> {
        let sender = match &msg {
            AgentMessage::Forward { from, .. } => Some(from),
            AgentMessage::Surrendered { by, .. } => Some(by),
            AgentMessage::Probe(probe) => probe_route(probe).map(|(sender, _)| sender),
            AgentMessage::Notice(_)
            | AgentMessage::Watched { .. }
            | AgentMessage::Rejected { .. }
            | AgentMessage::Raised { .. } => None,
        };
        match sender {
            Some(sender) if sender == &self.agent => self.port.0.send_agent(to, msg),
            Some(sender) => Err(RouteError::NotThisAgent {
                port: self.agent.clone(),
                named: sender.clone(),
            }),
            None => Err(RouteError::NoAgentSender {
                port: self.agent.clone(),
                to: to.clone(),
            }),
        }
    }

    /// Sends an encoded message from the group member of this agent to member `to`
    /// ([`Router::send_member`]).
    pub fn send_member(&self, to: &MemberId, payload: Vec<u8>) -> Result<(), RouteError> {
        self.port
            .0
            .send_member(to, MemberId::of_agent(&self.agent), payload)
    }

    /// Forgets this agent's mailbox (its actor stopped); no other agent's.
    pub fn unregister_agent(&self) {
        self.port.0.unregister_agent(&self.agent);
    }

    /// Forgets the group member of this agent (it stopped); no other member.
    pub fn unregister_member(&self) {
        self.port
            .0
            .unregister_member(&MemberId::of_agent(&self.agent));
    }
}

impl std::ops::Deref for AgentPort {
    type Target = Port;

    fn deref(&self) -> &Port {
        &self.port
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::LockId;
    use locks_core::proto::{Probe, ProbeEdge, Rejection, ServerRequest};

    fn node(name: &str) -> NodeId {
        NodeId::new(name).unwrap()
    }

    /// A request is sent only in the name of the agent the port was made for.
    #[test]
    fn an_agent_port_refuses_a_request_naming_another_agent() {
        let here = node("a");
        let port = Port::new(Arc::new(Router::new(here.clone())));
        let mine = AgentId::new(here.clone(), 1, 1);
        let other = AgentId::new(here.clone(), 1, 2);
        let agent = port.for_agent(&FreshAgent::new(mine.clone()));
        let about = |agent: &AgentId| ServerRequest::RemoveAgent {
            agent: agent.clone(),
        };
        assert_eq!(
            agent.send_server(&here, about(&other)),
            Err(RouteError::NotThisAgent {
                port: mine.clone(),
                named: other.clone(),
            })
        );
        // Its own request passes the check (and fails only because this router has no
        // server).
        assert_eq!(
            agent.send_server(&here, about(&mine)),
            Err(RouteError::ServerStopped)
        );
        let watch = ServerRequest::Watch {
            watcher: other.clone(),
            lock: LockId::new(["w"]).unwrap(),
        };
        assert!(matches!(
            agent.send_server(&node("b"), watch),
            Err(RouteError::NotThisAgent { .. })
        ));
    }

    /// A message to an agent is sent only with the port's agent as its sender.
    #[test]
    fn an_agent_port_refuses_a_message_from_another_sender() {
        let here = node("a");
        let port = Port::new(Arc::new(Router::new(here.clone())));
        let mine = AgentId::new(here.clone(), 1, 1);
        let other = AgentId::new(here.clone(), 1, 2);
        let to = AgentId::new(here.clone(), 1, 3);
        let agent = port.for_agent(&FreshAgent::new(mine.clone()));
        let lock = LockId::new(["l"]).unwrap();
        let surrendered = |by: &AgentId| AgentMessage::Surrendered {
            by: by.clone(),
            node: here.clone(),
            lock: lock.clone(),
            version: 1,
        };
        let not_mine = Err(RouteError::NotThisAgent {
            port: mine.clone(),
            named: other.clone(),
        });
        assert_eq!(agent.send_agent(&to, surrendered(&other)), not_mine);
        // Its own message passes the check (and fails only because `to` has no mailbox).
        assert_eq!(
            agent.send_agent(&to, surrendered(&mine)),
            Err(RouteError::UnknownAgent(to.clone()))
        );
        // A probe is sent by the waiter of the edge before `next`, or, refuted, by the waiter
        // of `next`.
        let edge = |waiter: &AgentId, blocker: &AgentId| ProbeEdge {
            waiter: waiter.clone(),
            blocker: blocker.clone(),
            lock: lock.clone(),
            node: here.clone(),
            version: 1,
        };
        let probe = |next: u32, refuted: bool| {
            AgentMessage::Probe(Probe {
                edges: vec![edge(&other, &mine), edge(&mine, &other)],
                next,
                epoch: 0,
                refuted,
            })
        };
        assert_eq!(agent.send_agent(&to, probe(1, false)), not_mine);
        assert_eq!(agent.send_agent(&to, probe(0, true)), not_mine);
        for own in [probe(0, false), probe(1, true)] {
            assert_eq!(
                agent.send_agent(&other, own),
                Err(RouteError::UnknownAgent(other.clone()))
            );
        }
        // What only a lock server sends names no agent sender.
        let rejected = AgentMessage::Rejected {
            node: here.clone(),
            lock: lock.clone(),
            reason: Rejection::NotHeld,
        };
        assert_eq!(
            agent.send_agent(&to, rejected),
            Err(RouteError::NoAgentSender {
                port: mine.clone(),
                to: to.clone(),
            })
        );
    }
}
