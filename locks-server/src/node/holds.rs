//! Who keeps a node running: its handles and its transactions, counted apart.
//!
//! A node runs while a [`Node`] handle or a transaction of it lives. Every transaction used to
//! keep a clone of a handle: two atomic operations per transaction on a reference count that
//! every thread beginning and ending transactions writes. A transaction is already counted,
//! though: its serial is live in its block's word from `begin` to its end
//! (`crate::router::agents`), on a line its own thread writes. So:
//! - handles are counted in [`Liveness`]'s `handles`;
//! - a transaction with a serial in a block keeps a [`NodeHold`] that counts nothing: the node's
//!   `Arc`, taken from the one the thread's last transaction left (so the shared reference
//!   count is not written either), and kept for the thread's next one at the end; a transaction
//!   without a block (begun on a thread without thread-locals) holds a counted handle;
//! - the node stops when the last handle is gone and no serial is live, whichever comes last.
//!   Each side first records its own change (the handle count and the `orphaned` flag; the
//!   serial's end in its block's word), then reads the other side's (all sequentially
//!   consistent, so of two concurrent last steps at least one sees both), and the stop runs
//!   once ([`Liveness::stop_now`]).
//!
//! A spare `Arc` keeps the memory of a stopped node (not the node running) until its thread
//! begins a transaction of another node, or ends.

use super::Node;
use crate::router::Presence;
use std::cell::RefCell;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

/// A node's count of handles (see the module documentation).
pub(super) struct Liveness {
    handles: AtomicUsize,
    /// The last handle is gone (it may come back through a transaction's node).
    orphaned: AtomicBool,
    /// The stop ran (or is running).
    stopped: AtomicBool,
}

impl Liveness {
    /// One handle.
    pub fn new() -> Liveness {
        Liveness {
            handles: AtomicUsize::new(1),
            orphaned: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        }
    }

    pub fn add_handle(&self) {
        self.handles.fetch_add(1, SeqCst);
    }

    /// A handle is dropped: whether it was the last one (then the node is orphaned).
    pub fn drop_handle(&self) -> bool {
        if self.handles.fetch_sub(1, SeqCst) != 1 {
            return false;
        }
        self.orphaned.store(true, SeqCst);
        true
    }

    /// Whether no handle is left, as far as a transaction that just ended can tell.
    fn orphaned(&self) -> bool {
        self.orphaned.load(SeqCst) && self.handles.load(SeqCst) == 0
    }

    /// Whether this call is the one to run the stop: true once.
    pub fn stop_now(&self) -> bool {
        !self.stopped.swap(true, SeqCst)
    }
}

thread_local! {
    /// The uncounted node `Arc` the thread's last transaction left.
    static SPARE: RefCell<Option<Node>> = const { RefCell::new(None) };
}

/// A transaction's hold on its node: with its live serial, keeps the node running as a handle
/// does (see the module documentation). Dereferences to the [`Node`].
pub struct NodeHold {
    node: ManuallyDrop<Node>,
}

impl std::fmt::Debug for NodeHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("NodeHold").field(&*self.node).finish()
    }
}

impl Node {
    /// A hold on this node for the transaction of `presence`, which begins now.
    pub(crate) fn new_hold(&self, presence: &Presence) -> NodeHold {
        if presence.block.is_none() {
            return NodeHold {
                node: ManuallyDrop::new(self.clone()),
            };
        }
        let spare = SPARE
            .try_with(|s| {
                let mut spare = s.borrow_mut();
                match &*spare {
                    Some(n) if Arc::ptr_eq(&n.inner, &self.inner) => spare.take(),
                    _ => None,
                }
            })
            .ok()
            .flatten();
        let node = spare.unwrap_or_else(|| Node {
            inner: self.inner.clone(),
            handle: false,
        });
        NodeHold {
            node: ManuallyDrop::new(node),
        }
    }

    /// The last handle was dropped, or a transaction ended on an orphaned node: stops it if
    /// no handle and no transaction is left, once.
    pub(super) fn stop_if_unused(&self) {
        let inner = &self.inner;
        if inner.live.orphaned() && !inner.router.agents().any_live() && inner.live.stop_now() {
            inner.stop_unused();
        }
    }
}

impl std::ops::Deref for NodeHold {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.node
    }
}

impl Drop for NodeHold {
    /// Runs after the transaction's end moved its serial to gone.
    fn drop(&mut self) {
        // SAFETY: `self.node` is taken once, here, and not touched again: the hold is being
        // dropped.
        let node = unsafe { ManuallyDrop::take(&mut self.node) };
        if node.handle {
            return;
        }
        if node.inner.live.orphaned.load(SeqCst) {
            node.stop_if_unused();
            return;
        }
        // Kept for the thread's next transaction; an earlier spare (another node's) goes.
        let earlier = SPARE.try_with(move |s| s.borrow_mut().replace(node));
        drop(earlier);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_handle_orphans_the_node_and_a_new_one_takes_it_back() {
        let live = Liveness::new();
        live.add_handle();
        assert!(!live.drop_handle());
        assert!(!live.orphaned());
        assert!(live.drop_handle(), "the last handle");
        assert!(live.orphaned());
        live.add_handle();
        assert!(!live.orphaned(), "a handle taken from a transaction's node");
        assert!(live.stop_now());
        assert!(!live.stop_now(), "once");
    }
}
