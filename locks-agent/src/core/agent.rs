//! [`AgentCore`]: one transaction's agent as a pure state machine.
//!
//! ```text
//!  client calls ──request/unlock/convert/end──▶ AgentCore ──ToServer──▶ lock servers
//!  lock servers ──Notice/Rejected──▶ receive()           ──ToAgent───▶ other agents
//!  other agents ──Forward/Surrendered──▶ receive()       ──StatusChanged/Abort──▶ the actor
//!  node monitor ──node_down/node_up──▶                   ──Reply──▶ waiting callers
//!  the executor ──unreachable──▶
//!  after a burst of inputs ──settle()──▶ status, deadlock analysis, forwarding
//! ```
//!
//! The arrows on the right are [`AgentEffect`]s. The actor feeds every input in, carries out
//! the effects in order, and calls
//! [`AgentCore::settle`] once after each burst of inputs — messages, client calls and node
//! events alike — before it waits again (the Erlang original's "settle then analyse"
//! batching). Client calls and node events also settle the status
//! themselves, so [`AgentCore::status`] is current right after them; the deadlock analysis and
//! the forwarding happen only in `settle`.
//!
//! **Deadlock resolution** (the Erlang original's analysis and forwarding, without its holes):
//! - after new knowledge, an agent that waits somewhere builds the wait-for graph from every
//!   view it knows; if it is the largest agent of a cycle, it sends a probe round one cycle
//!   through itself, which every waiter of the cycle confirms from first-hand knowledge; when
//!   it comes back confirmed, the victim surrenders the lock of the edge into it (or aborts,
//!   with `abort_on_deadlock`, when that would take away a lock the client was told it holds
//!   and still needs), tells the other agents of the cycle, and treats the requests on that
//!   lock and its descendants on that node as pending again (`agent/probe.rs`). Forwarded
//!   views go stale silently; the probe is what keeps the victim from acting on them;
//! - it then forwards every view it knows that has waiters to every agent it waits for
//!   directly, once per `(agent, lock, node, version)`. Knowledge thus flows along wait-for
//!   edges all the way round every cycle, so its largest agent always sees it whole, whatever
//!   the ids and the order of messages (`agent/resolve.rs`). An agent whose requests are all met
//!   but that is still queued on a copy (an `Any` request) forwards too: agents behind it count
//!   on it. (The original forwards only to larger holders and misses cycles.)
//! - a request that must be granted on several nodes and waits on the first of them (its gate)
//!   leaves its other copies until it holds the gate, so that a herd over the same nodes
//!   queues on one copy instead of deadlocking over all of them (`agent/gate.rs`);
//! - at most one surrender is outstanding at a time: the next analysis waits for the server's
//!   answer to it (applied, or refused as stale with a fresh view).

