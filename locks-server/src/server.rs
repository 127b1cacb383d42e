//! The lock server actor: a thin shell around one [`LockTable`].
//!
//! Messages it handles:
//! - [`ToServer`]: a request from an agent (local or remote, through the [`Router`]); the
//!   table decides, and the server routes the notices it returns.
//! - [`NodeDown`]: from the cluster layer when a peer's connection ended: every entry and watch
//!   of the agents living on that node is handed to a ghost ([`LockTable::ghost_agents_of`]),
//!   and the ghosts are removed, as if each had sent `RemoveAgent`, once the lock-delay has
//!   passed: until then nobody is granted what those agents held, because they may still
//!   believe they hold it until their own lease on this node runs out (see [`crate::lease`]).
//! - [`Snapshot`]: a copy of the table for tools and tests.
//! - [`Watchers`]: who watches one lock.
//!
//! Who holds its address: the node's [`Router`] (and through it every agent). It stops when the
//! node's actix system stops; requests still in its mailbox are dropped with it, which is safe
//! because the whole node (and every agent on it) stops at the same time.
//!
//! A clustered node's server grants nothing for its start-delay: requests that arrive meanwhile
//! are kept, in order, and applied when it has passed (a previous incarnation of this node may
//! have granted locks whose holders still believe in them).
//!
//! An agent that cannot be reached any more (its mailbox closed, or its state was dropped after
//! a panic without it saying goodbye) is removed from the table the first time a notice to it
//! fails, so its locks are never lost.

use crate::router::{RouteError, Router, ToServer};
use crate::table::{LockTable, TableSnapshot};
use actix::prelude::*;
use locks_core::proto::{AgentMessage, ServerRequest};
use locks_core::{AgentId, LockId, ModeTable, NodeId};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, trace, warn};

/// The actor that owns a node's lock table.
pub struct LockServer {
    table: LockTable,
    router: Arc<Router>,
    /// How long a downed node's agents' locks stay with their ghosts.
    lock_delay: Duration,
    /// How long to grant nothing after the start.
    start_delay: Duration,
    /// The requests kept during the start-delay (`None` once it has passed).
    held_back: Option<Vec<ServerRequest>>,
}

impl LockServer {
    /// A server for `node` with the given mode table; versions start above `version_base`.
    /// No lock-delay and no start-delay (a local-only node); see [`LockServer::with_delays`].
    pub fn new(router: Arc<Router>, modes: ModeTable, version_base: u64) -> LockServer {
        let table = LockTable::new(router.node().clone(), modes, version_base);
        LockServer {
            table,
            router,
            lock_delay: Duration::ZERO,
            start_delay: Duration::ZERO,
            held_back: None,
        }
    }

    /// Sets the lock-delay (how long a downed node's agents' locks stay held by nobody) and
    /// the start-delay (how long to grant nothing after the start); see [`crate::lease`].
    pub fn with_delays(mut self, lock_delay: Duration, start_delay: Duration) -> LockServer {
        self.lock_delay = lock_delay;
        self.start_delay = start_delay;
        self
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
                if let Err(err) = self.route(&agent, msg) {
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

    fn route(&self, agent: &AgentId, msg: AgentMessage) -> Result<(), RouteError> {
        if agent.is_ghost() {
            // A ghost is told nothing; it goes when its lock-delay has passed.
            return Ok(());
        }
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

impl Actor for LockServer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Agents send with `do_send`, so the capacity only bounds `send` from tools.
        ctx.set_mailbox_capacity(1024);
        debug!(node = %self.node(), "lock server started");
        if !self.start_delay.is_zero() {
            info!(node = %self.node(), delay = ?self.start_delay, "granting nothing until the start-delay has passed");
            self.held_back = Some(Vec::new());
            ctx.run_later(self.start_delay, |server, _ctx| {
                let held = server.held_back.take().unwrap_or_default();
                debug!(node = %server.node(), requests = held.len(), "start-delay over; serving");
                for request in held {
                    server.apply(request);
                }
            });
        }
    }
}

impl Handler<ToServer> for LockServer {
    type Result = ();

    fn handle(&mut self, msg: ToServer, _ctx: &mut Self::Context) {
        match &mut self.held_back {
            Some(held) => held.push(msg.0),
            None => self.apply(msg.0),
        }
    }
}

/// A peer node went down: release every lock and watch of the agents that live on it, after
/// the lock-delay (see the module documentation).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct NodeDown(pub NodeId);

impl Handler<NodeDown> for LockServer {
    type Result = ();

    fn handle(&mut self, msg: NodeDown, ctx: &mut Self::Context) {
        if &msg.0 == self.node() {
            return;
        }
        if self.lock_delay.is_zero() {
            let agents = self.table.agents_on(&msg.0);
            debug!(node = %self.node(), peer = %msg.0, agents = agents.len(), "node down: releasing its agents' locks");
            for agent in agents {
                self.apply(ServerRequest::RemoveAgent { agent });
            }
            return;
        }
        let ghosts = self.table.ghost_agents_of(&msg.0);
        if ghosts.is_empty() {
            return;
        }
        debug!(node = %self.node(), peer = %msg.0, agents = ghosts.len(), delay = ?self.lock_delay, "node down: its agents' locks go to nobody until the lock-delay has passed");
        ctx.run_later(self.lock_delay, |server, _ctx| {
            for agent in ghosts {
                server.apply(ServerRequest::RemoveAgent { agent });
            }
        });
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
