//! The node's pure state machines, as a public API: the lock table ([`LockTable`]: a
//! [`TableInput`] in, [`TableEffect`]s out; one request in, its [`Sends`] out), the node's core
//! around it ([`NodeCore`]: the liveness filter, and the start-delay, node down and lock-delay
//! as [`crate::lease`] decides them; a [`NodeInput`] in, [`NodeEffect`]s out) and the split of a node's table into shards
//! ([`Sharding`], [`SHARDS`]). None of them sends, sleeps or reads a clock, so a node can be
//! stepped by hand, simulated on a seeded network or checked by a model checker, as the
//! workspace's simulations do (`locks-testing`'s `sim`). The lock server actor and the fast path
//! are the shells that run them on a live node (`embed`).
//!
//! A table made here is the caller's own: nothing here reaches a live node's table or router.
//!
//! ```
//! use locks_core::proto::{AgentMessage, ServerRequest};
//! use locks_core::{AgentId, Mode, ModeTable, NodeId, lock_id};
//! use locks_server::state_machine::{LockTable, TableEffect, TableInput};
//!
//! let n1 = NodeId::new("n1").unwrap();
//! let a = AgentId::new(n1.clone(), 1, 1);
//! let mut table = LockTable::new(n1, ModeTable::standard(), 0);
//! let effects = table.step(TableInput::Request(ServerRequest::Lock {
//!     agent: a.clone(),
//!     lock: lock_id!["a"],
//!     mode: Mode::X,
//! }));
//! // Nobody else holds or waits: granted at once, and the agent is told so.
//! assert!(effects.iter().any(|e| matches!(
//!     e,
//!     TableEffect::Send { to, msg: AgentMessage::Notice(_) } if *to == a
//! )));
//! assert_eq!(table.holds(&a, &lock_id!["a"]).map(|(mode, _)| mode), Some(Mode::X));
//! ```

pub use crate::local::{Carrier, MAX_SHARDS, SHARDS, ShardAccess, Sharding};
pub use crate::node_core::{NodeCore, NodeEffect, NodeInput, Peers, Timer};
pub use crate::table::{DEFAULT_MAX_DEPTH, LockTable, Sends, TableEffect, TableInput, Undelivered};

/// Settings of a [`LockTable`] that change how it works inside, never what it answers.
pub trait TableInternals {
    /// Sets how many entries a lock needs before it keeps an index (tests use 0 to run every
    /// lock on the indexed path). Behaviour and output do not depend on it.
    fn with_index_threshold(self, threshold: usize) -> Self;
}

impl TableInternals for LockTable {
    fn with_index_threshold(self, threshold: usize) -> Self {
        LockTable::with_index_threshold(self, threshold)
    }
}