use super::error::{RequestError, SurrenderRefusal};
use super::graph::ViewGraph;
use super::knowledge::{Knowledge, News};
use super::requests::LockRequest;
use super::status::{Deadlock, GrantedLock, LossCause, LostLock, TransactionStatus};
use crate::options::{Options, Req};
use have_all::Stale;
use locks_core::proto::{AgentMessage, EntryState, Rejection, ServerRequest};
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId};
use smallvec::SmallVec;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// Something the actor must do on behalf of the core, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentEffect {
    /// Send `request` to the lock server of `node`; if it cannot be reached, tell the core
    /// ([`AgentCore::unreachable`]).
    ToServer {
        /// The node.
        node: NodeId,
        /// The request.
        request: ServerRequest,
    },
    /// Send `msg` to another agent.
    ToAgent {
        /// The recipient.
        to: AgentId,
        /// The message.
        msg: AgentMessage,
    },
    /// The transaction status changed (waiting callers are answered by [`AgentEffect::Reply`]).
    StatusChanged(TransactionStatus),
    /// A lock is claimed: the client is told now that it holds it, with these versions (when
    /// the transaction has all its locks; again after a loss or a conversion up).
    Granted(GrantedLock),
    /// A claimed lock is no longer held in the mode the client was told.
    Lost(LostLock),
    /// This agent is the victim of a deadlock on `lock` at `node`, which the client was told it
    /// holds, and the transaction was started with `abort_on_deadlock` (every claimed lock was
    /// reported [`AgentEffect::Lost`] and every waiting caller failed just before): call
    /// [`AgentCore::end`] to release everything. The core accepts nothing but `end` from now on.
    Abort {
        /// The lock.
        lock: LockId,
        /// Its node.
        node: NodeId,
    },
    /// A lock server refused a request of this agent.
    Rejected {
        /// The server's node.
        node: NodeId,
        /// The lock named in the request.
        lock: LockId,
        /// Why.
        reason: Rejection,
    },
    /// A new view of a lock this agent watches ([`AgentCore::watch`]): pass it on to the
    /// client's watch streams. Views of one `(lock, node)` come in version order, each once.
    Watched {
        /// The node of the lock server.
        node: NodeId,
        /// The lock.
        lock: LockId,
        /// Its queue now (empty when the lock is free).
        view: std::sync::Arc<locks_core::proto::LockView>,
    },
    /// The server of `node` answered a surrender to a waiter ([`AgentCore::surrender_to`]):
    /// done (`refused` is `None`; the notices of the requeued entries follow or came with it)
    /// or not, and why.
    SurrenderAnswered {
        /// The lock.
        lock: LockId,
        /// The node.
        node: NodeId,
        /// The agent it was to be surrendered to.
        to: AgentId,
        /// Why it was not done, if it was not.
        refused: Option<SurrenderRefusal>,
    },
    /// Answer the waiting caller `call` (`callers.rs`): it is not waiting any more.
    Reply {
        /// The caller.
        call: CallId,
        /// The answer.
        result: Result<Answer, CallFailure>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    Aborted,
    Ended,
}

/// One transaction's agent: its requests, what it knows of the lock queues, and the decisions
/// of the deadlock algorithm. See the module documentation.
#[derive(Clone, Debug)]
pub struct AgentCore {
    id: AgentId,
    modes: ModeTable,
    options: Options,
    requests: BTreeMap<LockId, LockRequest>,
    knowledge: Knowledge,
    down: BTreeSet<NodeId>,
    /// Why each node in `down` went down.
    down_causes: BTreeMap<NodeId, LossCause>,
    /// Claimed requests found no longer held, to report at the end of this status refresh.
    losses: Vec<LockId>,
    /// The copies of requests a lock server refused, and why (a waiting caller is told).
    rejected: BTreeMap<(LockId, NodeId), Rejection>,
    contacted: BTreeSet<NodeId>,
    status: TransactionStatus,
    /// The requests not held, as of the last settling.
    pending: BTreeSet<LockId>,
    /// The pending requests that can no longer be met, with the nodes that make it so.
    unservable: BTreeMap<LockId, Vec<NodeId>>,
    /// What the status must look at again.
    stale: Stale,
    /// Requests made since the transaction last had all its locks (not claimed yet).
    unclaimed: Vec<LockId>,
    /// New knowledge since the last analysis.
    dirty: bool,
    /// Probes received and not handled yet, and probes waiting for news (`probe.rs`).
    probes: probe::Probes,
    phase: Phase,
    /// The locks watched, with the newest view passed on (`watches.rs`).
    watches: watches::Watches,
    /// The surrenders to a waiter not answered yet (`surrender_to.rs`).
    surrendering: surrender_to::Surrendering,
    /// The `lock` and `await_all_locks` callers waiting (`callers.rs`).
    callers: callers::Callers,
    /// The requests that left their copies but the gate's (`gate.rs`).
    retreats: gate::Retreats,
    /// The copies a `TryLock` found busy, to ask for once the gate is held (`gate.rs`).
    busy: gate::Busy,
    /// The copies whose last request was a `TryLock`: only its answer can make one busy.
    trying: BTreeSet<(LockId, NodeId)>,
}

impl AgentCore {
    /// A new agent with no requests.
    pub fn new(id: AgentId, modes: ModeTable, options: Options) -> AgentCore {
        AgentCore {
            id,
            modes,
            options,
            requests: BTreeMap::new(),
            knowledge: Knowledge::default(),
            down: BTreeSet::new(),
            down_causes: BTreeMap::new(),
            losses: Vec::new(),
            rejected: BTreeMap::new(),
            contacted: BTreeSet::new(),
            status: TransactionStatus::NoLocks,
            pending: BTreeSet::new(),
            unservable: BTreeMap::new(),
            stale: Stale::default(),
            unclaimed: Vec::new(),
            dirty: false,
            probes: probe::Probes::default(),
            phase: Phase::Running,
            watches: watches::Watches::default(),
            surrendering: surrender_to::Surrendering::default(),
            callers: callers::Callers::default(),
            retreats: gate::Retreats::new(),
            busy: gate::Busy::new(),
            trying: BTreeSet::new(),
        }
    }

