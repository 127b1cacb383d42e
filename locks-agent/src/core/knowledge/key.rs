//! Looking up a copy's `(LockId, NodeId)` key by borrowed parts: a lock id's keys (also a
//! prefix of them, for an ancestor) and a node, without building a key. The status asks whether
//! each request and every ancestor of it is held after each grant, and building the ancestors'
//! ids (one allocation each) and cloning the ids of every look-up was most of what that cost.
//!
//! Invariant: [`CopyKey`]'s order is exactly the order of `(LockId, NodeId)` (a lock id orders
//! by its keys, a node id by its name), which `BTreeMap`'s borrowed look-ups require.

use locks_core::{Key, LockId, NodeId};
use std::borrow::Borrow;
use std::cmp::Ordering;

/// A copy's key, owned or borrowed.
pub(crate) trait CopyKey {
    /// The lock id's keys.
    fn keys(&self) -> &[Key];
    /// The node.
    fn node(&self) -> &NodeId;
}

impl CopyKey for (LockId, NodeId) {
    fn keys(&self) -> &[Key] {
        self.0.keys()
    }

    fn node(&self) -> &NodeId {
        &self.1
    }
}

/// A copy's key made of borrowed parts.
pub(crate) struct KeyRef<'a>(pub &'a [Key], pub &'a NodeId);

impl CopyKey for KeyRef<'_> {
    fn keys(&self) -> &[Key] {
        self.0
    }

    fn node(&self) -> &NodeId {
        self.1
    }
}

impl<'a> KeyRef<'a> {
    /// The key of `(lock, node)`.
    pub(crate) fn of(lock: &'a LockId, node: &'a NodeId) -> KeyRef<'a> {
        KeyRef(lock.keys(), node)
    }

    /// As the maps' borrowed key type.
    pub(crate) fn as_dyn(&self) -> &(dyn CopyKey + 'a) {
        self
    }
}

impl<'a> Borrow<dyn CopyKey + 'a> for (LockId, NodeId) {
    fn borrow(&self) -> &(dyn CopyKey + 'a) {
        self
    }
}

impl PartialEq for dyn CopyKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        same_keys(self.keys(), other.keys()) && self.node() == other.node()
    }
}

/// Whether `a` and `b` are the same slice (an id and its clones share their keys): equal
/// without comparing them.
fn same_keys(a: &[Key], b: &[Key]) -> bool {
    std::ptr::eq(a, b) || a == b
}

impl Eq for dyn CopyKey + '_ {}

impl PartialOrd for dyn CopyKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn CopyKey + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.keys(), other.keys());
        let keys = if std::ptr::eq(a, b) {
            Ordering::Equal
        } else {
            a.cmp(b)
        };
        keys.then_with(|| self.node().cmp(other.node()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::lock_id;
    use std::collections::BTreeMap;

    #[test]
    fn borrowed_keys_order_as_owned_ones() {
        let a = NodeId::new("a").unwrap();
        let b = NodeId::new("b").unwrap();
        let ids = [
            lock_id!["db"],
            lock_id!["db", 1u64],
            lock_id!["db", 2u64],
            lock_id!["db", "t"],
            lock_id!["db", "t", 1u64],
            lock_id!["dc"],
            lock_id![3u64],
        ];
        let keys: Vec<(LockId, NodeId)> = ids
            .iter()
            .flat_map(|l| [(l.clone(), a.clone()), (l.clone(), b.clone())])
            .collect();
        for x in &keys {
            for y in &keys {
                let (bx, by) = (KeyRef::of(&x.0, &x.1), KeyRef::of(&y.0, &y.1));
                assert_eq!(bx.as_dyn().cmp(by.as_dyn()), x.cmp(y), "{x:?} {y:?}");
            }
        }
        let map: BTreeMap<(LockId, NodeId), usize> = keys
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, k)| (k, i))
            .collect();
        for (i, (l, n)) in keys.iter().enumerate() {
            assert_eq!(map.get(KeyRef::of(l, n).as_dyn()), Some(&i));
            // A prefix of the keys finds the ancestor's copy.
            let depth = l.depth();
            if depth > 1 {
                let parent = l.parent().unwrap();
                let found = map.get(KeyRef(&l.keys()[..depth - 1], n).as_dyn());
                assert_eq!(found, map.get(&(parent, n.clone())));
            }
        }
        assert_eq!(map.get(KeyRef::of(&lock_id!["zz"], &a).as_dyn()), None);
    }
}
