//! What a transaction reports to its client: its status, the deadlocks resolved on the way, the
//! locks it holds with their fencing versions, where each lock stands, and the views of a
//! watched lock. Plain values: the agent core, the agent actor and the transaction handle all
//! pass them on, none of them owns them.

use locks_core::proto::LockView;
use locks_core::{AgentId, LockId, Mode, NodeId};
use smallvec::SmallVec;
use std::fmt;
use std::sync::Arc;

/// One resolved deadlock: `victim` surrendered (or aborted on) `lock` on `node`.
///
/// Erlang reports these as `{Agent, {OID, Node}}` pairs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Deadlock {
    /// The agent that gave the lock up: the largest agent id of the cycle.
    pub victim: AgentId,
    /// The lock it surrendered.
    pub lock: LockId,
    /// The node of that lock's server.
    pub node: NodeId,
}

impl fmt::Display for Deadlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} surrendered {} on {}",
            self.victim, self.lock, self.node
        )
    }
}

/// Where a transaction stands (Erlang's `transaction_status/1`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransactionStatus {
    /// Nothing has been requested.
    NoLocks,
    /// Some request is not held yet.
    Waiting,
    /// Every request is held. `deadlocks` lists every deadlock seen so far, oldest first.
    HaveAllLocks {
        /// The deadlocks resolved since the transaction began.
        deadlocks: Vec<Deadlock>,
    },
    /// Some pending request can no longer be met: nodes it needs are down (and the transaction
    /// does not wait for them) or refused it.
    CannotServe {
        /// The locks of those requests.
        locks: Vec<LockId>,
        /// The nodes that cannot grant them.
        nodes: Vec<NodeId>,
    },
}

impl TransactionStatus {
    /// Whether this is [`TransactionStatus::HaveAllLocks`].
    pub fn have_all_locks(&self) -> bool {
        matches!(self, TransactionStatus::HaveAllLocks { .. })
    }
}

/// For logs and messages: `no locks`, `waiting`, `has all locks` (with the number of deadlocks
/// resolved, if any), `cannot serve [a], [b] on n1, n2`.
impl fmt::Display for TransactionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransactionStatus::NoLocks => f.write_str("no locks"),
            TransactionStatus::Waiting => f.write_str("waiting"),
            TransactionStatus::HaveAllLocks { deadlocks } if deadlocks.is_empty() => {
                f.write_str("has all locks")
            }
            TransactionStatus::HaveAllLocks { deadlocks } => write!(
                f,
                "has all locks ({} deadlock{} resolved)",
                deadlocks.len(),
                if deadlocks.len() == 1 { "" } else { "s" }
            ),
            TransactionStatus::CannotServe { locks, nodes } => {
                f.write_str("cannot serve ")?;
                write_list(f, locks)?;
                f.write_str(" on ")?;
                write_list(f, nodes)
            }
        }
    }
}

fn write_list<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

/// One held lock as reported to the client, with the fencing version of every node that granted
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantedLock {
    /// The lock.
    pub lock: LockId,
    /// The mode requested (and held).
    pub mode: Mode,
    /// The nodes that grant it, each with the lock's version at the grant: a fencing version that
    /// grows with every new holder.
    pub nodes: GrantNodes,
}

impl GrantedLock {
    /// The grant's fencing versions ([`GrantedLock::nodes`]), which display as `a@1042,b@977`
    /// and parse back ([`locks_core::fence::Versions`]).
    pub fn versions(&self) -> locks_core::fence::Versions {
        locks_core::fence::Versions::from(&self.nodes[..])
    }
}

/// The nodes that grant a lock, each with its fencing version ([`GrantedLock::nodes`]). Inline
/// for one node, the common case: a lock granted on the fast path allocates nothing for it
/// (the allocation and its free were a twentieth of an uncontended transaction). It
/// dereferences to a slice of `(node, version)`; [`GrantNodes::one`] or `collect` build one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GrantNodes(SmallVec<[(NodeId, u64); 1]>);

impl GrantNodes {
    /// No node yet.
    pub fn new() -> GrantNodes {
        GrantNodes(SmallVec::new())
    }

    /// One granting node with its version (no allocation).
    pub fn one(node: NodeId, version: u64) -> GrantNodes {
        let mut nodes = SmallVec::new();
        nodes.push((node, version));
        GrantNodes(nodes)
    }

    /// Room for `n` nodes.
    pub fn with_capacity(n: usize) -> GrantNodes {
        GrantNodes(SmallVec::with_capacity(n))
    }

    /// The nodes as a vector (no copy when they were already on the heap).
    pub fn into_vec(self) -> Vec<(NodeId, u64)> {
        self.0.into_vec()
    }

    /// Adds a granting node with its version.
    pub fn push(&mut self, node: NodeId, version: u64) {
        self.0.push((node, version));
    }
}

impl std::ops::Deref for GrantNodes {
    type Target = [(NodeId, u64)];

    fn deref(&self) -> &[(NodeId, u64)] {
        &self.0
    }
}

