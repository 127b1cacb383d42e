//! The wire side of the API: a `locks.v1` request's fields checked and parsed into what
//! `locks_agent::Transaction` takes ([`parse_lock`] into a [`WireLock`], [`lock_id`]), and what
//! a transaction reports written as `locks.v1` messages ([`grant`], [`loss`], [`status`],
//! [`deadlock`], [`locked`], [`loss_cause`]). Pure functions, but for the one place a parsed
//! `Lock` request becomes its transaction call ([`WireLock::call`], [`WireLock::queue`]), so
//! that every option of a lock call is read and passed on in this file alone. A request refused
//! (a session's, or an election's in `election.rs`) is a [`WireRefusal`], which says what was
//! wrong and carries the gRPC code the answer has.
//!
//! The types are named for the wire so that each name means one thing in the workspace: the
//! agent actor's `LockCall` message, the agent core's answers
//! (`locks_agent::state_machine::Answer`) and a peer handshake's refusals
//! (`locks_server::Refusal`) are other things.

use crate::limits::Limits;
use crate::pb;
use locks_agent::{
    Deadlock, Error as AgentError, GrantedLock, Locked, LossCause, LostLock, Req, RequestError,
    Transaction, TransactionStatus,
};
use locks_core::proto::Rejection;
use locks_core::{Key, LockId, Mode, NodeId};
use tonic::Code;

/// A request from the wire refused: the code of its `Error` event and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireRefusal {
    /// The gRPC code.
    pub code: Code,
    /// For a person.
    pub message: String,
}

impl WireRefusal {
    /// A refusal with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> WireRefusal {
        WireRefusal {
            code,
            message: message.into(),
        }
    }

    fn invalid(message: impl Into<String>) -> WireRefusal {
        WireRefusal::new(Code::InvalidArgument, message)
    }

    /// The `Error` event of this refusal, answering request `request_id`.
    pub fn event(&self, request_id: u64) -> pb::SessionEvent {
        event(
            request_id,
            pb::session_event::Kind::Error(pb::Error {
                code: self.code as i32,
                message: self.message.clone(),
            }),
        )
    }
}

/// A `Lock` request from the wire, checked and parsed: what `Transaction::lock_on` takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireLock {
    /// The lock.
    pub lock: LockId,
    /// The mode.
    pub mode: Mode,
    /// The nodes (the session's node when the request named none).
    pub nodes: Vec<NodeId>,
    /// The requirement.
    pub req: Req,
    /// The wait bound in milliseconds, if any.
    pub wait_ms: Option<u64>,
}

impl WireLock {
    /// The transaction's call for a `Lock` request: [`Transaction::lock_on`] with the request's
    /// options. Every option a request carries is read by [`parse_lock`] and passed on here (or
    /// in [`WireLock::queue`]): the session runs the call and knows none of them but the wait
    /// bound, which it applies itself.
    pub fn call(
        &self,
        txn: &Transaction,
    ) -> impl Future<Output = Result<Locked, AgentError>> + Send + 'static {
        txn.lock_on(self.lock.clone(), self.mode, &self.nodes, self.req)
    }

    /// The transaction's call for a `LockNowait` request: [`Transaction::lock_nowait_on`] with
    /// the request's options.
    pub async fn queue(&self, txn: &Transaction) -> Result<(), AgentError> {
        txn.lock_nowait_on(self.lock.clone(), self.mode, &self.nodes, self.req)
            .await
    }
}

