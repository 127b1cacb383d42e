//! The pure, synchronous core of a transaction agent.
//!
//! The agent actor is a thin shell: it feeds client calls, messages and node events to an
//! [`AgentCore`] and carries out the [`AgentEffect`]s it returns. Nothing here sends, sleeps or
//! reads a clock, so every behaviour can be tested by feeding inputs and checking outputs.
//!
//! - [`requests`]: the client's requests and when each counts as held;
//! - [`knowledge`]: the agent's versioned copies of its entries and of lock queues;
//! - [`graph`]: the wait-for graph and its cycles;
//! - [`victim`]: the victim order and the lock the victim gives up;
//! - [`agent`]: the state machine that ties them together.

pub(crate) mod agent;
mod error;
pub(crate) mod graph;
pub(crate) mod knowledge;
pub(crate) mod requests;
mod status;
pub(crate) mod victim;

pub use agent::{AgentCore, AgentEffect, Answer, CallFailure, CallId};
pub(crate) use error::comma_list;
pub use error::{RequestError, SurrenderRefusal};
pub use status::{
    Deadlock, GrantNodes, GrantedLock, LockResult, LockState, Locked, LossCause, LostLock,
    TransactionEvent, TransactionStatus, WatchItem,
};
