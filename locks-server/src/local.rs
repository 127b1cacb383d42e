//! The node's lock table, shared by the lock server actor and the fast path.
//!
//! [`LocalTable`] owns the node's one [`LockTable`] behind a mutex, and is the only code that
//! applies an input to it: [`LocalTable::apply`] steps the table ([`LockTable::step`]) and
//! delivers its effects through the [`Router`] *while it holds the lock*, so that the messages
//! of one operation reach every agent before those of the next (an agent then sees one lock's
//! versions in order, whichever thread applied them). A send that fails is fed back into the
//! table as [`TableInput::Undelivered`].
//!
//! Two shells call it:
//! - the [`crate::LockServer`] actor, for requests that come as messages (from agent actors
//!   and from other nodes), node down, and the end of lock-delays, whose timers it owns;
//! - the **fast path** ([`LocalTable::try_lock`], [`LocalTable::release`],
//!   [`LocalTable::unlock`]), called by a transaction on the caller's own thread, with no actor
//!   hop and no wake-up of another thread. It applies the very same `Lock`, `Unlock` and
//!   `RemoveAgent` operations of the table, so the table decides exactly as it would for a
//!   message: a fast-path request never overtakes a waiter or a converter (FIFO), its grant
//!   carries the fencing version, and hierarchy is the table's. What differs is only who reads
//!   the answer: the requesting agent is told nothing but a refusal
//!   ([`LockTable::lock_quiet`], [`LockTable::step_quiet`]: its notices are not even built),
//!   and the caller reads the grant from the table ([`LockTable::holds`]); an agent that starts
//!   later learns the same state from [`LockTable::agent_state`]. Everybody else gets exactly
//!   the messages a request sent as a message would have caused.
//!
//! During the start-delay of a clustered node nothing is granted: the requests that come as
//! messages are kept in order and applied when it ends, and the fast path answers
//! [`FastLock::NotNow`] so that its caller sends the request as a message behind them.

use crate::router::{RouteError, Router};
use crate::table::{LockTable, TableEffect, TableInput, TableSnapshot, Undelivered};
use locks_core::proto::{AgentMessage, Rejection, ServerRequest};
use locks_core::{AgentId, LockId, Mode};
use parking_lot::Mutex;
use std::sync::Arc;
use tracing::{debug, warn};

/// Removes from `effects` the messages to `agent` (after [`LockTable::step_quiet`], only a
/// refusal can be left for it) and returns the refusal's reason, if there was one.
fn take_rejection(effects: &mut Vec<TableEffect>, agent: &AgentId) -> Option<Rejection> {
    let mut refused = None;
    effects.retain_mut(|effect| match effect {
        TableEffect::Send { to, msg } if to == agent => {
            if let AgentMessage::Rejected { reason, .. } = msg {
                refused.get_or_insert_with(|| reason.clone());
            }
            false
        }
        _ => true,
    });
    refused
}

/// What [`LocalTable::try_lock`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FastLock {
    /// Granted now: the agent holds its direct lock (in this mode, the group of everything it
    /// asked for on that id) and every ancestor's intention; the lock's version is the fencing
    /// token.
    Granted {
        /// The agent's direct mode on the lock.
        mode: Mode,
        /// The lock's version.
        version: u64,
    },
    /// Queued in the table, as a `Lock` message would have been: the agent must follow the
    /// request up (the table's answer was not sent to it; see [`LockTable::agent_state`]).
    Queued,
    /// Not tried: the node is in its start-delay. Send the request as a message.
    NotNow,
    /// Refused by the table (nothing changed).
    Rejected(Rejection),
    /// The node has stopped: nothing is granted any more.
    Stopped,
}

struct Inner {
    table: LockTable,
    /// The requests kept during the start-delay (`None` once it has passed).
    held_back: Option<Vec<ServerRequest>>,
    /// The node's lock server has stopped.
    stopped: bool,
}

/// The node's lock table and the one function that applies inputs to it (see the module
/// documentation).
pub struct LocalTable {
    inner: Mutex<Inner>,
    router: Arc<Router>,
}

impl std::fmt::Debug for LocalTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTable")
            .field("node", self.router.node())
            .finish_non_exhaustive()
    }
}

impl LocalTable {
    /// The table of the router's node. With `start_delay`, requests are kept until
    /// [`LocalTable::end_start_delay`].
    pub fn new(router: Arc<Router>, table: LockTable, start_delay: bool) -> LocalTable {
        LocalTable {
            inner: Mutex::new(Inner {
                table,
                held_back: start_delay.then(Vec::new),
                stopped: false,
            }),
            router,
        }
    }

    /// The router the table's messages go through.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// Applies `input` and delivers what the table says; returns the ghosts to release once
    /// the lock-delay has passed (feed them back as [`TableInput::DelayOver`]).
    pub fn apply(&self, input: TableInput) -> Vec<Vec<AgentId>> {
        let mut inner = self.inner.lock();
        self.apply_locked(&mut inner.table, input)
    }

    /// A request that came as a message: kept during the start-delay, ignored if it would add
    /// an agent of a node that is not connected (only a node down removes a remote node's
    /// agents, and that node's down has been handled already, or it never connected; checked
    /// when it is applied, so a request on its way when its node went down is covered whatever
    /// the order of the two), applied otherwise.
    pub fn serve(&self, request: ServerRequest) {
        let mut inner = self.inner.lock();
        if let Some(held) = &mut inner.held_back {
            held.push(request);
            return;
        }
        self.serve_locked(&mut inner.table, request);
    }

