//! The lock server actor: the shell around the node's core ([`NodeCore`]) and its
//! [`LocalTable`].
//!
//! Messages it handles:
//! - [`ToServer`]: a request from an agent actor (local, or remote through the [`Router`]),
//!   given to the core as [`NodeInput::Request`];
//! - `LinkDown` (crate-private: only the node's cluster layer can say a link ended): given
//!   to the core as [`NodeInput::LinkDown`];
//! - [`Snapshot`]: a copy of the table for tools and tests, taken a slice at a time;
//! - [`Watchers`]: who watches one lock.
//!
//! It carries the core's effects out: a request served or an input applied on the table
//! ([`LocalTable::admit`], [`LocalTable::apply`], whose ghosts go back to the core; the release
//! of ghosts whose lock-delay has passed a part at a time, on a task of its own), a timer
//! (`run_later`), the fast path let in. What the core decides (the liveness filter) and
//! carries out (the start-delay, node down and lock-delay, as `crate::lease` decides them) is
//! in `crate::node_core`; what the table decides, in
//! [`LockTable::step`](crate::table::LockTable::step). Transactions on this node take and
//! release their uncontended locks through the same [`LocalTable`] on their own thread (the
//! fast path), without a message to this actor.
//!
//! Who holds its address: the node's [`Router`] (and through it every agent). It stops when the
//! node's actix system stops; requests still in its mailbox are dropped with it, which is safe
//! because the whole node (and every agent on it) stops at the same time.

use crate::local::LocalTable;
use crate::node_core::{NodeCore, NodeEffect, NodeInput, Peers};
use crate::router::{LinkDown, Router, ToServer};
use crate::table::{TableInput, TableSnapshot};
use actix::prelude::*;
use locks_core::proto::ServerRequest;
use locks_core::{AgentId, LockId, NodeId};
use std::sync::Arc;
use std::time::Duration;
use tracing::debug;

/// The actor that serves the node's lock table to messages.
pub struct LockServer {
    table: Arc<LocalTable>,
    core: NodeCore,
}

/// The router says which peers are connected.
impl Peers for Router {
    fn connected(&self, node: &NodeId) -> bool {
        self.is_reachable(node)
    }
}

impl LockServer {
    /// A server for the node's table. No lock-delay and no start-delay (a local-only node);
    /// see [`LockServer::with_delays`]. The table must have been made with a start-delay
    /// exactly when `with_delays` is given a non-zero one.
    pub fn new(table: Arc<LocalTable>) -> LockServer {
        let core = NodeCore::new(
            table.router().node().clone(),
            Duration::ZERO,
            Duration::ZERO,
        );
        LockServer { table, core }
    }

    /// Sets the lock-delay (how long a downed node's agents' locks stay held by nobody) and
    /// the start-delay (how long to grant nothing after the start); see [`crate::lease`].
    pub fn with_delays(mut self, lock_delay: Duration, start_delay: Duration) -> LockServer {
        self.core = NodeCore::new(self.node().clone(), lock_delay, start_delay);
        self
    }

    /// The node this server belongs to.
    pub fn node(&self) -> &NodeId {
        self.router().node()
    }

    fn router(&self) -> &Arc<Router> {
        self.table.router()
    }

    /// Gives `input` to the core and carries out what it says, in order.
    fn step(&mut self, input: NodeInput, ctx: &mut Context<Self>) {
        let effects = self.core.step(input, &**self.table.router());
        for effect in effects {
            match effect {
                NodeEffect::Admit(ServerRequest::RemoveAgent { agent }) => {
                    // A transaction of many locks: the rest of its release is paced on a task
                    // of this thread (see `LocalTable::remove_agent`); between two parts the
                    // table is as if it had unlocked those locks itself.
                    if let Some(rest) = self.table.remove_agent(agent) {
                        actix::spawn(rest);
                    }
                }
                NodeEffect::Admit(request) => self.table.admit(request),
                NodeEffect::Table(TableInput::DelayOver(ghosts)) => {
                    // A downed node's agents may hold a great many locks: released a part at a
                    // time on a task of this thread, so that nothing here (a heartbeat, a
                    // request) waits for the whole release. Later is safe: the lock-delay asks
                    // only that nothing be granted before it has passed.
                    let table = self.table.clone();
                    actix::spawn(async move { table.release_paced(ghosts).await });
                }
                NodeEffect::Table(input) => {
                    for ghosts in self.table.apply(input) {
                        self.step(NodeInput::Ghosts(ghosts), ctx);
                    }
                }
                NodeEffect::Schedule { after, timer } => {
                    ctx.run_later(after, |server, ctx| {
                        server.step(NodeInput::Timer(timer), ctx);
                    });
                }
                NodeEffect::OpenFastPath => self.table.open_fast_path(),
            }
        }
    }
}

impl Actor for LockServer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Agents send with `do_send`, so the capacity only bounds `send` from tools.
        ctx.set_mailbox_capacity(1024);
        self.table.set_home();
        debug!(node = %self.node(), "lock server started");
        self.step(NodeInput::Started, ctx);
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.table.stop();
    }
}

impl Handler<ToServer> for LockServer {
    type Result = ();

    fn handle(&mut self, msg: ToServer, ctx: &mut Self::Context) {
        tracing::trace!(target: "lock_path", hop = 6, agent = %msg.0.agent(), "to the node's core");
        self.step(NodeInput::Request(msg.0), ctx);
    }
}

impl Handler<LinkDown> for LockServer {
    type Result = ();

    fn handle(&mut self, msg: LinkDown, ctx: &mut Self::Context) {
        self.step(NodeInput::LinkDown(msg.0), ctx);
    }
}

/// Asks the lock server for a snapshot of its table.
#[derive(Debug, Message)]
#[rtype(result = "TableSnapshot")]
pub struct Snapshot;

/// The copy starts once every message before it is handled, and is taken a slice at a time
/// (`crate::local`): the server handles the messages that come meanwhile, and a large table
/// does not keep the node's thread from its other work.
impl Handler<Snapshot> for LockServer {
    type Result = ResponseFuture<TableSnapshot>;

    fn handle(&mut self, _msg: Snapshot, _ctx: &mut Self::Context) -> Self::Result {
        let table = self.table.clone();
        Box::pin(async move { table.snapshot_paced().await })
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