/// Parses a lock id: at least one key, within the limits' key count and total length.
pub fn lock_id(keys: &[String], limits: &Limits) -> Result<LockId, WireRefusal> {
    if keys.is_empty() {
        return Err(WireRefusal::invalid("malformed lock id: it has no keys"));
    }
    if keys.len() > limits.max_id_keys {
        return Err(WireRefusal::invalid(format!(
            "malformed lock id: {} keys, at most {} allowed",
            keys.len(),
            limits.max_id_keys
        )));
    }
    let bytes: usize = keys.iter().map(String::len).sum();
    if bytes > limits.max_id_bytes {
        return Err(WireRefusal::invalid(format!(
            "malformed lock id: {bytes} bytes of keys, at most {} allowed",
            limits.max_id_bytes
        )));
    }
    if keys.iter().any(String::is_empty) {
        return Err(WireRefusal::invalid("malformed lock id: an empty key"));
    }
    LockId::new(keys.iter().map(|k| Key::from(k.as_str())))
        .map_err(|e| WireRefusal::invalid(format!("malformed lock id: {e}")))
}

/// Parses a lock request. `me` is the session's node; `known` says whether a node name is one
/// the node knows (a node it reaches or has reached).
pub fn parse_lock(
    lock: &pb::Lock,
    me: &NodeId,
    known: impl Fn(&NodeId) -> bool,
    limits: &Limits,
) -> Result<WireLock, WireRefusal> {
    let id = lock_id(&lock.id, limits)?;
    let mode = lock
        .mode
        .parse::<Mode>()
        .map_err(|_| WireRefusal::invalid(format!("unknown mode {:?}", lock.mode)))?;
    if lock.nodes.len() > limits.max_nodes {
        return Err(WireRefusal::invalid(format!(
            "{} nodes named, at most {} allowed",
            lock.nodes.len(),
            limits.max_nodes
        )));
    }
    let mut nodes = Vec::with_capacity(lock.nodes.len().max(1));
    for name in &lock.nodes {
        let node = NodeId::new(name.as_str())
            .map_err(|e| WireRefusal::invalid(format!("bad node name {name:?}: {e}")))?;
        if node != *me && !known(&node) {
            return Err(WireRefusal::new(
                Code::NotFound,
                format!("unknown node {name:?}: node {me} has never reached it"),
            ));
        }
        if !nodes.contains(&node) {
            nodes.push(node);
        }
    }
    if nodes.is_empty() {
        nodes.push(me.clone());
    }
    let req = match pb::Requirement::try_from(lock.requirement) {
        Ok(pb::Requirement::All) => Req::All,
        Ok(pb::Requirement::Any) => Req::Any,
        Ok(pb::Requirement::Majority) => Req::Majority,
        Ok(pb::Requirement::AllAlive) => Req::AllAlive,
        Ok(pb::Requirement::MajorityAlive) => Req::MajorityAlive,
        Err(_) => {
            return Err(WireRefusal::invalid(format!(
                "unknown requirement {}",
                lock.requirement
            )));
        }
    };
    Ok(WireLock {
        lock: id,
        mode,
        nodes,
        req,
        wait_ms: lock.wait_ms,
    })
}

/// The keys of `lock` as strings.
pub fn keys(lock: &LockId) -> Vec<String> {
    lock.keys().iter().map(Key::to_string).collect()
}

/// A session event.
pub fn event(request_id: u64, kind: pb::session_event::Kind) -> pb::SessionEvent {
    pb::SessionEvent {
        request_id,
        kind: Some(kind),
    }
}

/// A grant on the wire.
pub fn grant(g: &GrantedLock) -> pb::Grant {
    pb::Grant {
        id: keys(&g.lock),
        mode: g.mode.to_string(),
        tokens: g
            .nodes
            .iter()
            .map(|(node, version)| pb::Token {
                node: node.to_string(),
                version: *version,
            })
            .collect(),
    }
}

/// The `locks.v1` value of a loss cause: the one named `LOSS_CAUSE_` and the cause's name in
/// capitals (`node-down` is `LOSS_CAUSE_NODE_DOWN`), so that a new `LossCause` needs only its
/// value in the proto. A cause the proto does not name is sent as unspecified (a test checks
/// that every cause has its value).
pub fn loss_cause(cause: LossCause) -> pb::LossCause {
    let name = format!(
        "LOSS_CAUSE_{}",
        cause.name().to_ascii_uppercase().replace('-', "_")
    );
    pb::LossCause::from_str_name(&name).unwrap_or(pb::LossCause::Unspecified)
}

