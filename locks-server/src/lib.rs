//! `locks-server`: the node-local half of the lock manager: the lock table ([`table`]), a pure
//! state machine that the lock server actor wraps.

pub mod table;
pub use table::{LockTable, TableSnapshot};
