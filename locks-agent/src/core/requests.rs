//! The client's requests: one per lock id, with a mode, the nodes it names and a [`Req`].
//! When a request counts as held is decided in `core/agent/have_all.rs`.

use crate::options::Req;
use locks_core::{LockId, Mode, NodeId};
use smallvec::SmallVec;

/// One lock request of the transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRequest {
    /// The lock.
    pub lock: LockId,
    /// The mode asked for (the strongest asked so far, for a lock asked for twice).
    pub mode: Mode,
    /// The nodes named, sorted, each once. One node, the common case, is kept inline: a
    /// transaction holds one request per lock, and a heap list for each cost 32 bytes a lock.
    pub nodes: SmallVec<[NodeId; 1]>,
    /// How many of them must grant it.
    pub req: Req,
    /// The mode the client has been told it holds this lock in, if it has: the transaction
    /// reported "have all locks" while the request existed (and it has not been told of a
    /// loss since). With `abort_on_deadlock`, a claimed lock is never surrendered (the agent
    /// aborts instead).
    pub claimed: Option<Mode>,
}

impl LockRequest {
    /// Whether the request is on `lock` or one of its descendants, on `node`.
    pub fn is_under(&self, lock: &LockId, node: &NodeId) -> bool {
        (self.lock == *lock || lock.is_ancestor_of(&self.lock)) && self.nodes.contains(node)
    }
}