/// A loss on the wire.
pub fn loss(l: &LostLock) -> pb::Loss {
    let cause = loss_cause(l.cause);
    pb::Loss {
        id: keys(&l.lock),
        mode: l.mode.to_string(),
        nodes: l.nodes.iter().map(NodeId::to_string).collect(),
        cause: cause as i32,
    }
}

/// A status on the wire; `deadlocks` counts the deadlocks the session has heard of.
pub fn status(s: &TransactionStatus, deadlocks: usize) -> pb::Status {
    let (status, cannot_serve, cannot_serve_nodes) = match s {
        TransactionStatus::NoLocks => (pb::TransactionStatus::NoLocks, vec![], vec![]),
        TransactionStatus::Waiting => (pb::TransactionStatus::Waiting, vec![], vec![]),
        TransactionStatus::HaveAllLocks { .. } => {
            (pb::TransactionStatus::HaveAllLocks, vec![], vec![])
        }
        TransactionStatus::CannotServe { locks, nodes } => (
            pb::TransactionStatus::CannotServe,
            locks.iter().map(|l| pb::LockId { id: keys(l) }).collect(),
            nodes.iter().map(NodeId::to_string).collect(),
        ),
    };
    pb::Status {
        status: status as i32,
        cannot_serve,
        cannot_serve_nodes,
        deadlocks: u32::try_from(deadlocks).unwrap_or(u32::MAX),
    }
}

/// A deadlock resolved, on the wire, as seen by the agent named `me`.
pub fn deadlock(d: &Deadlock, me: &str) -> pb::DeadlockResolved {
    let victim = d.victim.to_string();
    pb::DeadlockResolved {
        surrendered_by_this_session: victim == me,
        victim,
        id: keys(&d.lock),
        node: d.node.to_string(),
    }
}

/// The answer to a `lock` call: the grant, the locks of the deadlocks resolved so far, and
/// those of them this session (agent `me`) surrendered.
pub fn locked(locked: &Locked, me: &str) -> pb::Locked {
    let ids = |locks: Vec<LockId>| locks.iter().map(|l| pb::LockId { id: keys(l) }).collect();
    let mut surrendered: Vec<LockId> = locked
        .deadlocks
        .iter()
        .filter(|d| d.victim.to_string() == me)
        .map(|d| d.lock.clone())
        .collect();
    surrendered.sort();
    surrendered.dedup();
    pb::Locked {
        grant: Some(grant(&locked.granted)),
        deadlocks: ids(locked.deadlock_locks()),
        surrendered: ids(surrendered),
    }
}

