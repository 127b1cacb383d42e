//! The lock server actor: a thin shell around one [`LockTable`].
//!
//! Messages it handles:
//! - [`ToServer`]: a request from an agent (local or remote, through the [`Router`]); the
//!   table decides, and the server routes the notices it returns. A `Lock` or `Watch` of an
//!   agent whose node is not connected (when the request is handled) is ignored: nothing would
//!   remove its entry, since only a node down removes a remote node's agents.
//! - [`NodeDown`]: from the cluster layer when a peer's connection ended: every entry and watch
//!   of the agents living on that node is removed, as if each had sent `RemoveAgent`.
//! - [`Snapshot`]: a copy of the table for tools and tests.
//! - [`Watchers`]: who watches one lock.
//!
//! Who holds its address: the node's [`Router`] (and through it every agent). It stops when the
//! node's actix system stops; requests still in its mailbox are dropped with it, which is safe
//! because the whole node (and every agent on it) stops at the same time.
//!
//! A notice or view that cannot be sent to an agent's node (the lock's queue does not fit in a
//! frame) withdraws that agent's requests on the lock and tells it they cannot be served here
//! (`Rejection::QueueTooLarge`); the connection is not affected.
//!
//! An agent that cannot be reached any more (its mailbox closed, or its state was dropped after
//! a panic without it saying goodbye) is removed from the table the first time a notice to it
//! fails, so its locks are never lost.

use crate::router::{RouteError, Router, ToServer};
use crate::table::{LockTable, TableSnapshot};
use actix::prelude::*;
use locks_core::proto::{AgentMessage, Rejection, ServerRequest};
use locks_core::{AgentId, LockId, ModeTable, NodeId};
use std::sync::Arc;
use tracing::{debug, trace, warn};

/// The actor that owns a node's lock table.
pub struct LockServer {
    table: LockTable,
    router: Arc<Router>,
}

impl LockServer {
    /// A server for `node` with the given mode table; versions start above `version_base`.
    pub fn new(router: Arc<Router>, modes: ModeTable, version_base: u64) -> LockServer {
        let table = LockTable::new(router.node().clone(), modes, version_base);
        LockServer { table, router }
    }

    /// The node this server belongs to.
    pub fn node(&self) -> &NodeId {
        self.router.node()
    }

    fn apply(&mut self, request: ServerRequest) {
        trace!(node = %self.node(), ?request, "lock server request");
        let mut pending = vec![request];
        // Removing an unreachable agent can itself produce notices to agents that turn out to
        // be gone; each round removes at least one agent, so this ends.
        while let Some(request) = pending.pop() {
            let notices = self.table.handle(request);
            for (agent, msg) in notices {
                let about = lock_view_of(&msg);
                match self.route(&agent, msg) {
                    Ok(()) => {}
                    Err(RouteError::Unsendable { node, reason }) => {
                        self.cannot_tell(&agent, about, &node, &reason, &mut pending);
                    }
                    Err(err) => {
                        debug!(node = %self.node(), %agent, %err, "agent unreachable; releasing its locks");
                        if !pending.iter().any(
                            |r| matches!(r, ServerRequest::RemoveAgent { agent: a } if a == &agent),
                        ) {
                            pending.push(ServerRequest::RemoveAgent { agent });
                        }
                    }
                }
            }
        }
    }

    /// A message about `about` (a lock, and whether as a watch) could not be sent to `agent`
    /// on `node`: the lock's queue does not fit in a frame to that node. The agent's requests
    /// that put it on that lock (its direct locks on it and below it, or its watch) are
    /// withdrawn, and it is told each one cannot be served here
    /// ([`Rejection::QueueTooLarge`]), so that it neither waits forever for news it cannot get
    /// nor keeps a place in a queue it knows nothing about. (Sending a truncated queue instead
    /// would hide whom the agent waits for, and with it the deadlocks it must resolve.) The
    /// withdrawal shortens the queue, so each such round removes an entry and this ends.
    fn cannot_tell(
        &mut self,
        agent: &AgentId,
        about: Option<(LockId, bool)>,
        node: &NodeId,
        reason: &str,
        pending: &mut Vec<ServerRequest>,
    ) {
        let Some((lock, watched)) = about else {
            debug!(node = %self.node(), %agent, peer = %node, reason, "a message to an agent cannot be sent; dropped");
            return;
        };
        debug!(node = %self.node(), %agent, %lock, peer = %node, reason, "a lock's queue cannot be sent to an agent; its requests there are withdrawn");
        let withdrawn: Vec<(LockId, ServerRequest)> = if watched {
            let request = ServerRequest::Unwatch {
                watcher: agent.clone(),
                lock: lock.clone(),
            };
            vec![(lock, request)]
        } else {
            self.table
                .direct_locks_within(agent, &lock)
                .into_iter()
                .map(|direct| {
                    let request = ServerRequest::Unlock {
                        agent: agent.clone(),
                        lock: direct.clone(),
                    };
                    (direct, request)
                })
                .collect()
        };
        for (lock, request) in withdrawn {
            let refusal = AgentMessage::Rejected {
                node: self.node().clone(),
                lock,
                reason: Rejection::QueueTooLarge,
            };
            if let Err(err) = self.route(agent, refusal) {
                debug!(node = %self.node(), %agent, %err, "cannot tell an agent its request was withdrawn");
            }
            pending.push(request);
        }
    }

