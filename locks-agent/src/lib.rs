//! `locks-agent`: transactions, and the distributed deadlock detection that keeps them from
//! waiting forever.
//!
//! A [`Transaction`] is a handle on one agent actor running on a node. The agent sends lock
//! requests to the lock servers of the nodes it needs, keeps the newest copy of every lock queue
//! it hears about, decides when it holds everything it asked for, and runs the Wiger/Arts
//! deadlock detection: it builds a wait-for graph (petgraph) from what it knows, passes what it
//! knows on to the agents it waits for, and when a cycle shows up, the largest agent of the
//! cycle surrenders the lock that closes it (or aborts, with `abort_on_deadlock`).
//!
//! ```text
//!  client ─ lock() ─▶ Transaction ──▶ agent actor ── Lock ──▶ lock server (per node)
//!     ▲                                 │   ▲ ◀── Notice ──────┘
//!     └── Ok(Locked) / events() ◀───────┘   └── Forward / Surrendered ── other agents
//! ```
//!
//! Beyond locking, a transaction offers the rest of the Erlang original's API:
//! [`Transaction::set_options`] (`change_flag`), [`begin_transaction_with`] (beginning with a
//! list of objects), [`Transaction::watch`] / [`Transaction::unwatch`] /
//! [`Transaction::watchers`] (observing a lock's queue without queueing on it, as a
//! [`LockWatch`] stream) and [`Transaction::surrender_nowait`] (letting a waiting agent in).
//!
//! A client always knows what it holds: `lock` returns the grant with each node's fencing
//! version ([`Locked`]), [`Transaction::events`] pushes every status change, grant and loss, and
//! [`Transaction::lost`] resolves when a lock the client was told it holds is gone — a node
//! down, a lease expired, a surrender, an abort (see the `events` module docs and
//! `locks_server::lease`).
//!
//! An uncontended lock on the transaction's own node is granted on the caller's thread, from any
//! runtime or thread: a transaction has no agent actor until it needs one (a request that must
//! wait, a lock on other nodes, events, watches), and then the actor takes it over with
//! everything it holds (the fast path: `transaction/fast.rs`, and `docs/invariants.md` for why it
//! keeps every guarantee). Synchronous callers use [`begin_transaction_blocking`] and the
//! `blocking_*` methods, with no async runtime of their own.
//!
//! Lock waits can be bounded ([`Transaction::lock_timeout`], [`Error::TimedOut`]) and are
//! cancel-safe: dropping the future of [`Transaction::lock`] (a timeout, a `select!` branch
//! that lost) withdraws what the call asked for (see its documentation).
//!
//! The agent actor is a thin shell around the agent core, the pure state machine that holds
//! the requests and multi-node claims, the versioned knowledge of lock copies, the petgraph
//! wait-for graph with cycle detection and the victim's choice, and the forwarding; it is tested
//! on an in-memory network of cores and lock tables (`tests/sim`). [`Options`] holds the
//! transaction's options and [`Req`] the multi-node requirements.
//!
//! # Blocking API
//!
//! Every call has a `blocking_*` form for threads without an async runtime (with
//! `locks_server::Node::start_blocking` and `shutdown_blocking`, a program needs none at
//! all). They may be called from any thread but the node's own, `spawn_blocking` included; on
//! the node's thread (a task of `Node::spawn`) a call that would wait fails with
//! [`Error::Node`] holding `locks_server::Error::OnNodeThread` rather than hang. Every wait
//! has a bounded form, timed on the node's thread: [`Transaction::blocking_lock_timeout`] and
//! [`Transaction::blocking_lock_on_timeout`] withdraw the request when they give up;
//! [`Transaction::blocking_await_all_locks_timeout`] and [`Transaction::blocking_lost_timeout`]
//! ask for nothing and answer `None`. The queries (`blocking_status`, `blocking_lock_state`)
//! wait for no lock.
//!
//! # Public surface
//!
//! At the root: [`Transaction`] with [`begin_transaction`], [`begin_transaction_with`] and
//! [`begin_transaction_blocking`]; its [`Options`] and [`Req`] (with [`UnknownReq`] for a
//! requirement name not known); what it reports ([`Locked`], [`LockResult`], [`GrantedLock`]
//! (with [`GrantNodes`]), [`LockState`], [`TransactionStatus`], [`TransactionEvent`],
//! [`TransactionEvents`], [`LostLock`], [`LossCause`], [`Deadlock`], [`LockWatch`],
//! [`WatchItem`]); and its errors ([`Error`], [`RequestError`], [`SurrenderRefusal`]). No
//! third-party type appears in these signatures but the `futures` `Stream` trait, which
//! [`TransactionEvents`] and [`LockWatch`] implement so that any runtime can consume them.
//!
//! The pure agent state machine, for shells, simulations and tools of one's own:
//! [`state_machine`] (the agent core `AgentCore` and its `AgentEffect`s, which `locks-leader`
//! runs its election agent on, the `LockRequest` records, the `ViewGraph` and the victim
//! order). Everything else is private to the crate.

#![forbid(unsafe_code)]
// Every type a public item mentions is nameable from the root or from `state_machine`.
#![warn(unnameable_types)]

mod actor;
mod blocking;
mod core;
mod error;
mod events;
mod executor;
mod lock_watch;
mod options;
pub mod state_machine;
mod transaction;

pub use crate::core::{
    Deadlock, GrantNodes, GrantedLock, LockResult, LockState, Locked, LossCause, LostLock,
    RequestError, SurrenderRefusal, TransactionEvent, TransactionStatus, WatchItem,
};
pub use blocking::begin_transaction_blocking;
pub use error::Error;
pub use events::TransactionEvents;
pub use lock_watch::LockWatch;
pub use options::{Options, Req, UnknownReq};
pub use transaction::{Transaction, begin_transaction, begin_transaction_with};
