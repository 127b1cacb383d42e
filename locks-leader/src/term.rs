//! Terms and roles.
//!
//! A [`Term`] names one leadership: the leader and an epoch. Terms are totally ordered (epoch,
//! then leader), and a leader's term is larger than every term it has seen when it takes over:
//! its epoch is at least the largest fencing version of the election lock it holds on any node
//! (each new holder of a lock gets a larger version on that node) and above every epoch it has
//! heard of from any member (every message between members carries the largest term its sender
//! has accepted). A leader that later hears of a larger term than its own (members of an island
//! that healed) takes a new, larger term at once and announces it (see `core`), so once a
//! connected group settles its leader's term is larger than every term any member has seen.
//! In majority mode a candidate also polls the candidates on the nodes of its majority before
//! it takes a term, and answers as leader only once a majority accepted it, so a new leader's
//! term exceeds every term a leader before it answered with (the argument is in the crate
//! documentation, "Terms as fencing versions"); with a data directory on every node, also after
//! every member restarted (`remembered.rs`).

use locks_core::MemberId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One leadership: a fencing version for what the leader writes.
///
/// Ordered by `(epoch, leader)`; two leaderships never share a term.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Term {
    /// Grows with every new leadership a member could know of.
    pub epoch: u64,
    /// The leader.
    pub leader: MemberId,
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.leader, self.epoch)
    }
}

/// How a member takes part in its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Role {
    /// May become leader: competes for the group's election lock.
    Candidate,
    /// Never leads: follows whichever candidate leads, without competing.
    Worker,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Candidate => "candidate",
            Role::Worker => "worker",
        })
    }
}