    /// The node of the agent that `request` would add to the table (a `Lock` or a `Watch`),
    /// when that node is neither this one nor connected. Only a node down removes a remote
    /// node's agents, and that node's down has been handled already (or it never connected),
    /// so such an entry would stay forever: the request is ignored. Checked when the request is
    /// handled, not when it arrived, so that a request that was on its way when its node went
    /// down is covered whatever the order of the two.
    fn unreachable_newcomer(&self, request: &ServerRequest) -> Option<NodeId> {
        let agent = match request {
            ServerRequest::Lock { agent, .. } | ServerRequest::Watch { watcher: agent, .. } => {
                agent
            }
            _ => return None,
        };
        let node = agent.node();
        (!self.router.is_reachable(node)).then(|| node.clone())
    }

    fn route(&self, agent: &AgentId, msg: AgentMessage) -> Result<(), RouteError> {
        match self.router.send_agent(agent, msg) {
            // A remote node that is down: its agents are removed by the node-down handling,
            // not here, so a partition does not look like a death.
            Err(RouteError::NodeDown(node)) => {
                warn!(node = %self.node(), peer = %node, %agent, "notice to an agent on a disconnected node dropped");
                Ok(())
            }
            other => other,
        }
    }
}

/// The lock a message shows the queue of, and whether as a watch: what is withdrawn when the
/// message cannot be sent (see `LockServer::cannot_tell`).
fn lock_view_of(msg: &AgentMessage) -> Option<(LockId, bool)> {
    match msg {
        AgentMessage::Notice(notice) => Some((notice.lock.clone(), false)),
        AgentMessage::Watched { lock, .. } => Some((lock.clone(), true)),
        _ => None,
    }
}

impl Actor for LockServer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Agents send with `do_send`, so the capacity only bounds `send` from tools.
        ctx.set_mailbox_capacity(1024);
        debug!(node = %self.node(), "lock server started");
    }
}

impl Handler<ToServer> for LockServer {
    type Result = ();

    fn handle(&mut self, msg: ToServer, _ctx: &mut Self::Context) {
        if let Some(node) = self.unreachable_newcomer(&msg.0) {
            debug!(node = %self.node(), agent = %msg.0.agent(), peer = %node, "request of an agent whose node is not connected ignored");
            return;
        }
        self.apply(msg.0);
    }
}

/// A peer node went down: release every lock and watch of the agents that live on it.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct NodeDown(pub NodeId);

impl Handler<NodeDown> for LockServer {
    type Result = ();

    fn handle(&mut self, msg: NodeDown, _ctx: &mut Self::Context) {
        if &msg.0 == self.node() {
            return;
        }
        let agents = self.table.agents_on(&msg.0);
        debug!(node = %self.node(), peer = %msg.0, agents = agents.len(), "node down: releasing its agents' locks");
        for agent in agents {
            self.apply(ServerRequest::RemoveAgent { agent });
        }
    }
}

/// Asks the lock server for a snapshot of its table.
#[derive(Debug, Message)]
#[rtype(result = "TableSnapshot")]
pub struct Snapshot;

impl Handler<Snapshot> for LockServer {
    type Result = MessageResult<Snapshot>;

    fn handle(&mut self, _msg: Snapshot, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.table.snapshot())
    }
}

/// Asks the lock server which agents watch a lock (in id order).
#[derive(Debug, Message)]
#[rtype(result = "Vec<AgentId>")]
pub struct Watchers(pub LockId);

impl Handler<Watchers> for LockServer {
    type Result = MessageResult<Watchers>;

    fn handle(&mut self, msg: Watchers, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.table.watchers(&msg.0))
    }
}
