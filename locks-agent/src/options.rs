//! TEMPORARY stand-in (branch `agentcore` replaces this).
#![allow(missing_docs)]
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub abort_on_deadlock: bool,
    pub await_nodes: bool,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Req {
    #[default]
    All,
    Any,
    Majority,
    AllAlive,
}
