//! Fencing: how a resource guarded by a lock refuses a holder whose grant is stale.
//!
//! A lock holder can be paused (a GC pause, `SIGSTOP`, a slow disk) or cut off by a partition
//! long enough for the lock servers to give the lock to someone else; when it resumes it still
//! believes it holds the lock and may write. No lock service can prevent that alone: the
//! resource must check. Every grant carries a *fencing version* per node that granted it, the
//! version of that node's lock table at the grant (the `nodes` of a granted lock:
//! `(NodeId, u64)` pairs). A [`Fence`] sits in front of the resource, keeps the highest version
//! seen per (lock, node), and accepts a write only if none of its versions is below the highest
//! seen for the same lock and node; it then records them.
//!
//! # Invariants
//!
//! - For each (lock, node) the recorded version only grows.
//! - A write is either accepted and all its versions recorded, or refused and nothing recorded.
//! - A write with no versions is refused: it carries no evidence of any grant.
//!
//! # Why this is right for `Majority` locks
//!
//! A node's table versions grow strictly with every change to its queues, and keep growing across
//! restarts (with a data directory, above the ceiling the previous incarnation kept on disk;
//! without one, from the start time, which a clock stepped back defeats), so on one node a later
//! grant of the same lock has a larger version than an earlier one. An exclusive `Majority` grant
//! is held on a majority of the lock's nodes; any two majorities of the same node set intersect. So
//! if holder `A` was granted the lock and holder `B` was granted it later (after `A` lost it on at
//! least the nodes `B` needed), some node `n` granted it to both, `A` at version `a_n` and `B` at
//! `b_n > a_n`. Once the fence has seen a write from `B`, its highest for (lock, `n`) is at least
//! `b_n`, and every later write from `A` carries `a_n < b_n` for `n` and is refused, whichever
//! other nodes it lists. A write from `B` is never refused on `A`'s account: on every node both
//! list, `B`'s version is the later one. The same holds for `All` locks (every node is in both sets)
//! and fails only for requirements whose node sets need not intersect (`Any`, `*_alive` after a
//! split), where the fence can merely refuse what it can compare.
//!
//! The fence decides by the versions alone: it does not know which grant is current, only which
//! ones have been superseded on a node it has heard from. A stale holder whose every version is on
//! nodes no later writer listed gets through, which the intersection argument above rules out
//! for `Majority` and `All`.

use crate::{LockId, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

mod versions;
pub use versions::{Versions, VersionsError};

/// Why a [`Fence`] refused a write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// The write listed no versions at all.
    #[error("the write carries no fencing versions")]
    NoVersions,
    /// A version was below the highest seen for the same lock and node: a later holder has
    /// written since the writer's grant.
    #[error("stale fencing version on node {node}: {version} < {highest} already seen")]
    Stale {
        /// The node whose version is stale.
        node: NodeId,
        /// The writer's version for that node.
        version: u64,
        /// The highest version the fence has accepted for that lock and node.
        highest: u64,
    },
}

/// The highest fencing version accepted per (lock, node); see the [module docs](self).
///
/// A resource that restarts must not forget what its fence has seen (or a stale holder's
/// write would pass once): save it with serde (it serializes as a list of
/// `(lock, node, highest)` entries, JSON included) or read [`Fence::entries`] into storage of
/// your own, and restore it with serde or with [`Fence::record`], without replaying the writes.
///
/// ```
/// use locks_core::fence::{Fence, Versions};
/// use locks_core::lock_id;
/// let lock = lock_id!["register"];
/// let mut fence = Fence::new();
/// let versions: Versions = "a@1042,b@977".parse().unwrap();
/// fence.admit(&lock, versions.as_slice()).unwrap();
/// // Saved, then restored after a restart: the older grant is still refused.
/// let saved: Vec<_> = fence.entries().collect();
/// let mut restored = Fence::new();
/// for (lock, node, highest) in &saved {
///     restored.record(lock, node, *highest);
/// }
/// let stale: Versions = "a@1000,b@977".parse().unwrap();
/// assert!(restored.admit(&lock, stale.as_slice()).is_err());
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(from = "versions::Saved", into = "versions::Saved")]
pub struct Fence {
    highest: HashMap<LockId, HashMap<NodeId, u64>>,
}

