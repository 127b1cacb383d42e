//! The error type of `locks-agent`.

use crate::core::{CallFailure, RequestError, comma_list};
use locks_core::{AgentId, LockId, NodeId};
use std::sync::Arc;

/// Why a transaction call failed. Errors are `Clone` so that one outcome can answer every
/// caller that was waiting.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The transaction was started with `abort_on_deadlock`, was chosen to break a deadlock,
    /// and had already been told it held `lock`: it aborted and released all its locks.
    #[error("aborted to resolve a deadlock on {lock} at node {node}")]
    Deadlock {
        /// The lock it would have had to surrender.
        lock: LockId,
        /// The node of that lock.
        node: NodeId,
    },
    /// Some requests can no longer be met because nodes they need are down (or refused them),
    /// or were never heard of.
    #[error(
        "cannot serve the requests on {}: {}",
        comma_list(locks),
        unserved(nodes, unknown)
    )]
    CannotServe {
        /// The locks whose requests cannot be met.
        locks: Vec<LockId>,
        /// The nodes that cannot grant them: down, not connected now, or refusing.
        nodes: Vec<NodeId>,
        /// The nodes that cannot grant them because this node was never connected to them (a
        /// misspelt name, a node not started or not in the cluster).
        unknown: Vec<NodeId>,
    },
    /// The request was refused by the agent (see the inner error).
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The request this call waited for was withdrawn with `unlock`.
    #[error("the request on {lock} was withdrawn")]
    Cancelled {
        /// The lock.
        lock: LockId,
    },
    /// A bounded wait ([`Transaction::lock_timeout`](crate::Transaction::lock_timeout) and the
    /// other `*_timeout` calls) ran out: what the call asked for was withdrawn, as if its future
    /// had been dropped, and the transaction goes on.
    #[error("gave up waiting for {lock}: {}", show_wait(waited_on, holders))]
    TimedOut {
        /// The lock the call asked for.
        lock: LockId,
        /// The copies (lock, node) of the transaction's requests that were not held when it
        /// gave up: the call waited for all of them. Empty when the last grant came just then.
        waited_on: Vec<(LockId, NodeId)>,
        /// The transactions it was waiting for on those copies, as far as it knew (a node that
        /// has not answered yet, or is down, shows none).
        holders: Vec<AgentId>,
    },
    /// The transaction has ended (by `end`, by dropping its handle, or with its node).
    #[error("the transaction has ended")]
    Ended,
    /// The node refused or failed the call (for example: it has stopped). Shared, so that
    /// the error stays `Clone`.
    #[error("node error: {0}")]
    Node(Arc<locks_server::Error>),
}

impl From<locks_server::Error> for Error {
    fn from(e: locks_server::Error) -> Self {
        Error::Node(Arc::new(e))
    }
}

impl From<CallFailure> for Error {
    fn from(f: CallFailure) -> Self {
        match f {
            CallFailure::CannotServe { locks, nodes } => Error::CannotServe {
                locks,
                nodes,
                unknown: Vec::new(),
            },
            CallFailure::Refused { lock, node, reason } => {
                Error::Request(RequestError::Refused { lock, node, reason })
            }
            CallFailure::Cancelled { lock } => Error::Cancelled { lock },
            CallFailure::Deadlock { lock, node } => Error::Deadlock { lock, node },
            CallFailure::Ended => Error::Ended,
            CallFailure::TimedOut {
                lock,
                waited_on,
                holders,
            } => Error::TimedOut {
                lock,
                waited_on,
                holders,
            },
        }
    }
}

/// What a timed-out call waited for, for its message: `not granted: [a]@n1, [b]@n2; waiting
/// for <n1.1.4>`.
fn show_wait(waited_on: &[(LockId, NodeId)], holders: &[AgentId]) -> String {
    if waited_on.is_empty() {
        return "granted only as it gave up (withdrawn)".into();
    }
    let copies: Vec<String> = waited_on.iter().map(|(l, n)| format!("{l}@{n}")).collect();
    let mut s = format!("not granted: {}", comma_list(&copies));
    if !holders.is_empty() {
        s.push_str("; waiting for ");
        s.push_str(&comma_list(holders));
    }
    s
}

/// `a, b, c`, each as it displays (error messages name ids without Debug's quotes).
impl Error {
    /// Moves the nodes `heard_of` denies from "down" to "unknown".
    pub(crate) fn naming_unknown(self, heard_of: impl Fn(&NodeId) -> bool) -> Error {
        match self {
            Error::CannotServe {
                locks,
                nodes,
                mut unknown,
            } => {
                let (down, never): (Vec<NodeId>, Vec<NodeId>) =
                    nodes.into_iter().partition(|n| heard_of(n));
                unknown.extend(never);
                Error::CannotServe {
                    locks,
                    nodes: down,
                    unknown,
                }
            }
            other => other,
        }
    }
}

/// Which nodes could not serve, and why.
fn unserved(down: &[NodeId], unknown: &[NodeId]) -> String {
    const DOWN: &str = "down, not connected or refused them";
    const UNKNOWN: &str = "unknown to this node (never connected: misspelt, or not in the cluster)";
    match (down.is_empty(), unknown.is_empty()) {
        (_, true) => nodes_are(down, DOWN),
        (true, false) => nodes_are(unknown, UNKNOWN),
        (false, false) => format!("{}; {}", nodes_are(down, DOWN), nodes_are(unknown, UNKNOWN)),
    }
}

/// `node a is ...` or `nodes a, b are ...`.
fn nodes_are(nodes: &[NodeId], what: &str) -> String {
    let (noun, verb) = if nodes.len() == 1 {
        ("node", "is")
    } else {
        ("nodes", "are")
    };
    format!("{noun} {} {verb} {what}", comma_list(nodes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::lock_id;

    #[test]
    fn messages_name_ids_without_debug_quotes() {
        let zz = NodeId::new("zz").unwrap();
        let e = Error::CannotServe {
            locks: vec![lock_id!["s7"]],
            nodes: vec![zz.clone()],
            unknown: Vec::new(),
        };
        let shown = e.to_string();
        assert!(!shown.contains('"'), "{shown}");
        assert!(shown.contains(&format!("node {zz} is down")), "{shown}");
    }

    #[test]
    fn a_node_never_heard_of_is_unknown_not_down() {
        let (a, zz) = (NodeId::new("a").unwrap(), NodeId::new("zz").unwrap());
        let e = Error::CannotServe {
            locks: vec![lock_id!["s7"]],
            nodes: vec![a.clone(), zz.clone()],
            unknown: Vec::new(),
        }
        .naming_unknown(|n| *n == a);
        let Error::CannotServe { nodes, unknown, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!((nodes, unknown), (&vec![a.clone()], &vec![zz.clone()]));
        assert_eq!(
            e.to_string(),
            "cannot serve the requests on [s7]: node a is down, not connected or refused them; \
             node zz is unknown to this node (never connected: misspelt, or not in the cluster)"
        );
    }
}
