//! What an experiment records: the beliefs of the clients, the fenced writes, and the driver's
//! faults, each stamped with `CLOCK_MONOTONIC`; and the parsing of the node lines they come
//! from.
//!
//! The history is the checker's only input ([`crate::checker`]); the driver appends to it and
//! never reads it back. Times of node lines are the node's own stamps (`node --mono`); times of
//! the driver's actions are taken just before it acts (before `end` is written, before a signal
//! is sent): nothing can react to an action before its stamp, so a belief that ends there ends
//! no later than it really did.

use crate::clock::Ns;
use locks_core::NodeId;

/// The fencing versions of a grant: each granting node with the lock's version there.
pub type Tokens = Vec<(NodeId, u64)>;

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When, on `CLOCK_MONOTONIC`.
    pub t: Ns,
    /// What.
    pub what: What,
}

/// The kinds of recorded events. `client` is the index of the node whose client acts (each node
/// runs one client); `txn` names a transaction, unique within an experiment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// The node told `txn` that it holds the lock exclusively (a belief starts).
    Granted {
        /// The client.
        client: usize,
        /// The transaction.
        txn: String,
        /// The grant's fencing versions.
        tokens: Tokens,
    },
    /// The node told `txn` that it lost the lock (a belief ends).
    Lost {
        /// The transaction.
        txn: String,
        /// The cause the node gave (`node-down`, `lease-expired`, ...).
        cause: String,
    },
    /// The driver sent `end` for `txn` (a belief ends).
    EndSent {
        /// The transaction.
        txn: String,
    },
    /// `txn` wrote to the fenced register with `tokens`, and the fence decided.
    Write {
        /// The transaction.
        txn: String,
        /// The tokens the write carried.
        tokens: Tokens,
        /// Whether the fence accepted it.
        accepted: bool,
    },
    /// The process of `client`'s node was stopped (SIGSTOP) or killed (SIGKILL): its beliefs
    /// end here, since it can act on none of them from now on; a resumed process acts only by
    /// its late, fenced write.
    Halted {
        /// The client.
        client: usize,
    },
    /// A fault was injected.
    Fault {
        /// Its name (`oneway`, `isolate`, `flap`, `pause`, `kill`).
        kind: String,
        /// The node it hit.
        node: usize,
        /// The transaction that held the lock on that node then, if any.
        holder: Option<String>,
        /// Whether the fault takes the holder away from the others for longer than the
        /// configured delays (so the lock must move to another client within them).
        removes_holder: bool,
    },
    /// Every fault was healed (links back, routes gone, processes running).
    Healed,
    /// The process of `node` was started again (a new incarnation: its tokens from here on
    /// must be above every token it handed out before).
    Restarted {
        /// The node.
        node: usize,
    },
}

/// One recorded event of a leader experiment (gdict replicas electing a leader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderEvent {
    /// When, on `CLOCK_MONOTONIC`.
    pub t: Ns,
    /// What.
    pub what: LeaderWhat,
}

/// The kinds of events of a leader experiment; `node` is a node's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderWhat {
    /// The node's replica follows the leader on node `leader` (itself: it believes it leads),
    /// or no leader (`None`).
    Follows {
        /// The node.
        node: usize,
        /// The leader's node, if any.
        leader: Option<usize>,
    },
    /// The node's process was stopped or killed: it believes nothing from here on.
    Halted {
        /// The node.
        node: usize,
    },
    /// The node's stopped process was continued (its next `leader` line says what it believes).
    Resumed {
        /// The node.
        node: usize,
    },
    /// The write of `value` under `key` was confirmed to the driver (`stored`).
    Confirmed {
        /// The key.
        key: String,
        /// The value written.
        value: i64,
    },
    /// At the end, the node's replica had `value` under `key`.
    Read {
        /// The node.
        node: usize,
        /// The key.
        key: String,
        /// The value read.
        value: Option<i64>,
    },
    /// A fault was injected against `node`.
    Fault {
        /// Its name.
        kind: String,
        /// The node it hit.
        node: usize,
    },
    /// Every fault was healed.
    Healed,
    /// The node's replica said it leads with a term of this epoch.
    Leads {
        /// The node.
        node: usize,
        /// The term's epoch.
        epoch: u64,
    },
    /// Every node's process was killed and started again: every term from here on is a new
    /// leadership, whose epoch must be above every epoch before.
    RestartedAll,
}

/// A line of a node with `--mono`: the time, then the line.
pub fn split_mono(line: &str) -> Option<(Ns, &str)> {
    let (t, rest) = line.split_once(' ')?;
    Some((t.parse().ok()?, rest))
}

/// The tokens of a `granted` line: `n1@17,n2@9` (`-` for none).
pub fn parse_tokens(list: &str) -> Result<Tokens, String> {
    if list == "-" {
        return Ok(Vec::new());
    }
    list.split(',')
        .map(|item| {
            let (node, version) = item
                .split_once('@')
                .ok_or_else(|| format!("token without @: {item}"))?;
            let node = NodeId::new(node).map_err(|e| format!("bad node in {item}: {e}"))?;
            let version = version
                .parse::<u64>()
                .map_err(|e| format!("bad version in {item}: {e}"))?;
            Ok((node, version))
        })
        .collect()
}

