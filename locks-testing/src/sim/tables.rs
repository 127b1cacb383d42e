//! The simulated nodes' servers: each node's core ([`NodeCore`](locks_server::state_machine::NodeCore))
//! around its real lock table (`locks_server::state_machine::LockTable`), in shards as a node's is.
//!
//! [`Tables::admit`] is the one place the simulations apply requests to a node, and
//! [`Tables::release_node`] the one place they tell a node that another went down: both step
//! the node's core ([`NodeCore::step`](locks_server::state_machine::NodeCore::step): the liveness
//! filter, node down) and carry out its effects through the same function as the node's
//! shells ([`Sharding::apply`](locks_server::state_machine::Sharding::apply), which steps each
//! shard with [`LockTable::step`](locks_server::state_machine::LockTable::step)), so the
//! simulations run the node layer and the server protocol, and what spans a node's shards
//! (removal, a surrender whose cycle crosses shards, an agent found gone), exactly as the lock
//! server actor and the fast path do. A simulated node has no start-delay and no lock-delay
//! (a downed node's agents are released at once), and [`SIM_SHARDS`] shards, few enough that
//! the simulations' lock ids fall both in one shard and in several.

use locks_core::proto::{AgentMessage, LockNotice, LockView, ServerRequest};
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId};
use locks_server::TableSnapshot;
use locks_server::embed::Delivery;
use locks_server::state_machine::{LockTable, TableInput};
use locks_server::state_machine::{NodeCore, NodeEffect, NodeInput, Peers, Sharding};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// How many shards a simulated node's table has.
pub const SIM_SHARDS: usize = 3;

/// What the simulation did with a message a table sent (see [`Tables::admit`]).
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

/// One simulated node's server: its core, its table's shards, and how requests are spread
/// over them.
#[derive(Clone, Debug)]
pub struct NodeTable {
    core: NodeCore,
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
        let sharding = Sharding::new(SIM_SHARDS);
        let shards = sharding.tables(|| LockTable::new(node.clone(), modes.clone(), version_base));
        let mut table = NodeTable {
            core: NodeCore::new(node.clone(), Duration::ZERO, Duration::ZERO),
            sharding,
            shards,
        };
        let started = table.core.step(NodeInput::Started, &AllConnected);
        debug_assert!(
            started.is_empty(),
            "a node without a start-delay waits for nothing"
        );
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

    /// Gives `requests` to `node`'s server in order, `peers` saying which nodes `node` is
    /// connected to (a request of an agent whose node is not connected is ignored, as a real
    /// node ignores it), and passes every message its table sends, in order, to `route`. An
    /// agent `route` says does not run is removed before the next request (and what its
    /// removal sends is routed too).
    pub fn admit(
        &mut self,
        node: &NodeId,
        requests: impl IntoIterator<Item = ServerRequest>,
        peers: &impl Peers,
        route: impl FnMut(AgentId, AgentMessage) -> Route,
    ) -> Result<(), NoTable> {
        self.step(
            node,
            requests.into_iter().map(NodeInput::Request),
            peers,
            route,
        )
    }

    /// Steps `node`'s core with `inputs` in order and carries out its effects; see
    /// [`Tables::admit`].
    fn step(
        &mut self,
        node: &NodeId,
        inputs: impl IntoIterator<Item = NodeInput>,
        peers: &impl Peers,
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
            for effect in table.core.step(input, peers) {
                let input = match effect {
                    NodeEffect::Admit(request) => TableInput::Request(request),
                    NodeEffect::Table(input) => input,
                    // Only a start-delay or a lock-delay schedules or opens anything, and a
                    // simulated node has neither.
                    NodeEffect::Schedule { .. } | NodeEffect::OpenFastPath => continue,
                };
                let ghosts = table
                    .sharding
                    .apply(&mut table.shards[..], input, &mut send);
                debug_assert!(ghosts.is_empty(), "no lock-delay, so no ghosts");
            }
        }
        Ok(())
    }

    /// Tells `on`'s server that node `down` went down: it releases every agent of `down` at
    /// once (in id order), as a node without a lock-delay does; what that sends goes to
    /// `route` as in [`Tables::admit`].
    pub fn release_node(
        &mut self,
        on: &NodeId,
        down: &NodeId,
        route: impl FnMut(AgentId, AgentMessage) -> Route,
    ) -> Result<(), NoTable> {
        self.step(
            on,
            [NodeInput::LinkDown(down.clone())],
            &AllConnected,
            route,
        )
    }
}

/// A view of the cluster in which every node is connected to every other: the simulations
/// whose nodes never part.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllConnected;

impl Peers for AllConnected {
    fn connected(&self, _node: &NodeId) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeId {
        NodeId::new(name).unwrap()
    }

    /// Only `node` itself is connected: every other node's agents are ignored.
    struct Alone(NodeId);

    impl Peers for Alone {
        fn connected(&self, node: &NodeId) -> bool {
            *node == self.0
        }
    }

    fn lock_by(agent: &AgentId) -> ServerRequest {
        ServerRequest::Lock {
            agent: agent.clone(),
            lock: LockId::new(["a"]).unwrap(),
            mode: Mode::X,
        }
    }

    /// Requests go through the node's core: an agent of a node that is not connected is
    /// ignored, one of a connected node is served, and a node down releases its agents.
    #[test]
    fn requests_and_node_downs_go_through_the_nodes_core() {
        let (a, b) = (node("a"), node("b"));
        let mut tables = Tables::new();
        tables.start(a.clone(), &ModeTable::default(), 0);
        let stranger = AgentId::new(b.clone(), 1, 1);
        let mut told = Vec::new();
        let mut route = |to: AgentId, _msg: AgentMessage| {
            told.push(to);
            Route::Sent
        };
        tables
            .admit(&a, [lock_by(&stranger)], &Alone(a.clone()), &mut route)
            .unwrap();
        assert!(!tables.get(&a).unwrap().knows(&stranger));

        tables
            .admit(&a, [lock_by(&stranger)], &AllConnected, &mut route)
            .unwrap();
        let lock = LockId::new(["a"]).unwrap();
        assert_eq!(
            tables.get(&a).unwrap().holds(&stranger, &lock).map(|h| h.0),
            Some(Mode::X)
        );

        tables.release_node(&a, &b, &mut route).unwrap();
        assert!(!tables.get(&a).unwrap().knows(&stranger));
        // Told of its grant only: nothing for the ignored request, nor (being gone) for its
        // removal.
        assert_eq!(told, vec![stranger]);
    }
}
