//! The real lock tables (`locks_server::LockTable`) of the simulated nodes.
//!
//! [`Tables::serve`] is the one place the simulations apply requests to a table, and
//! [`Tables::release_node`] the one place they release the agents of a node that went down:
//! both step the table with the same function the node's shells call
//! ([`LockTable::step`](locks_server::LockTable::step)), so the simulations run the server
//! protocol exactly as the lock server actor and the fast path do.

use locks_core::proto::{AgentMessage, ServerRequest};
use locks_core::{AgentId, ModeTable, NodeId};
use locks_server::{LockTable, TableEffect, TableInput, Undelivered};
use std::collections::BTreeMap;
use std::fmt;

/// What the simulation did with a message a table sent (see [`Tables::serve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Sent it on (or dropped it: the table does not care).
    Sent,
    /// Its agent does not run: the table removes the agent, as the real server does when a
    /// notice cannot be delivered.
    RemoveAgent,
}

/// A request for a node without a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoTable(pub NodeId);

impl fmt::Display for NoTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no server {}", self.0)
    }
}

impl std::error::Error for NoTable {}

/// The lock table of every simulated node, by node.
#[derive(Clone, Debug, Default)]
pub struct Tables {
    tables: BTreeMap<NodeId, LockTable>,
}

impl Tables {
    /// No node yet.
    pub fn new() -> Tables {
        Tables::default()
    }

    /// Starts `node`'s server with an empty table whose versions start after `version_base`;
    /// a table `node` had before is lost (a crash and restart: give a larger base).
    pub fn start(&mut self, node: NodeId, modes: &ModeTable, version_base: u64) {
        let table = LockTable::new(node.clone(), modes.clone(), version_base);
        self.tables.insert(node, table);
    }

    /// The nodes, in order.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeId> {
        self.tables.keys()
    }

    /// Whether `node` has a table.
    pub fn contains(&self, node: &NodeId) -> bool {
        self.tables.contains_key(node)
    }

    /// `node`'s table.
    pub fn get(&self, node: &NodeId) -> Option<&LockTable> {
        self.tables.get(node)
    }

    /// Every table, by node, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&NodeId, &LockTable)> {
        self.tables.iter()
    }

    /// Applies `requests` to `node`'s table in order, passing every message it sends, in
    /// order, to `route`. An agent `route` says does not run is removed before the next
    /// request (and what its removal sends is routed too).
    pub fn serve(
        &mut self,
        node: &NodeId,
        requests: impl IntoIterator<Item = ServerRequest>,
        route: impl FnMut(AgentId, AgentMessage) -> Route,
    ) -> Result<(), NoTable> {
        self.step(node, requests.into_iter().map(TableInput::Request), route)
    }

    /// Steps `node`'s table with `inputs` in order; see [`Tables::serve`].
    fn step(
        &mut self,
        node: &NodeId,
        inputs: impl IntoIterator<Item = TableInput>,
        mut route: impl FnMut(AgentId, AgentMessage) -> Route,
    ) -> Result<(), NoTable> {
        let table = self
            .tables
            .get_mut(node)
            .ok_or_else(|| NoTable(node.clone()))?;
        // A stack: what an input causes is served before the inputs after it.
        let mut pending: Vec<TableInput> = inputs.into_iter().collect();
        pending.reverse();
        while let Some(input) = pending.pop() {
            for effect in table.step(input) {
                // No lock-delay in the simulations: nothing is released later.
                let TableEffect::Send { to, msg } = effect else {
                    continue;
                };
                if route(to.clone(), msg.clone()) == Route::RemoveAgent {
                    pending.push(TableInput::Undelivered {
                        agent: to,
                        msg,
                        why: Undelivered::Gone,
                    });
                }
            }
        }
        Ok(())
    }

    /// Releases on `on`'s table every agent of node `down` (in id order), as the lock server
    /// does when it hears that node went down (with no lock-delay); what that sends goes to
    /// `route` as in [`Tables::serve`].
    pub fn release_node(
        &mut self,
        on: &NodeId,
        down: &NodeId,
        route: impl FnMut(AgentId, AgentMessage) -> Route,
    ) -> Result<(), NoTable> {
        let input = TableInput::NodeDown {
            node: down.clone(),
            lock_delay: false,
        };
        self.step(on, [input], route)
    }
}