/// The refusal for a failed transaction call.
pub fn agent_error(e: &AgentError) -> WireRefusal {
    let code = match e {
        AgentError::Deadlock { .. } => Code::Aborted,
        AgentError::CannotServe { .. } => Code::FailedPrecondition,
        AgentError::Request(RequestError::Refused {
            reason: Rejection::QuotaExceeded { .. },
            ..
        }) => Code::ResourceExhausted,
        AgentError::Request(_) => Code::InvalidArgument,
        AgentError::Cancelled { .. } => Code::Cancelled,
        AgentError::TimedOut { .. } => Code::DeadlineExceeded,
        AgentError::Ended | AgentError::Node(_) => Code::Unavailable,
    };
    WireRefusal::new(code, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::lock_id;

    fn me() -> NodeId {
        NodeId::new("a").unwrap()
    }

    fn request(id: &[&str], mode: &str, nodes: &[&str], requirement: i32) -> pb::Lock {
        pb::Lock {
            id: id.iter().map(|s| s.to_string()).collect(),
            mode: mode.to_owned(),
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            requirement,
            wait_ms: None,
        }
    }

    fn known(n: &NodeId) -> bool {
        n.as_str() == "b" || n.as_str() == "c"
    }

    #[test]
    fn a_good_request_parses_with_the_sessions_node_by_default() {
        let limits = Limits::default();
        let call = parse_lock(&request(&["db", "x"], "x", &[], 0), &me(), known, &limits).unwrap();
        assert_eq!(call.lock, lock_id!["db", "x"]);
        assert_eq!(call.mode, Mode::X);
        assert_eq!(call.nodes, vec![me()]);
        assert_eq!(call.req, Req::All);
        let majority = request(&["db"], "read", &["a", "b", "c", "b"], 2);
        let call = parse_lock(&majority, &me(), known, &limits).unwrap();
        assert_eq!(call.mode, Mode::S);
        assert_eq!(call.nodes.len(), 3, "a node named twice counts once");
        assert_eq!(call.req, Req::Majority);
    }

    #[test]
    fn bad_requests_are_refused_saying_what_was_wrong() {
        let limits = Limits::default();
        let refuse = |r: pb::Lock| parse_lock(&r, &me(), known, &limits).unwrap_err();
        let e = refuse(request(&["db"], "Q", &[], 0));
        assert_eq!(e.code, Code::InvalidArgument);
        assert!(e.message.contains("unknown mode \"Q\""), "{}", e.message);
        let e = refuse(request(&[], "X", &[], 0));
        assert!(e.message.contains("no keys"), "{}", e.message);
        let e = refuse(request(&["db", ""], "X", &[], 0));
        assert!(e.message.contains("empty key"), "{}", e.message);
        let e = refuse(request(&["db"], "X", &["z"], 0));
        assert_eq!(e.code, Code::NotFound);
        assert!(e.message.contains("unknown node \"z\""), "{}", e.message);
        let e = refuse(request(&["db"], "X", &["bad name!"], 0));
        assert_eq!(e.code, Code::InvalidArgument);
        let e = refuse(request(&["db"], "X", &[], 9));
        assert!(e.message.contains("unknown requirement 9"), "{}", e.message);
        let long: Vec<String> = (0..limits.max_id_keys + 1).map(|i| i.to_string()).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        let e = refuse(request(&long, "X", &[], 0));
        assert!(e.message.contains("keys, at most"), "{}", e.message);
        let big = "k".repeat(limits.max_id_bytes + 1);
        let e = refuse(request(&[&big], "X", &[], 0));
        assert!(e.message.contains("bytes of keys"), "{}", e.message);
    }

    /// A new `LossCause` fails here until the proto has its value (by name), rather than
    /// being sent as unspecified.
    #[test]
    fn every_loss_cause_has_its_own_value_on_the_wire() {
        let mut seen = Vec::new();
        for cause in LossCause::ALL {
            let wire = loss_cause(cause);
            assert_ne!(
                wire,
                pb::LossCause::Unspecified,
                "{cause} has no locks.v1 value"
            );
            assert!(!seen.contains(&wire), "{cause} shares {wire:?}");
            seen.push(wire);
        }
        assert_eq!(loss_cause(LossCause::NodeDown), pb::LossCause::NodeDown);
        assert_eq!(loss_cause(LossCause::Revoked), pb::LossCause::Revoked);
    }

    #[test]
    fn grants_and_losses_carry_their_nodes() {
        let g = GrantedLock {
            lock: lock_id!["db", "x"],
            mode: Mode::X,
            nodes: [(me(), 7u64)].into_iter().collect(),
        };
        let wire = grant(&g);
        assert_eq!(wire.id, vec!["db", "x"]);
        assert_eq!(wire.mode, "X");
        assert_eq!(wire.tokens[0].version, 7);
        let l = LostLock {
            lock: lock_id!["db", "x"],
            mode: Mode::X,
            nodes: vec![me()],
            cause: LossCause::Surrendered,
        };
        assert_eq!(loss(&l).cause, pb::LossCause::Surrendered as i32);
    }
}