/// The node lines the driver acts on (after the `--mono` time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeLine {
    /// `listening <addr>`
    Listening,
    /// `up <node>`
    Up(String),
    /// `down <node>`
    Down(String),
    /// `granted <txn> <lock> <tokens>`
    Granted {
        /// The transaction.
        txn: String,
        /// The tokens.
        tokens: Tokens,
    },
    /// `lost <txn> <lock> <nodes> <cause>`
    Lost {
        /// The transaction.
        txn: String,
        /// The cause.
        cause: String,
    },
    /// `error <txn> <message>`
    Error {
        /// The transaction.
        txn: String,
    },
    /// `ended <txn>`
    Ended {
        /// The transaction.
        txn: String,
    },
    /// `joined <d>`
    Joined,
    /// `leader <d> <node> <epoch> [leading|following]` or `leader <d> none`: whom the node's
    /// replica follows (a change line), and, in the answer to `leader <d>`, whether it may act
    /// as leader at that instant.
    Leader {
        /// The leader's node and the term's epoch, if any.
        term: Option<(String, u64)>,
        /// `Some(true)` for `leading`, `Some(false)` for `following` (answers only).
        leading: Option<bool>,
    },
    /// `stored <d> <key>`
    Stored {
        /// The key.
        key: String,
    },
    /// `value <d> <key> <int>|none`
    Value {
        /// The key.
        key: String,
        /// Its value on that replica.
        value: Option<i64>,
    },
    /// Anything else (other answers, later additions).
    Other,
}

/// Parses a node line (without its time).
pub fn parse_line(line: &str) -> Result<NodeLine, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    Ok(match words.as_slice() {
        ["listening", _] => NodeLine::Listening,
        ["up", n] => NodeLine::Up((*n).to_owned()),
        ["down", n] => NodeLine::Down((*n).to_owned()),
        ["granted", txn, _lock, tokens] => NodeLine::Granted {
            txn: (*txn).to_owned(),
            tokens: parse_tokens(tokens)?,
        },
        ["lost", txn, _lock, _nodes, cause, ..] => NodeLine::Lost {
            txn: (*txn).to_owned(),
            cause: (*cause).to_owned(),
        },
        ["error", txn, ..] => NodeLine::Error {
            txn: (*txn).to_owned(),
        },
        ["ended", txn] => NodeLine::Ended {
            txn: (*txn).to_owned(),
        },
        ["joined", _] => NodeLine::Joined,
        ["leader", _, "none"] => NodeLine::Leader {
            term: None,
            leading: None,
        },
        ["leader", _, node, epoch, rest @ ..] if rest.len() <= 1 => NodeLine::Leader {
            term: Some((
                (*node).to_owned(),
                epoch
                    .parse()
                    .map_err(|e| format!("bad epoch {epoch}: {e}"))?,
            )),
            leading: match rest {
                [] => None,
                ["leading"] => Some(true),
                ["following"] => Some(false),
                [other, ..] => return Err(format!("bad leader state {other}")),
            },
        },
        ["stored", _, key] => NodeLine::Stored {
            key: (*key).to_owned(),
        },
        ["value", _, key, value] => NodeLine::Value {
            key: (*key).to_owned(),
            value: match *value {
                "none" => None,
                v => Some(v.parse().map_err(|e| format!("bad value {v}: {e}"))?),
            },
        },
        _ => NodeLine::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lines_parse() {
        assert_eq!(
            split_mono("123 granted t1 r/x n1@5,n2@7"),
            Some((123, "granted t1 r/x n1@5,n2@7"))
        );
        assert_eq!(split_mono("granted t1"), None);
        assert_eq!(
            parse_line("granted t1 r/x n1@5,n2@7"),
            Ok(NodeLine::Granted {
                txn: "t1".into(),
                tokens: vec![
                    (NodeId::new("n1").unwrap(), 5),
                    (NodeId::new("n2").unwrap(), 7)
                ]
            })
        );
        assert_eq!(
            parse_line("lost t1 r/x n1,n2 lease-expired"),
            Ok(NodeLine::Lost {
                txn: "t1".into(),
                cause: "lease-expired".into()
            })
        );
        assert_eq!(parse_line("down n3"), Ok(NodeLine::Down("n3".into())));
        assert_eq!(
            parse_line("leader d n2 17"),
            Ok(NodeLine::Leader {
                term: Some(("n2".into(), 17)),
                leading: None
            })
        );
        assert_eq!(
            parse_line("leader d n2 17 following"),
            Ok(NodeLine::Leader {
                term: Some(("n2".into(), 17)),
                leading: Some(false)
            })
        );
        assert!(parse_line("leader d n2 17 maybe").is_err());
        assert_eq!(
            parse_line("leader d none"),
            Ok(NodeLine::Leader {
                term: None,
                leading: None
            })
        );
        assert_eq!(
            parse_line("value d k3 3"),
            Ok(NodeLine::Value {
                key: "k3".into(),
                value: Some(3)
            })
        );
        assert_eq!(
            parse_line("value d k3 none"),
            Ok(NodeLine::Value {
                key: "k3".into(),
                value: None
            })
        );
        assert_eq!(
            parse_line("stored d k3"),
            Ok(NodeLine::Stored { key: "k3".into() })
        );
        assert!(parse_line("leader d n2 x").is_err());
        assert_eq!(parse_line("nodes n1 n2"), Ok(NodeLine::Other));
        assert!(parse_line("granted t1 r/x n1@x").is_err());
        assert!(parse_line("granted t1 r/x n1").is_err());
    }
}