    /// The agent's id.
    pub fn id(&self) -> &AgentId {
        &self.id
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Changes the options (Erlang's `change_flag/3`); the status is settled again.
    pub fn set_options(&mut self, options: Options) -> Vec<AgentEffect> {
        self.options = options;
        self.mark_all();
        let mut out = Vec::new();
        if self.phase == Phase::Running {
            self.refresh_status(&mut out);
        }
        out
    }

    /// The transaction's status as of the last settling.
    pub fn status(&self) -> TransactionStatus {
        self.status.clone()
    }

    /// The transaction's status as of the last settling, borrowed.
    pub fn status_ref(&self) -> &TransactionStatus {
        &self.status
    }

    /// The requests, in lock id order.
    pub fn requests(&self) -> impl Iterator<Item = &LockRequest> {
        self.requests.values()
    }

    /// The request on `lock`, if any.
    pub fn request_on(&self, lock: &LockId) -> Option<&LockRequest> {
        self.requests.get(lock)
    }

    /// Every deadlock recorded so far, oldest first.
    pub fn deadlocks(&self) -> &[Deadlock] {
        self.knowledge.deadlocks()
    }

    /// The nodes currently known to be down.
    pub fn down_nodes(&self) -> impl Iterator<Item = &NodeId> {
        self.down.iter()
    }

    /// Whether the core still accepts inputs (it has neither aborted nor ended).
    pub fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// Asks for `lock` in `mode` on `nodes`, of which `req` must grant it.
    ///
    /// A lock not requested yet becomes a new request, sent to every listed node that is up.
    /// For a lock already requested: a mode the request covers changes nothing; a stronger one
    /// is an up-conversion (the request takes the group of both modes, sent to all its nodes);
    /// new nodes extend the request (sent to them only); the requirement becomes the stronger
    /// of the two, and two that do not compare are refused. Asking again for what is already
    /// asked is a no-op: no effects, and the status stays as it is, so a caller can be answered
    /// at once when the transaction has all its locks (the Erlang original's `lock/2` on a
    /// held lock hangs instead).
    ///
    /// Without `await_nodes`, a request whose requirement cannot be met because listed nodes
    /// are already known to be down fails at once, naming them.
    pub fn request(
        &mut self,
        lock: LockId,
        mode: Mode,
        nodes: &[NodeId],
        req: Req,
    ) -> Result<Vec<AgentEffect>, RequestError> {
        self.check_running()?;
        if !self.modes.contains(mode) {
            return Err(RequestError::ModeNotInTable(mode));
        }
        let mut nodes: SmallVec<[NodeId; 1]> = nodes.iter().cloned().collect();
        nodes.sort();
        nodes.dedup();
        if nodes.is_empty() {
            return Err(RequestError::NoNodes { lock });
        }
        let mut out = Vec::new();
        let (request, targets) = match self.requests.get(&lock) {
            None => {
                let r = LockRequest {
                    lock: lock.clone(),
                    mode,
                    nodes,
                    req,
                    claimed: None,
                };
                let targets = r.nodes.clone();
                (r, targets)
            }
            Some(old) => {
                let new_req =
                    old.req
                        .stronger(req)
                        .ok_or_else(|| RequestError::ConflictingRequirement {
                            lock: lock.clone(),
                            existing: old.req,
                            requested: req,
                        })?;
                let new_mode = if self.modes.covers(old.mode, mode) {
                    old.mode
                } else {
                    self.modes.group(mode, old.mode)
                };
                let mut all = old.nodes.clone();
                all.extend(nodes);
                all.sort();
                all.dedup();
                if new_req == old.req && new_mode == old.mode && all == old.nodes {
                    self.asked_again(&lock);
                    return Ok(out);
                }
                let targets = if new_mode != old.mode {
                    all.clone()
                } else {
                    all.iter()
                        .filter(|n| !old.nodes.contains(n))
                        .cloned()
                        .collect()
                };
                let r = LockRequest {
                    lock: lock.clone(),
                    mode: new_mode,
                    nodes: all,
                    req: new_req,
                    // An up-conversion keeps the claim: the client holds the weaker mode.
                    claimed: old.claimed,
                };
                (r, targets)
            }
        };
        if !self.options.await_nodes
            && let Some(nodes) = request.unservable_by(&self.down, |n| self.down.contains(n))
        {
            return Err(RequestError::NodesDown {
                lock,
                req: request.req,
                nodes,
            });
        }
        // A request that changes asks again where it retreated from first (`gate.rs`).
        self.return_through_gate(&lock, &mut out);
        if self.requests.contains_key(&lock) {
            self.asked_again(&lock);
        } else {
            self.rejected.retain(|(l, _), _| *l != lock);
        }
        // New, or a claimed one made stronger or wider: the client is told of the grant (again)
        // once it has all. (An unclaimed one is in the list already.)
        if self
            .requests
            .get(&lock)
            .is_none_or(|old| old.claimed.is_some())
        {
            self.unclaimed.push(lock.clone());
        }
        // A new request that may retreat asks plainly on its gate only, and tries the other
        // copies: a herd over the same nodes then queues on the gate alone (`gate.rs`).
        let gate = if self.requests.contains_key(&lock) {
            None
        } else {
            self.gate_of_request(&request)
        };
        for node in targets {
            if !self.down.contains(&node) {
                let (agent, lock, mode) = (self.id.clone(), lock.clone(), request.mode);
                let msg = if gate.as_ref().is_none_or(|g| *g == node) {
                    ServerRequest::Lock { agent, lock, mode }
                } else {
                    ServerRequest::TryLock { agent, lock, mode }
                };
                self.send(&mut out, node, msg);
            }
        }
        self.mark_request(&lock);
        self.requests.insert(lock, request);
        self.refresh_status(&mut out);
        Ok(out)
    }

    /// Releases a held lock or withdraws a pending request (beyond Erlang, which has neither):
    /// the request is removed, `Unlock` goes to its nodes, and the agent forgets its views of
    /// the lock, so the lock leaves its wait-for graph at once.
    pub fn unlock(&mut self, lock: &LockId) -> Result<Vec<AgentEffect>, RequestError> {
        self.check_running()?;
        let r = self
            .requests
            .remove(lock)
            .ok_or_else(|| RequestError::NoSuchRequest(lock.clone()))?;
        let mut out = Vec::new();
        // The copies a retreat left are unlocked already, and the busy ones have no entry of
        // this agent (`gate.rs`).
        let left = self.take_left(lock);
        for node in &r.nodes {
            if !self.down.contains(node) && !left.contains(node) {
                self.unlock_copy(lock, node, &mut out);
            }
            self.rejected.remove(&(lock.clone(), node.clone()));
            // A copy whose entry was gone already (taken back, or never granted) is not
            // answered again.
            self.forget_left(lock, node);
        }
        self.dirty = true;
        self.mark_request(lock);
        self.cancel_callers(lock, &mut out);
        self.refresh_status(&mut out);
        Ok(out)
    }

    /// Forgets the copies of `lock` and of its ancestors on `node` that the agent left for good
    /// (`knowledge/withdrawn.rs`): an ancestor's copy goes with the answer to the unlock of its
    /// last descendant, which the ancestor's own notice precedes.
    fn forget_left(&mut self, lock: &LockId, node: &NodeId) {
        if !self.asks_for(lock, node) {
            self.knowledge.forget_left(lock, node);
        }
        // Each ancestor on its own: one may be forgotten while a view keeps the lock's copy.
        for ancestor in lock.ancestors().rev() {
            if self.asks_for(&ancestor, node) {
                return;
            }
            self.knowledge.forget_left(&ancestor, node);
        }
    }

    /// How many copies the agent no longer asks for keeps it with nothing outstanding or kept
    /// of them: none once every answer of a server to it has come (the simulations' oracle that a
    /// session locking ever new ids keeps only what it holds).
    pub fn forgettable_copies(&self) -> usize {
        self.knowledge
            .forgettable_left(|lock, node| self.asks_for(lock, node))
    }

    /// Whether a request of this agent on `lock` or on a descendant of it names `node`: the
    /// agent asks for that copy, as the lock or as an ancestor of one. (Descendants follow
    /// their ancestor in lock id order.)
    fn asks_for(&self, lock: &LockId, node: &NodeId) -> bool {
        asks_for(&self.requests, lock, node)
    }

    /// Sends `Unlock` of `lock` to `node` (up), and counts no grant of that copy, nor the
    /// intention modes it gave the ancestors' copies, until the server's answer.
    pub(super) fn unlock_copy(&mut self, lock: &LockId, node: &NodeId, out: &mut Vec<AgentEffect>) {
        let msg = ServerRequest::Unlock {
            agent: self.id.clone(),
            lock: lock.clone(),
        };
        self.send(out, node.clone(), msg);
        // Until the server answers the unlock, no grant of the copy counts: one sent before
        // the unlock may still be on its way. (The answer always comes, after the notices
        // of the lock's ancestors in the same operation.)
        self.knowledge.unlock_sent(lock, node);
        // The entry stays while it is the ancestor of another request: the agent stays
        // on the copy. (Descendants follow their ancestor in lock id order.)
        let still_needed = self
            .requests
            .range::<LockId, _>((Bound::Excluded(lock), Bound::Unbounded))
            .map(|(_, o)| o)
            .take_while(|o| lock.is_ancestor_of(&o.lock))
            .any(|o| o.nodes.contains(node));
        if !still_needed {
            self.knowledge.withdrew(&self.id, lock, node);
        }
        self.cap_ancestors(lock, node);
        // Requests on descendants count this copy as their ancestor's entry.
        self.mark_tree(lock);
    }

    /// Takes in a message from a lock server or another agent. Knowledge is recorded; the
    /// status and the analysis wait for [`AgentCore::settle`]. Once the agent ended or aborted,
    /// nothing is taken in, and a probe goes back to its victim refuted.
    pub fn receive(&mut self, msg: AgentMessage) -> Vec<AgentEffect> {
        tracing::trace!(target: "lock_path", hop = 10, agent = %self.id, "taken in");
        let mut out = Vec::new();
        if self.phase != Phase::Running {
            if let AgentMessage::Probe(probe) = msg {
                self.bounce(probe, &mut out);
            }
            return out;
        }
        if self.on_surrender_answer(&msg, &mut out) {
            return out;
        }
        match msg {
            AgentMessage::Notice(n) => {
                // A late notice from a node marked down would bring back what was forgotten.
                if !self.down.contains(&n.node) {
                    let lock = n.lock.clone();
                    let gone = (n.state == EntryState::Absent).then(|| n.node.clone());
                    let news = self.knowledge.take_notice(&self.id, n);
                    // A copy left for good is forgotten: a session that locks ever new ids
                    // keeps what it holds, not every id it held (`knowledge/withdrawn.rs`).
                    if let Some(node) = gone {
                        self.forget_left(&lock, &node);
                    }
                    if news != News::Nothing {
                        self.dirty = true;
                        self.probes.news();
                        self.knowledge.clear_excuses();
                    }
                    if news == News::Entry {
                        // Whether the requests on `lock` and on its descendants are held may
                        // have changed. (A waiter on a hot lock is told of every change ahead of
                        // it, and its status need not be looked at again for those.)
                        self.mark_tree(&lock);
                    }
                }
            }
            AgentMessage::Forward {
                from,
                node,
                lock,
                view,
            } => {
                let asked = self.asks_for(&lock, &node);
                if from != self.id
                    && !self.down.contains(&node)
                    && self
                        .knowledge
                        .on_forward(&self.id, &lock, &node, &from, view, asked)
                {
                    self.knowledge.clear_excuses();
                    self.dirty = true;
                }
                if !asked {
                    // A view kept for the others' waits keeps its copy; one not kept leaves
                    // nothing behind.
                    self.forget_left(&lock, &node);
                }
            }
            AgentMessage::Surrendered { by, node, lock, .. } => {
                if self.knowledge.record_deadlock(Deadlock {
                    victim: by,
                    lock,
                    node,
                }) {
                    self.mark_status();
                }
                // A cycle this agent probed may be broken already: probe again if need be.
                if self.probes.news() {
                    self.dirty = true;
                }
            }
            AgentMessage::Rejected { node, lock, reason } => {
                // A refusal answers an unlock too: the copy may be left for good.
                let key = (lock.clone(), node.clone());
                self.on_rejected(node, lock, reason, &mut out);
                self.forget_left(&key.0, &key.1);
            }
            AgentMessage::Probe(probe) => self.take_probe(probe),
            AgentMessage::Watched { node, lock, view } => {
                self.on_watched(node, lock, view, &mut out);
            }
            // An agent never asks for a raise (a `locks-leader` member does, in its agent's
            // name, and takes the answer itself).
            AgentMessage::Raised { .. } => {}
        }
        out
    }

    /// Recomputes the status, takes the probes that came in (`probe.rs`) and, if the agent's
    /// knowledge changed and it waits somewhere, runs the deadlock analysis and forwards views
    /// to the agents this one waits for. Call once after each burst of inputs (messages, client
    /// calls, node events).
    ///
    /// An agent whose requests are all met still forwards while it is queued somewhere (an
    /// `Any` request granted on one node and queued on another): agents behind it count on the
    /// first of them blocked by a holder to pass the view on (`knowledge.rs`).
    pub fn settle(&mut self) -> Vec<AgentEffect> {
        let mut out = Vec::new();
        if self.phase != Phase::Running {
            return out;
        }
        self.refresh_status(&mut out);
        if self.move_through_gates(&mut out) {
            self.refresh_status(&mut out);
        }
        self.run_probes(&mut out);
        if self.phase != Phase::Running {
            return out;
        }
        if self.dirty
            && (!self.status.have_all_locks() || self.knowledge.pending_somewhere(&self.id))
            && !self.gate_unanswered()
        {
            self.dirty = false;
            self.analyse_and_forward(&mut out);
        }
        self.answer_callers(&mut out);
        out
    }

    /// The wait-for graph as this agent sees it now.
    pub fn wait_for_graph(&self) -> ViewGraph {
        ViewGraph::build(
            &self.modes,
            self.knowledge.views().map(|(l, n, v)| (l, n, &**v)),
        )
    }

    /// The wait-for graph as this agent sees it now, in Graphviz DOT (for debugging).
    pub fn wait_for_graph_dot(&self) -> String {
        self.wait_for_graph().to_dot()
    }

    fn check_running(&self) -> Result<(), RequestError> {
        match self.phase {
            Phase::Running => Ok(()),
            Phase::Aborted => Err(RequestError::Aborted),
            Phase::Ended => Err(RequestError::Ended),
        }
    }

    fn send(&mut self, out: &mut Vec<AgentEffect>, node: NodeId, request: ServerRequest) {
        match &request {
            ServerRequest::TryLock { lock, .. } => {
                self.trying.insert((lock.clone(), node.clone()));
            }
            ServerRequest::Lock { lock, .. }
            | ServerRequest::Unlock { lock, .. }
            | ServerRequest::Convert { lock, .. }
                if !self.trying.is_empty() =>
            {
                self.trying.remove(&(lock.clone(), node.clone()));
            }
            _ => {}
        }
        self.contacted.insert(node.clone());
        out.push(AgentEffect::ToServer { node, request });
    }
}

mod callers;
mod claims;
mod convert;
mod gate;
mod have_all;
mod nodes;
mod probe;
mod resolve;
mod surrender_to;
#[cfg(test)]
mod tests;
mod time_out;
mod watches;

pub use callers::{Answer, CallFailure, CallId};
pub(crate) use have_all::status_without_agent;
pub use locks_server::lease::Lease;

/// Whether a request of `requests` on `lock` or on a descendant of it names `node`
/// ([`AgentCore::asks_for`]).
fn asks_for(requests: &BTreeMap<LockId, LockRequest>, lock: &LockId, node: &NodeId) -> bool {
    requests
        .range::<LockId, _>((Bound::Included(lock), Bound::Unbounded))
        .map(|(_, r)| r)
        .take_while(|r| r.lock == *lock || lock.is_ancestor_of(&r.lock))
        .any(|r| r.nodes.contains(node))
}
