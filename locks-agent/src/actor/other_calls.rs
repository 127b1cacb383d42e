//! The agent actor's handlers for the calls of the Erlang original's API beyond taking and
//! releasing locks: converting a lock down, changing the options, surrendering a lock to a
//! waiter, and the wait-for graph in DOT.
//!
//! Each handler feeds the call to the core and carries out its effects, as the handlers of
//! `actor.rs` do; nothing here decides anything the core could.

use super::Agent;
use crate::core::{RequestError, SurrenderRefusal};
use crate::error::Error;
use crate::options::Options;
use actix::prelude::*;
use futures::channel::oneshot;
use locks_core::{AgentId, LockId, Mode, NodeId};

/// Convert a lock down to a weaker mode.
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct Convert(pub LockId, pub Mode);

impl Handler<Convert> for Agent {
    type Result = Result<(), Error>;

    fn handle(&mut self, msg: Convert, ctx: &mut Self::Context) -> Self::Result {
        let effects = self.core.convert(&msg.0, msg.1).map_err(Error::Request)?;
        self.execute(effects, ctx);
        self.schedule_settle(ctx);
        Ok(())
    }
}

/// The wait-for graph as the agent sees it, in DOT.
#[derive(Message)]
#[rtype(result = "String")]
pub(crate) struct Dot;

impl Handler<Dot> for Agent {
    type Result = String;

    fn handle(&mut self, _msg: Dot, _ctx: &mut Self::Context) -> String {
        self.core.wait_for_graph_dot()
    }
}

/// Change the transaction's options (the original's `change_flag/3`).
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct SetOptions(pub Options);

impl Handler<SetOptions> for Agent {
    type Result = Result<(), Error>;

    fn handle(&mut self, msg: SetOptions, ctx: &mut Self::Context) -> Self::Result {
        if !self.core.is_running() {
            return Err(crate::actor::outcome_error(&self.outcome));
        }
        let effects = self.core.set_options(msg.0);
        self.execute(effects, ctx);
        // Settled now, so that the callers waiting for a transaction that just became
        // unservable (await_nodes switched off with a node down) are failed before the caller
        // of `set_options` is answered, as the node-down path fails them.
        self.settle(ctx);
        Ok(())
    }
}

/// The options in force.
#[derive(Message)]
#[rtype(result = "Options")]
pub(crate) struct GetOptions;

impl Handler<GetOptions> for Agent {
    type Result = MessageResult<GetOptions>;

    fn handle(&mut self, _msg: GetOptions, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.core.options().clone())
    }
}

/// Surrender a held lock to a waiting agent on some nodes; answered once every node has.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct SurrenderTo {
    pub lock: LockId,
    pub to: AgentId,
    pub nodes: Vec<NodeId>,
    pub reply: oneshot::Sender<Result<(), Error>>,
}

/// A `surrender_nowait` call waiting for the answers of its nodes.
struct SurrenderCall {
    lock: LockId,
    waiting: Vec<NodeId>,
    /// The first refusal, which is the call's answer.
    refused: Option<Error>,
    reply: oneshot::Sender<Result<(), Error>>,
}

/// The `surrender_nowait` calls under way. The core has at most one surrender per
/// `(lock, node)` outstanding, so each answer belongs to at most one call.
#[derive(Default)]
pub(crate) struct SurrenderCalls(Vec<SurrenderCall>);

impl SurrenderCalls {
    /// Takes in one node's answer; the call is answered once every node has.
    pub(super) fn answer(
        &mut self,
        lock: LockId,
        node: NodeId,
        to: AgentId,
        refused: Option<SurrenderRefusal>,
    ) {
        let Some(i) = self
            .0
            .iter()
            .position(|c| c.lock == lock && c.waiting.contains(&node))
        else {
            return;
        };
        let call = &mut self.0[i];
        call.waiting.retain(|n| *n != node);
        if let Some(why) = refused
            && call.refused.is_none()
        {
            call.refused = Some(Error::Request(RequestError::CannotSurrender {
                lock,
                to,
                node,
                why,
            }));
        }
        if call.waiting.is_empty() {
            let call = self.0.swap_remove(i);
            let _ = call.reply.send(call.refused.map_or(Ok(()), Err));
        }
    }
}

impl Handler<SurrenderTo> for Agent {
    type Result = ();

    fn handle(&mut self, msg: SurrenderTo, ctx: &mut Self::Context) {
        match self.core.surrender_to(&msg.lock, &msg.to, &msg.nodes) {
            Ok(effects) => {
                let mut waiting = msg.nodes;
                waiting.sort();
                waiting.dedup();
                // Registered before the effects run: a node found down while sending answers
                // at once.
                self.surrender_calls.0.push(SurrenderCall {
                    lock: msg.lock,
                    waiting,
                    refused: None,
                    reply: msg.reply,
                });
                self.execute(effects, ctx);
                self.schedule_settle(ctx);
            }
            Err(err) => {
                let _ = msg.reply.send(Err(Error::Request(err)));
            }
        }
    }
}
