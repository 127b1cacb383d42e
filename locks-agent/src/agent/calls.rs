//! The agent actor's handlers for the calls of the Erlang original's API beyond locking:
//! changing the options, watching locks, and surrendering a lock to a waiter.
//!
//! Each handler feeds the call to the core and carries out its effects, as the handlers of
//! `agent.rs` do; nothing here decides anything the core could.

use super::Agent;
use crate::error::Error;
use crate::options::Options;
use actix::prelude::*;

/// Change the transaction's options (the original's `change_flag/3`).
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct SetOptions(pub Options);

impl Handler<SetOptions> for Agent {
    type Result = Result<(), Error>;

    fn handle(&mut self, msg: SetOptions, ctx: &mut Self::Context) -> Self::Result {
        if !self.core.is_running() {
            return Err(crate::agent::outcome_error(&self.outcome));
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
