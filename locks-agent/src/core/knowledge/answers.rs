//! The agent's requests whose answer has not come yet: conversions down (until the server's
//! notice with `Note::Converted`, the copy counts only for modes the converted mode covers) and
//! unlocks (until `Note::Unlocked`, no grant of the copy counts). Notices from before the request
//! was applied may still be on their way, and say nothing about what is held after it.
//!
//! Both also lower the entries of the lock's ancestors (the server keeps on an ancestor only
//! the intention modes the agent's requests still need there), whose notices from before may
//! show more: until the answer, each ancestor's copy counts for no more than the agent's
//! requests on and under it need once the request is applied (`capped`). Without that, a
//! request on the ancestor that its old notice seemed to cover (the intention of the lock being
//! converted down made its group `SIX`, the client then asked the ancestor for `SIX` itself) was
//! reported held while the server, having applied the conversion first, held `S` and would make
//! the new request wait.

use super::Knowledge;
use super::key::KeyRef;
use locks_core::{LockId, Mode, NodeId};

impl Knowledge {
    /// Records that this agent sent a conversion of `(lock, node)` down to `mode`: until the
    /// server's answer comes, the copy's entry counts for no mode `mode` does not cover.
    pub fn converting_down(&mut self, lock: &LockId, node: &NodeId, mode: Mode) {
        self.lowering
            .entry((lock.clone(), node.clone()))
            .or_default()
            .push_back(mode);
    }

    /// The oldest conversion of `(lock, node)` still unanswered has been answered (a notice
    /// with [`Note::Converted`](locks_core::proto::Note::Converted), or a refusal). Returns whether there was one.
    pub fn conversion_answered(&mut self, lock: &LockId, node: &NodeId) -> bool {
        self.uncap(lock, node);
        let key = (lock.clone(), node.clone());
        let Some(q) = self.lowering.get_mut(&key) else {
            return false;
        };
        q.pop_front();
        if q.is_empty() {
            self.lowering.remove(&key);
        }
        true
    }

    /// The modes of the conversions of `(lock, node)` still unanswered: the copy's entry counts
    /// only for modes every one of them covers.
    pub fn unanswered_conversions(
        &self,
        lock: &LockId,
        node: &NodeId,
    ) -> impl Iterator<Item = Mode> + '_ {
        let q = if self.lowering.is_empty() {
            None
        } else {
            self.lowering.get(KeyRef::of(lock, node).as_dyn())
        };
        q.into_iter().flatten().copied()
    }

    /// Records that this agent sent an `Unlock` of `(lock, node)`: the copy counts as held by
    /// nothing until the server's answer ([`Note::Unlocked`](locks_core::proto::Note::Unlocked), or a refusal) arrives.
    pub fn unlock_sent(&mut self, lock: &LockId, node: &NodeId) {
        *self
            .unlocking
            .entry((lock.clone(), node.clone()))
            .or_insert(0) += 1;
    }

    /// Whether an `Unlock` of `(lock, node)` this agent sent is not answered yet.
    pub fn unlock_unanswered(&self, lock: &LockId, node: &NodeId) -> bool {
        !self.unlocking.is_empty() && self.unlocking.contains_key(&(lock.clone(), node.clone()))
    }

    /// The server answered one unlock of `(lock, node)` (with a notice or a refusal). Returns
    /// whether one was outstanding.
    pub fn unlock_answered(&mut self, lock: &LockId, node: &NodeId) -> bool {
        self.uncap(lock, node);
        let key = (lock.clone(), node.clone());
        match self.unlocking.get_mut(&key) {
            Some(n) if *n > 1 => {
                *n -= 1;
                true
            }
            Some(_) => {
                self.unlocking.remove(&key);
                // The last unlock answered: the copy's entry says whether the agent left it.
                self.withdrawn.remove(&key);
                true
            }
            None => false,
        }
    }

    /// Caps the copy of `ancestor` on `node` at `cap` until the answer to this agent's
    /// conversion down or unlock of `cause`, a descendant (module documentation).
    pub fn cap_until_answered(
        &mut self,
        ancestor: LockId,
        node: &NodeId,
        cause: &LockId,
        cap: Option<Mode>,
    ) {
        self.capped
            .entry((ancestor, node.clone()))
            .or_default()
            .push((cause.clone(), cap));
    }

    /// The request about `cause` on `node` was answered: its ancestors' caps go (one each).
    fn uncap(&mut self, cause: &LockId, node: &NodeId) {
        if self.capped.is_empty() {
            return;
        }
        for ancestor in cause.ancestors() {
            let key = (ancestor, node.clone());
            if let Some(caps) = self.capped.get_mut(&key) {
                if let Some(i) = caps.iter().position(|(c, _)| c == cause) {
                    caps.remove(i);
                }
                if caps.is_empty() {
                    self.capped.remove(&key);
                }
            }
        }
    }

    /// Whether some copy is capped (the common case, none, costs nothing more).
    pub fn has_caps(&self) -> bool {
        !self.capped.is_empty()
    }

    /// The caps on the copy of `lock` on `node`: it counts only for modes every one covers
    /// (`None`: for nothing).
    pub fn caps(&self, lock: &LockId, node: &NodeId) -> impl Iterator<Item = Option<Mode>> + '_ {
        self.capped
            .get(KeyRef::of(lock, node).as_dyn())
            .into_iter()
            .flatten()
            .map(|(_, cap)| *cap)
    }
}