impl Fence {
    /// An empty fence: it has seen no writes.
    pub fn new() -> Fence {
        Fence::default()
    }

    /// Whether a write under `lock` carrying `versions` would be accepted, without recording it.
    pub fn check(&self, lock: &LockId, versions: &[(NodeId, u64)]) -> Result<(), FenceError> {
        if versions.is_empty() {
            return Err(FenceError::NoVersions);
        }
        let Some(seen) = self.highest.get(lock) else {
            return Ok(());
        };
        for (node, version) in versions {
            if let Some(&highest) = seen.get(node)
                && *version < highest
            {
                return Err(FenceError::Stale {
                    node: node.clone(),
                    version: *version,
                    highest,
                });
            }
        }
        Ok(())
    }

    /// Accepts a write under `lock` carrying `versions` (and records them) or refuses it (and
    /// records nothing).
    ///
    /// A version equal to the highest seen is accepted: the same holder writes again.
    pub fn admit(&mut self, lock: &LockId, versions: &[(NodeId, u64)]) -> Result<(), FenceError> {
        self.check(lock, versions)?;
        for (node, version) in versions {
            self.record(lock, node, *version);
        }
        Ok(())
    }

    /// The highest version accepted for `lock` on `node`, if any.
    pub fn highest(&self, lock: &LockId, node: &NodeId) -> Option<u64> {
        self.highest.get(lock)?.get(node).copied()
    }

    /// Raises the highest version of `lock` on `node` to at least `version`, as if a write
    /// carrying it had been accepted: restores a saved fence, or starts one from the versions a
    /// resource stored beside its data. Never lowers what was seen.
    pub fn record(&mut self, lock: &LockId, node: &NodeId, version: u64) {
        let seen = self.highest.entry(lock.clone()).or_default();
        let highest = seen.entry(node.clone()).or_insert(version);
        *highest = (*highest).max(version);
    }

