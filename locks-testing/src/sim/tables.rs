//! The real lock tables (`locks_server::internal::LockTable`) of the simulated nodes, in shards as a
//! node's are.
//!
//! [`Tables::serve`] is the one place the simulations apply requests to a table, and
//! [`Tables::release_node`] the one place they release the agents of a node that went down:
//! both go through the same function as the node's shells
//! ([`Sharding::apply`](locks_server::internal::Sharding::apply), which steps each shard with
//! [`LockTable::step`](locks_server::internal::LockTable::step)), so the simulations run the server
//! protocol, and what spans a node's shards (removal, a surrender whose cycle crosses
//! shards, an agent found gone), exactly as the lock server actor and the fast path do. A
//! simulated node has [`SIM_SHARDS`] shards, few enough that the simulations' lock ids fall
//! both in one shard and in several.

use locks_core::proto::{AgentMessage, LockNotice, LockView, ServerRequest};
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId};
use locks_server::TableSnapshot;
use locks_server::internal::{Delivery, Sharding};
use locks_server::internal::{LockTable, TableInput};
use std::collections::BTreeMap;
use std::fmt;

/// How many shards a simulated node's table has.
pub const SIM_SHARDS: usize = 3;

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

/// One simulated node's table: its shards, and how requests are spread over them.
#[derive(Clone, Debug)]
pub struct NodeTable {
    sharding: Sharding,
    shards: Vec<LockTable>,
}

impl NodeTable {
    /// `agent`'s direct mode on `lock` and the lock's version, if it holds it.
    pub fn holds(&self, agent: &AgentId, lock: &LockId) -> Option<(Mode, u64)> {
        self.sharding.holds(&self.shards[..], agent, lock)
    }

    /// The queue of `lock`.
    pub fn view(&self, lock: &LockId) -> Option<LockView> {
        self.sharding.view(&self.shards[..], lock)
    }

    /// Whether `agent` has an entry or a watch in the table.
    pub fn knows(&self, agent: &AgentId) -> bool {
        let all = self.sharding.all();
        self.sharding.knows(&self.shards[..], agent, all)
    }

    /// `agent`'s direct locks, in lock id order.
    pub fn direct_locks_of(&self, agent: &AgentId) -> Vec<(LockId, Mode, u64)> {
        let all = self.sharding.all();
        self.sharding.direct_locks_of(&self.shards[..], agent, all)
    }

    /// What `agent` has in the table, in lock id order (what an agent that starts late is
    /// seeded with).
    pub fn agent_state(&self, agent: &AgentId) -> Vec<(LockNotice, Option<Mode>)> {
        let all = self.sharding.all();
        self.sharding.agent_state(&self.shards[..], agent, all)
    }

    /// A copy of the whole table.
    pub fn snapshot(&self) -> TableSnapshot {
        self.sharding.snapshot(&self.shards[..])
    }
}

/// The lock table of every simulated node, by node.
#[derive(Clone, Debug, Default)]
pub struct Tables {
    tables: BTreeMap<NodeId, NodeTable>,
}

impl Tables {
    /// No node yet.
    pub fn new() -> Tables {
        Tables::default()
    }

    /// Starts `node`'s server with an empty table whose versions start after `version_base`;
    /// a table `node` had before is lost (a crash and restart: give a larger base).
    pub fn start(&mut self, node: NodeId, modes: &ModeTable, version_base: u64) {
        let shards = (0..SIM_SHARDS)
            .map(|_| LockTable::new(node.clone(), modes.clone(), version_base))
            .collect();
        let table = NodeTable {
            sharding: Sharding::new(SIM_SHARDS),
            shards,
        };
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
    pub fn get(&self, node: &NodeId) -> Option<&NodeTable> {
        self.tables.get(node)
    }

    /// Every table, by node, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&NodeId, &NodeTable)> {
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
        let mut send = |to: &AgentId, msg: AgentMessage| match route(to.clone(), msg) {
            Route::Sent => Delivery::Sent,
            Route::RemoveAgent => Delivery::Gone,
        };
        for input in inputs {
            // No lock-delay in the simulations: nothing is released later.
            table
                .sharding
                .apply(&mut table.shards[..], input, &mut send);
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
            ghosts: false,
        };
        self.step(on, [input], route)
    }
}
