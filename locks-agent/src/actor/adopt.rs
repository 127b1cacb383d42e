//! Taking over a transaction whose first locks the node's fast path granted before this agent
//! existed (see `crate::fast`): the agent adopts the requests, the table's state of its
//! entries and the claims, then serves the transaction as if it had run from the start.

use super::Agent;
use actix::prelude::*;
use locks_core::proto::LockNotice;
use locks_core::{LockId, Mode, NodeId};
use tracing::warn;

/// The agent adopts what the fast path did (`AgentCore::adopt`). Always the first message
/// of an agent started late, ahead of the messages kept for it while it had no actor.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Adopt {
    /// The node whose fast path granted the locks (the agent's own).
    pub node: NodeId,
    /// The transaction's direct locks there, with their modes.
    pub locks: Vec<(LockId, Mode)>,
    /// What the table says of every entry of the transaction.
    pub notices: Vec<LockNotice>,
    /// The locks the client was told it holds.
    pub claimed: Vec<LockId>,
}

impl Handler<Adopt> for Agent {
    type Result = ();

    fn handle(&mut self, msg: Adopt, ctx: &mut Self::Context) {
        match self
            .core
            .adopt(&msg.node, msg.locks, msg.notices, &msg.claimed)
        {
            Ok(effects) => {
                self.execute(effects, ctx);
                self.schedule_settle(ctx);
            }
            // The requests were granted or queued by the same node's table, so the core cannot
            // refuse them; the log says it if it ever does.
            Err(err) => {
                warn!(agent = %self.id(), %err, "could not take over the locks of the fast path")
            }
        }
    }
}