    /// Every (lock, node, highest version) the fence holds, in no particular order: what to
    /// save ([`Fence::record`] restores it).
    pub fn entries(&self) -> impl Iterator<Item = (LockId, NodeId, u64)> + '_ {
        self.highest.iter().flat_map(|(lock, seen)| {
            seen.iter()
                .map(move |(node, version)| (lock.clone(), node.clone(), *version))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lock(name: &str) -> LockId {
        LockId::new([crate::Key::from(name)]).unwrap()
    }

    fn toks(list: &[(&str, u64)]) -> Vec<(NodeId, u64)> {
        list.iter()
            .map(|(n, v)| (NodeId::new(n).unwrap(), *v))
            .collect()
    }

    #[test]
    fn a_later_holder_is_accepted_and_the_earlier_one_refused() {
        let mut fence = Fence::new();
        let r = lock("r");
        assert_eq!(fence.admit(&r, &toks(&[("a", 5), ("b", 3)])), Ok(()));
        // The later holder shares node b with the first one, at a larger version.
        assert_eq!(fence.admit(&r, &toks(&[("b", 9), ("c", 2)])), Ok(()));
        assert_eq!(
            fence.admit(&r, &toks(&[("a", 5), ("b", 3)])),
            Err(FenceError::Stale {
                node: NodeId::new("b").unwrap(),
                version: 3,
                highest: 9
            })
        );
        // The current holder writes again with the same versions.
        assert_eq!(fence.admit(&r, &toks(&[("b", 9), ("c", 2)])), Ok(()));
    }

    #[test]
    fn a_refused_write_records_nothing() {
        let mut fence = Fence::new();
        let r = lock("r");
        fence.admit(&r, &toks(&[("a", 5), ("b", 5)])).unwrap();
        // c@100 comes with a stale b: nothing of it is kept.
        assert!(fence.admit(&r, &toks(&[("c", 100), ("b", 4)])).is_err());
        assert_eq!(fence.highest(&r, &NodeId::new("c").unwrap()), None);
        assert_eq!(fence.admit(&r, &toks(&[("c", 1), ("b", 5)])), Ok(()));
    }

    #[test]
    fn no_tokens_no_write() {
        let mut fence = Fence::new();
        assert_eq!(fence.admit(&lock("r"), &[]), Err(FenceError::NoVersions));
        assert_eq!(fence.check(&lock("r"), &[]), Err(FenceError::NoVersions));
    }

    #[test]
    fn locks_are_fenced_apart() {
        let mut fence = Fence::new();
        fence.admit(&lock("r"), &toks(&[("a", 50)])).unwrap();
        assert_eq!(fence.admit(&lock("s"), &toks(&[("a", 1)])), Ok(()));
        assert_eq!(
            fence.highest(&lock("r"), &NodeId::new("a").unwrap()),
            Some(50)
        );
        assert_eq!(
            fence.highest(&lock("s"), &NodeId::new("a").unwrap()),
            Some(1)
        );
    }

    /// Exclusive `Majority` grants of one lock on nodes n0..n(k-1), one after another: each
    /// holder gets a random majority, each granting node a version above all it gave before.
    fn majority_history(
        nodes: usize,
        holders: usize,
    ) -> impl Strategy<Value = Vec<Vec<(NodeId, u64)>>> {
        let need = nodes / 2 + 1;
        proptest::collection::vec(
            (
                proptest::sample::subsequence((0..nodes).collect::<Vec<_>>(), need..=nodes),
                proptest::collection::vec(1u64..4, nodes),
            ),
            1..=holders,
        )
        .prop_map(move |grants| {
            let mut version = vec![0u64; nodes];
            grants
                .into_iter()
                .map(|(on, steps)| {
                    on.into_iter()
                        .map(|n| {
                            version[n] += steps[n];
                            (NodeId::new(format!("n{n}")).unwrap(), version[n])
                        })
                        .collect()
                })
                .collect()
        })
    }

    proptest! {
        /// Writes from successive majority holders in any order: once holder j wrote, every
        /// earlier holder is refused, and a write is accepted iff no later holder wrote before.
        #[test]
        fn majority_holders_are_fenced_in_grant_order(
            (grants, order) in (1usize..=5, 1usize..=6).prop_flat_map(|(n, h)| {
                majority_history(2 * n - 1, h).prop_flat_map(|g| {
                    let len = g.len();
                    (Just(g), proptest::collection::vec(0..len, 1..20))
                })
            })
        ) {
            let mut fence = Fence::new();
            let r = lock("r");
            let mut latest_written: Option<usize> = None;
            for i in order {
                let verdict = fence.admit(&r, &grants[i]);
                let expect_ok = latest_written.is_none_or(|j| i >= j);
                prop_assert_eq!(verdict.is_ok(), expect_ok, "holder {} after {:?}", i, latest_written);
                if expect_ok {
                    latest_written = Some(i);
                }
            }
        }

        /// `admit` is `check` then record; a refusal changes nothing.
        #[test]
        fn admit_agrees_with_check(
            writes in proptest::collection::vec(
                proptest::collection::vec((0usize..3, 0u64..6), 0..4), 1..30)
        ) {
            let mut fence = Fence::new();
            let r = lock("r");
            for w in writes {
                let versions: Vec<(NodeId, u64)> = w
                    .into_iter()
                    .map(|(n, v)| (NodeId::new(format!("n{n}")).unwrap(), v))
                    .collect();
                let before = fence.clone();
                let checked = fence.check(&r, &versions);
                prop_assert_eq!(fence.admit(&r, &versions), checked.clone());
                for n in 0..3 {
                    let n = NodeId::new(format!("n{n}")).unwrap();
                    if checked.is_err() {
                        prop_assert_eq!(fence.highest(&r, &n), before.highest(&r, &n));
                    } else if let Some(max) = versions.iter().filter(|(m, _)| *m == n).map(|(_, v)| *v).max() {
                        prop_assert!(fence.highest(&r, &n) >= Some(max));
                    }
                }
            }
        }
    }
}
