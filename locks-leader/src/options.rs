//! How a group behaves under partitions: [`ElectionMode`] and the [`GroupOptions`] a member
//! starts with (see the crate documentation, "Majority and islands").

use locks_core::NodeId;
use std::collections::BTreeSet;

/// What a group promises when the network splits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ElectionMode {
    /// At most one member believes it leads at any instant: a candidate leads only while it
    /// holds the election lock on a majority of the group's nodes and its leases on them are
    /// valid, and a leader's term must have been accepted by members on a majority of the
    /// group's nodes before it handles a leader call. An island without a majority has no
    /// leader. The default.
    #[default]
    Majority,
    /// Erlang's `locks_leader`: every island of a netsplit elects its own leader, and after
    /// the heal one of them remains and merges the other island's members. A write confirmed
    /// by the losing island's leader during the split can be lost at the heal.
    Islands,
}

/// The options a member of a group starts with ([`crate::start_with`]).
///
/// ```
/// use locks_leader::{ElectionMode, GroupOptions};
/// use locks_core::NodeId;
///
/// let nodes = ["a", "b", "c"].map(|n| NodeId::new(n).unwrap());
/// let options = GroupOptions::majority().nodes(nodes);
/// assert_eq!(options.mode(), ElectionMode::Majority);
/// assert_eq!(options.configured_nodes().len(), 3);
/// assert_eq!(GroupOptions::default(), GroupOptions::majority());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupOptions {
    mode: ElectionMode,
    nodes: BTreeSet<NodeId>,
}

impl GroupOptions {
    /// Majority mode with no configured nodes (the group's nodes are the ones it discovers).
    pub fn majority() -> GroupOptions {
        GroupOptions::default()
    }

    /// Islands mode (Erlang's behaviour).
    pub fn islands() -> GroupOptions {
        GroupOptions {
            mode: ElectionMode::Islands,
            nodes: BTreeSet::new(),
        }
    }

    /// Sets the mode.
    pub fn with_mode(mut self, mode: ElectionMode) -> GroupOptions {
        self.mode = mode;
        self
    }

    /// The nodes the group runs its candidates on, known from the start (majority mode): a
    /// majority is counted over these and every node on which a candidate of the group has
    /// been seen. Give every member the same list, so that no island can count a majority of
    /// a smaller set.
    pub fn nodes(mut self, nodes: impl IntoIterator<Item = NodeId>) -> GroupOptions {
        self.nodes.extend(nodes);
        self
    }

    /// The mode.
    pub fn mode(&self) -> ElectionMode {
        self.mode
    }

    /// The configured nodes.
    pub fn configured_nodes(&self) -> &BTreeSet<NodeId> {
        &self.nodes
    }
}
