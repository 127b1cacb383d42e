//! TEMPORARY stand-in for the lock table (branch `table` replaces this file).
#![allow(missing_docs)]
use locks_core::proto::{AgentMessage, ServerRequest};
use locks_core::{AgentId, ModeTable, NodeId};
use serde::Serialize;

#[derive(Debug, Clone, Serialize, Default)]
pub struct TableSnapshot {}

pub struct LockTable {
    node: NodeId,
    modes: ModeTable,
}

impl LockTable {
    pub fn new(node: NodeId, modes: ModeTable, _version_base: u64) -> Self {
        LockTable { node, modes }
    }
    pub fn handle(&mut self, _r: ServerRequest) -> Vec<(AgentId, AgentMessage)> {
        Vec::new()
    }
    pub fn snapshot(&self) -> TableSnapshot {
        TableSnapshot {}
    }
    pub fn node(&self) -> &NodeId {
        &self.node
    }
    pub fn modes(&self) -> &ModeTable {
        &self.modes
    }
}