    fn serve_locked(&self, table: &mut LockTable, request: ServerRequest) {
        let newcomer = match &request {
            ServerRequest::Lock { agent, .. } | ServerRequest::Watch { watcher: agent, .. } => {
                Some(agent.node())
            }
            _ => None,
        };
        if let Some(node) = newcomer.filter(|n| !self.router.is_reachable(n)) {
            debug!(node = %self.router.node(), agent = %request.agent(), peer = %node, "request of an agent whose node is not connected ignored");
            return;
        }
        self.apply_locked(table, TableInput::Request(request));
    }

    /// The start-delay is over: applies the requests kept meanwhile, in order, and serves
    /// everything from now on.
    pub fn end_start_delay(&self) {
        let mut inner = self.inner.lock();
        let held = inner.held_back.take().unwrap_or_default();
        debug!(node = %self.router.node(), requests = held.len(), "start-delay over; serving");
        for request in held {
            self.serve_locked(&mut inner.table, request);
        }
    }

    /// Steps the table with `input` and delivers its effects.
    fn apply_locked(&self, table: &mut LockTable, input: TableInput) -> Vec<Vec<AgentId>> {
        let effects = table.step(input);
        self.deliver(table, effects)
    }

    /// Delivers the table's effects in order; a send that fails is fed back into the table
    /// and what that yields delivered in turn. Returns the ghosts to release later.
    fn deliver(&self, table: &mut LockTable, effects: Vec<TableEffect>) -> Vec<Vec<AgentId>> {
        let mut later = Vec::new();
        if effects.is_empty() {
            // The common case of the fast path: nothing to send, nothing to allocate.
            return later;
        }
        let mut batches = vec![effects];
        while let Some(batch) = batches.pop() {
            for effect in batch {
                let (to, msg) = match effect {
                    TableEffect::Send { to, msg } => (to, msg),
                    TableEffect::ReleaseLater(ghosts) => {
                        later.push(ghosts);
                        continue;
                    }
                };
                let why = match self.router.send_agent(&to, msg.clone()) {
                    Ok(()) => continue,
                    // A remote node that is down: its agents are removed by the node-down
                    // handling, not here, so a partition does not look like a death.
                    Err(RouteError::NodeDown(node)) => {
                        warn!(node = %self.router.node(), peer = %node, agent = %to, "notice to an agent on a disconnected node dropped");
                        continue;
                    }
                    Err(RouteError::Unsendable { node, reason }) => {
                        debug!(node = %self.router.node(), agent = %to, peer = %node, reason, "a message to an agent cannot be sent");
                        Undelivered::TooLarge
                    }
                    Err(err) => {
                        debug!(node = %self.router.node(), agent = %to, %err, "agent unreachable; releasing its locks");
                        Undelivered::Gone
                    }
                };
                batches.push(table.step(TableInput::Undelivered {
                    agent: to,
                    msg,
                    why,
                }));
            }
        }
        later
    }

    /// The fast path of `Lock`: applies `agent`'s request for `lock` in `mode` now, on the
    /// caller's thread, and says whether it holds the lock (see [`FastLock`]). Everybody else
    /// is told what the table says, as for any request.
    pub fn try_lock(&self, agent: &AgentId, lock: &LockId, mode: Mode) -> FastLock {
        let mut inner = self.inner.lock();
        if inner.stopped {
            return FastLock::Stopped;
        }
        if inner.held_back.is_some() {
            return FastLock::NotNow;
        }
        let Inner { table, .. } = &mut *inner;
        let (mut effects, held) = table.lock_quiet(agent, lock, mode);
        // What is left for the requester is a refusal, if anything.
        let refused = take_rejection(&mut effects, agent);
        let held = held.filter(|_| refused.is_none());
        if held.is_none() && refused.is_none() {
            // Before anybody hears of the wait: from now on the agent's probes are kept for
            // the actor that will follow the request up.
            self.router.idle_agent_waits(agent);
        }
        self.deliver(table, effects);
        match (refused, held) {
            (Some(reason), _) => FastLock::Rejected(reason),
            (None, Some((mode, version))) => FastLock::Granted { mode, version },
            (None, None) => FastLock::Queued,
        }
    }

    /// The fast path of `Unlock`: releases `agent`'s direct lock on `lock` (or withdraws its
    /// request) now. Refused when it has no direct lock there.
    pub fn unlock(&self, agent: &AgentId, lock: &LockId) -> Result<(), Rejection> {
        let mut inner = self.inner.lock();
        let request = ServerRequest::Unlock {
            agent: agent.clone(),
            lock: lock.clone(),
        };
        let Inner { table, .. } = &mut *inner;
        let mut effects = table.step_quiet(request);
        let refused = take_rejection(&mut effects, agent);
        self.deliver(table, effects);
        match refused {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }

    /// The fast path of `RemoveAgent`: releases everything `agent` has in the table, now.
    pub fn release(&self, agent: &AgentId) {
        let mut inner = self.inner.lock();
        let request = ServerRequest::RemoveAgent {
            agent: agent.clone(),
        };
        self.apply_locked(&mut inner.table, TableInput::Request(request));
    }

    /// The node's lock server stopped: the fast path grants nothing from now on.
    pub fn stop(&self) {
        self.inner.lock().stopped = true;
    }

    /// Reads the table (for state that needs no message: snapshots, watchers, what an agent
    /// holds).
    pub fn read<T>(&self, f: impl FnOnce(&LockTable) -> T) -> T {
        f(&self.inner.lock().table)
    }

    /// A copy of the table.
    pub fn snapshot(&self) -> TableSnapshot {
        self.read(LockTable::snapshot)
    }
}
