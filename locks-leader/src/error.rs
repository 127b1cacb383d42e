//! The error types of `locks-leader`.

use serde::{Deserialize, Serialize};

/// Why starting or using a member failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The node is not running.
    #[error("the node has stopped")]
    NodeStopped,
    /// The callbacks' `init` refused to start.
    #[error("init failed: {0}")]
    Init(String),
    /// The member has stopped.
    #[error("the member has stopped")]
    Stopped,
    /// The group's term record in the node's data directory could not be read (damaged, or
    /// not this group's); the message names the file.
    #[error("{0}")]
    DataDir(String),
}

/// Why a call did not get a reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum CallError {
    /// No reply within the call's timeout (for a leader call: also when no leader appeared).
    #[error("the call timed out")]
    Timeout,
    /// The leader the call was forwarded to stopped being leader before it answered; the call
    /// may or may not have been handled.
    #[error("the leader died before replying")]
    LeaderDied,
    /// The operation needs the member to be leader, and it is not.
    #[error("this member is not the leader")]
    NotLeader,
    /// Majority mode: the member sees fewer than a majority of the group's nodes, so no leader
    /// can be on its side of a partition.
    #[error("no majority: this member sees {up} of the group's {group} nodes")]
    NoMajority {
        /// The group's nodes the member considers up (its own included).
        up: usize,
        /// The group's nodes.
        group: usize,
    },
    /// The member (or the leader's member) stopped; the callbacks asked for it, or the node
    /// stopped.
    #[error("the member stopped: {0}")]
    Stopped(String),
}
