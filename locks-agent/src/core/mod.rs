//! TEMPORARY stand-in for the agent core (branch `agentcore` replaces this).
#![allow(missing_docs, dead_code, unused_variables)]
use crate::options::{Options, Req};
use locks_core::proto::{AgentMessage, ServerRequest};
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadlock {
    pub victim: AgentId,
    pub lock: LockId,
    pub node: NodeId,
}
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransactionStatus {
    NoLocks,
    Waiting,
    HaveAllLocks { deadlocks: Vec<Deadlock> },
    CannotServe { locks: Vec<LockId> },
}
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockResult {
    pub deadlocks: Vec<Deadlock>,
}
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("node down {0}")]
    NodeDown(NodeId),
}
#[derive(Debug, Clone)]
pub enum Effect {
    ToServer {
        node: NodeId,
        request: ServerRequest,
    },
    ToAgent {
        to: AgentId,
        msg: AgentMessage,
    },
    StatusChanged(TransactionStatus),
    Abort {
        lock: LockId,
        node: NodeId,
    },
}
pub struct AgentCore {
    id: AgentId,
}
impl AgentCore {
    pub fn new(id: AgentId, modes: ModeTable, options: Options) -> Self {
        AgentCore { id }
    }
    pub fn request(
        &mut self,
        lock: LockId,
        mode: Mode,
        nodes: &[NodeId],
        req: Req,
    ) -> Result<Vec<Effect>, RequestError> {
        Ok(vec![])
    }
    pub fn unlock(&mut self, lock: &LockId) -> Result<Vec<Effect>, RequestError> {
        Ok(vec![])
    }
    pub fn convert(&mut self, lock: &LockId, mode: Mode) -> Result<Vec<Effect>, RequestError> {
        Ok(vec![])
    }
    pub fn receive(&mut self, msg: AgentMessage) -> Vec<Effect> {
        vec![]
    }
    pub fn node_down(&mut self, node: &NodeId) -> Vec<Effect> {
        vec![]
    }
    pub fn node_up(&mut self, node: &NodeId) -> Vec<Effect> {
        vec![]
    }
    pub fn settle(&mut self) -> Vec<Effect> {
        vec![]
    }
    pub fn status(&self) -> TransactionStatus {
        TransactionStatus::NoLocks
    }
    pub fn end(&mut self) -> Vec<Effect> {
        vec![]
    }
    pub fn wait_for_graph_dot(&self) -> String {
        String::new()
    }
}
