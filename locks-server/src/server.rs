//! The lock server actor: the shell that serves the node's [`LocalTable`] to messages.
//!
//! Messages it handles:
//! - [`ToServer`]: a request from an agent actor (local, or remote through the [`Router`]),
//!   applied by [`LocalTable::serve`] (which also keeps requests during the start-delay and
//!   ignores a `Lock` or `Watch` of an agent whose node is not connected);
//! - `NodeDown` (crate-private: only the node's cluster layer can say a peer is down): the
//!   table hands that node's agents' entries to ghosts and this actor feeds
//!   [`TableInput::DelayOver`] back once the lock-delay has passed (see
//!   [`crate::table::TableInput`] and [`crate::lease`]);
//! - [`Snapshot`]: a copy of the table for tools and tests;
//! - [`Watchers`]: who watches one lock.
//!
//! What the table decides is in [`LockTable::step`](crate::table::LockTable::step); this actor
//! owns only the timers (start-delay, lock-delays). Transactions on this node take and release
//! their uncontended locks through the same [`LocalTable`] on their own thread (the fast
//! path), without a message to this actor.
//!
//! Who holds its address: the node's [`Router`] (and through it every agent). It stops when the
//! node's actix system stops; requests still in its mailbox are dropped with it, which is safe
//! because the whole node (and every agent on it) stops at the same time.

use crate::local::LocalTable;
use crate::router::{NodeDown, Router, ToServer};
use crate::table::{TableInput, TableSnapshot};
use actix::prelude::*;
use locks_core::{AgentId, LockId, NodeId};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info};

/// The actor that serves the node's lock table to messages.
pub struct LockServer {
    table: Arc<LocalTable>,
    /// How long a downed node's agents' locks stay with their ghosts.
    lock_delay: Duration,
    /// How long to grant nothing after the start.
    start_delay: Duration,
}

impl LockServer {
    /// A server for the node's table. No lock-delay and no start-delay (a local-only node);
    /// see [`LockServer::with_delays`]. The table must have been made with a start-delay
    /// exactly when `with_delays` is given a non-zero one.
    pub fn new(table: Arc<LocalTable>) -> LockServer {
        LockServer {
            table,
            lock_delay: Duration::ZERO,
            start_delay: Duration::ZERO,
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
        self.router().node()
    }

    fn router(&self) -> &Arc<Router> {
        self.table.router()
    }

    /// Applies `input` and starts the lock-delay of the ghosts it made.
    fn apply(&mut self, input: TableInput, ctx: &mut Context<Self>) {
        for ghosts in self.table.apply(input) {
            ctx.run_later(self.lock_delay, |server, ctx| {
                server.apply(TableInput::DelayOver(ghosts), ctx);
            });
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
            ctx.run_later(self.start_delay, |server, _ctx| {
                server.table.end_start_delay();
            });
        }
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.table.stop();
    }
}

impl Handler<ToServer> for LockServer {
    type Result = ();

    fn handle(&mut self, msg: ToServer, _ctx: &mut Self::Context) {
        self.table.serve(msg.0);
    }
}

impl Handler<NodeDown> for LockServer {
    type Result = ();

    fn handle(&mut self, msg: NodeDown, ctx: &mut Self::Context) {
        let input = TableInput::NodeDown {
            node: msg.0,
            lock_delay: !self.lock_delay.is_zero(),
        };
        self.apply(input, ctx);
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