impl Extend<(NodeId, u64)> for GrantNodes {
    fn extend<I: IntoIterator<Item = (NodeId, u64)>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl FromIterator<(NodeId, u64)> for GrantNodes {
    fn from_iter<I: IntoIterator<Item = (NodeId, u64)>>(iter: I) -> GrantNodes {
        GrantNodes(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a GrantNodes {
    type Item = &'a (NodeId, u64);
    type IntoIter = std::slice::Iter<'a, (NodeId, u64)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl IntoIterator for GrantNodes {
    type Item = (NodeId, u64);
    type IntoIter = smallvec::IntoIter<[(NodeId, u64); 1]>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// For logs and messages: `[db, x] X on a@1042, b@977`, each granting node with its fencing
/// version.
impl fmt::Display for GrantedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} on ", self.lock, self.mode)?;
        for (i, (node, version)) in self.nodes.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{node}@{version}")?;
        }
        Ok(())
    }
}

/// What `await_all_locks` returns: the locks held and the deadlocks resolved on the way.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LockResult {
    /// Every request of the transaction, in lock id order.
    pub locks: Vec<GrantedLock>,
    /// Every deadlock seen so far, oldest first.
    pub deadlocks: Vec<Deadlock>,
}

pub use locks_core::LossCause;

/// A lock the client was told it holds, and no longer holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostLock {
    /// The lock.
    pub lock: LockId,
    /// The mode the client was told it holds.
    pub mode: Mode,
    /// The nodes of the request that no longer grant it.
    pub nodes: Vec<NodeId>,
    /// Why.
    pub cause: LossCause,
}

impl fmt::Display for LostLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} lost on ", self.lock, self.mode)?;
        for (i, node) in self.nodes.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{node}")?;
        }
        write!(f, " ({})", self.cause)
    }
}

/// A change the transaction pushes to its client ([`crate::Transaction::events`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransactionEvent {
    /// The status changed.
    Status(TransactionStatus),
    /// A lock is held, as the client is told now: with its fencing versions. A lock granted
    /// again after a loss (or converted up) is reported again, with its new versions.
    Granted(GrantedLock),
    /// A lock the client was told it holds is no longer held.
    Lost(LostLock),
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::lock_id;

    fn node(name: &str) -> NodeId {
        NodeId::new(name).unwrap()
    }

    #[test]
    fn statuses_and_grants_read_as_text() {
        assert_eq!(TransactionStatus::Waiting.to_string(), "waiting");
        let all = TransactionStatus::HaveAllLocks { deadlocks: vec![] };
        assert_eq!(all.to_string(), "has all locks");
        let cannot = TransactionStatus::CannotServe {
            locks: vec![lock_id!["db", 1u64], lock_id!["db", 2u64]],
            nodes: vec![node("b")],
        };
        assert_eq!(cannot.to_string(), "cannot serve [db, 1], [db, 2] on b");
        let granted = GrantedLock {
            lock: lock_id!["db", "x"],
            mode: Mode::X,
            nodes: [(node("a"), 1042), (node("b"), 977)].into_iter().collect(),
        };
        assert_eq!(granted.to_string(), "[db, x] X on a@1042, b@977");
    }
}

/// What [`Transaction::lock`](crate::Transaction::lock) and [`Transaction::lock_on`](crate::Transaction::lock_on) return: the lock as granted, with
/// the fencing version of each node, and the deadlocks resolved on the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Locked {
    /// The lock, the mode held and each granting node's version: a fencing version that grows
    /// with every new holder on that node.
    pub granted: GrantedLock,
    /// The deadlocks resolved so far, as in [`LockResult::deadlocks`](crate::LockResult)
    /// (empty when none).
    pub deadlocks: Vec<Deadlock>,
}

impl Locked {
    /// The locks of [`Locked::deadlocks`], sorted, each once.
    pub fn deadlock_locks(&self) -> Vec<LockId> {
        let mut locks: Vec<LockId> = self.deadlocks.iter().map(|d| d.lock.clone()).collect();
        locks.sort();
        locks.dedup();
        locks
    }

    /// The grant's fencing versions, to send with every write to the resource the lock guards:
    /// they display as `a@1042,b@977` and parse back
    /// ([`Versions`](locks_core::fence::Versions)), and a
    /// [`Fence`](locks_core::fence::Fence) in front of the resource admits or refuses them.
    pub fn versions(&self) -> locks_core::fence::Versions {
        self.granted.versions()
    }

    /// The fencing version of `node`'s grant, if that node grants the lock.
    pub fn version_on(&self, node: &NodeId) -> Option<u64> {
        self.granted
            .nodes
            .iter()
            .find(|(n, _)| n == node)
            .map(|(_, v)| *v)
    }
}

/// Where one lock of a transaction stands ([`Transaction::lock_state`](crate::Transaction::lock_state)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    /// The transaction has not asked for it (or unlocked it).
    NotRequested,
    /// Asked for and not held (yet, or again after a loss that was made good is pending).
    Waiting,
    /// Held by its requirement, with each node's version.
    Held(GrantedLock),
    /// The client was told it holds it, and it was lost since (not granted again yet).
    Lost(LostLock),
}

/// One view of a watched lock: the node of its server, the lock, and its queue then.
pub type WatchItem = (NodeId, LockId, Arc<LockView>);
