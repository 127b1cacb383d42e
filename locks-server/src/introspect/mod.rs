//! Cluster-wide introspection: the lock table of every connected node, and the wait-for graph
//! built from them ([`graph`]).
//!
//! ```text
//!   Node::cluster_view ─▶ Message::Introspect{id} ─▶ each peer's Router::deliver_from
//!        │ (waits, bounded by the query's timeout)        └▶ answer(): a task reads the table
//!        │                                                   a slice at a time (report_paced)
//!        ◀──────────────── Message::TableReport{id} ◀──────┘  (no agent, no actor involved)
//! ```
//!
//! This module owns both halves:
//! - **asking** (`Introspection::ask`, `cluster_view`, behind [`crate::Node::cluster_view`]): an
//!   id per question, the waiting answers by id, and the [`ClusterView`] made of the answers
//!   that came in time, with the node's own table read meanwhile;
//! - **answering** (`answer`, called by the router as a question arrives): a peer's question is
//!   answered from the node's table by a task of its own on the node's thread, which reads the
//!   table a slice at a time (`crate::local`, giving the thread's other work, heartbeats
//!   included, a turn every few milliseconds) and sends the answer on the link the question
//!   came by; nothing else is kept per question.
//!
//! Invariants (the bounds a peer cannot push past):
//! - a waiting answer exists only while a local caller waits for it: it is removed when the
//!   answer comes, when the query's time is up, or when the caller gives up (its future is
//!   dropped); an answer that matches no waiting entry, or comes from another node than the one
//!   asked, is dropped quietly (trace level);
//! - an answer lists at most [`MAX_LOCKS_ANSWERED`] locks whatever the question asks, and fits
//!   the asker's frame limit and this node's (fewer locks are listed until it does; the answer
//!   says how many locks there were in all);
//! - each peer gets at most [`ANSWER_BURST`] answers at once and one more per
//!   [`ANSWER_REFILL`]: questions beyond that are not answered (the asker lists this node as
//!   missing), and they are warned about at most once per ten seconds (the node's rate limit
//!   for warnings a peer can cause). This also bounds the answering tasks a peer has running;
//! - no read holds the node's thread or a shard's mutex for a whole pass over the table: the
//!   asker's own table and every answer are read a slice at a time, and the graph takes at most
//!   [`graph::MAX_EDGES`] edges.

pub mod graph;

use crate::log_limit::{LogLimiter, Verdict};
use crate::route::{RemoteLink, RouteError};
use futures::channel::oneshot;
use locks_core::codec::{self, HARD_MAX_FRAME};
use locks_core::proto::{Envelope, IntrospectRequest, Message, TableReport};
use locks_core::{ModeTable, NodeId};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

pub use graph::{WaitEdge, WaitForGraph};

/// The most locks a node lists in one answer, whatever it is asked for (a question costs the
/// answering node one pass over its table, a slice at a time, and a copy of this many queues).
pub const MAX_LOCKS_ANSWERED: usize = 10_000;

/// How many questions of one peer are answered back to back.
pub const ANSWER_BURST: u32 = 8;

/// After its burst, a peer gets one more answer per this much time.
pub const ANSWER_REFILL: Duration = Duration::from_millis(100);

/// Room left in a frame for what wraps the envelope (the frame's variant tag).
const FRAME_MARGIN: usize = 16;

/// The most peers whose budget is remembered; beyond it the budgets start over (peers are
/// authenticated nodes, so this is only reached by a cluster far larger than any deployment).
const MAX_TRACKED_PEERS: usize = 1024;

/// What [`crate::Node::cluster_view`] asks for: how long to wait for the peers' answers and
/// how many locks each node may list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterQuery {
    /// How long to wait for the peers' answers; a peer that has not answered by then is
    /// listed in [`ClusterView::missing`].
    pub timeout: Duration,
    /// The most locks listed per node (capped at [`MAX_LOCKS_ANSWERED`]); a node with more
    /// lists its first ones by id and says how many it has ([`TableReport::truncated`]).
    pub max_locks_per_node: usize,
}

impl Default for ClusterQuery {
    /// Two seconds, a thousand locks per node.
    fn default() -> Self {
        ClusterQuery {
            timeout: Duration::from_secs(2),
            max_locks_per_node: 1000,
        }
    }
}

/// The lock tables of a node and its connected peers, as they answered one query.
///
/// The tables were read at slightly different moments (one question each, in parallel), so a
/// lock that moved between nodes meanwhile can show up twice or not at all.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClusterView {
    /// The table of every node that answered in time, the asking node's own included.
    pub nodes: BTreeMap<NodeId, TableReport>,
    /// The connected peers that did not answer in time (or could not be asked), sorted.
    pub missing: Vec<NodeId>,
}

impl ClusterView {
    /// The nodes whose table was listed only in part, sorted.
    pub fn truncated(&self) -> Vec<&NodeId> {
        self.nodes
            .iter()
            .filter(|(_, t)| t.truncated())
            .map(|(n, _)| n)
            .collect()
    }

    /// The cluster's wait-for graph (see [`graph`]), with the queue rules of `modes`.
    pub fn wait_for_graph(&self, modes: &ModeTable) -> WaitForGraph {
        graph::wait_for_graph(self, modes)
    }
}

/// A report being read (see [`ReportSource::report_paced`]).
pub type PacedReport = Pin<Box<dyn Future<Output = TableReport> + Send>>;

/// What a node answers its peers' questions from: its table (`LocalTable`), as a report of its
/// first `max_locks` locks. A trait so that the router, which holds the introspection state,
/// does not reach up to the table built on it.
pub trait ReportSource: Send + Sync {
    /// The first `max_locks` locks by id, with the total count, read at once.
    fn report(&self, max_locks: usize) -> TableReport;

    /// The same, read a slice at a time, giving the other tasks of the thread that runs it a
    /// turn between slices (`crate::local`): what a node's thread runs.
    fn report_paced(self: Arc<Self>, max_locks: usize) -> PacedReport;
}

/// A local caller waiting for one peer's answer.
struct Waiting {
    node: NodeId,
    reply: oneshot::Sender<TableReport>,
}

/// A node's introspection state: its questions in flight and its peers' answer budgets (see
/// the module documentation). One per router (`Router::introspection`).
pub(crate) struct Introspection {
    /// The node's table and its frame limit, to answer from (weak: the table holds the
    /// router, which holds this).
    table: OnceLock<(Weak<dyn ReportSource>, usize)>,
    next_id: AtomicU64,
    waiting: Mutex<HashMap<u64, Waiting>>,
    budget: Mutex<AnswerBudget>,
    warnings: LogLimiter,
}

impl Default for Introspection {
    fn default() -> Self {
        Introspection {
            table: OnceLock::new(),
            next_id: AtomicU64::new(1),
            waiting: Mutex::new(HashMap::new()),
            budget: Mutex::new(AnswerBudget::default()),
            warnings: LogLimiter::default(),
        }
    }
}

impl Introspection {
    /// Sets the table questions are answered from, and the node's frame limit (once).
    pub(crate) fn set_table(&self, table: Weak<dyn ReportSource>, max_frame: usize) {
        let _ = self.table.set((table, max_frame));
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiting>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a question to `node`: its id, and where its answer will come.
    pub(crate) fn ask(&self, node: NodeId) -> (u64, oneshot::Receiver<TableReport>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        self.waiting().insert(id, Waiting { node, reply });
        (id, rx)
    }

    /// Stops waiting for the answer to `id` (answered, timed out, or given up).
    pub(crate) fn forget(&self, id: u64) {
        self.waiting().remove(&id);
    }

    /// How many questions wait for an answer.
    pub(crate) fn in_flight(&self) -> usize {
        self.waiting().len()
    }

    /// An answer came from `from`: handed to its caller if it asked `from` that question and
    /// the report is `from`'s table; dropped quietly otherwise (late, stray, or not `from`'s
    /// to give).
    pub(crate) fn answered(&self, from: &NodeId, report: TableReport) {
        let mut waiting = self.waiting();
        let matches = waiting
            .get(&report.id)
            .is_some_and(|w| &w.node == from && report.node == *from);
        if !matches {
            drop(waiting);
            tracing::trace!(peer = %from, id = report.id, "an introspection answer nobody waits for dropped");
            return;
        }
        if let Some(w) = waiting.remove(&report.id) {
            // The caller may have given up since; then nobody wants it.
            let _ = w.reply.send(report);
        }
    }
}

/// How many answers each peer may still get (a token bucket per peer; time is an input, so the
/// type is deterministic).
#[derive(Debug, Default)]
pub(crate) struct AnswerBudget {
    peers: HashMap<NodeId, Bucket>,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: u32,
    refilled_at: Instant,
}

impl AnswerBudget {
    /// Whether `peer`'s question at `now` is answered (and counts it).
    pub(crate) fn allow(&mut self, peer: &NodeId, now: Instant) -> bool {
        if !self.peers.contains_key(peer) && self.peers.len() >= MAX_TRACKED_PEERS {
            self.peers.clear();
        }
        let bucket = self.peers.entry(peer.clone()).or_insert(Bucket {
            tokens: ANSWER_BURST,
            refilled_at: now,
        });
        let earned = now.saturating_duration_since(bucket.refilled_at).as_nanos()
            / ANSWER_REFILL.as_nanos().max(1);
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            bucket.tokens = bucket.tokens.saturating_add(earned).min(ANSWER_BURST);
            bucket.refilled_at = now;
        }
        if bucket.tokens == 0 {
            return false;
        }
        bucket.tokens -= 1;
        true
    }
}

/// Takes the introspection messages out of what `from` sent this node: a question is answered
/// on the link to `from` that `link` gives (see [`answer`]), an answer handed to its caller or
/// dropped; anything else is given back.
pub(crate) fn intercept(
    intro: &Introspection,
    from: &NodeId,
    envelope: Envelope,
    link: impl FnOnce() -> Result<Arc<dyn RemoteLink>, RouteError>,
) -> Option<Envelope> {
    match envelope.message {
        Message::Introspect(request) => {
            if let Some((table, max_frame)) = intro.table.get()
                && let Some(table) = table.upgrade()
            {
                match link() {
                    Ok(link) => answer(intro, table, *max_frame, from, request, link),
                    Err(err) => {
                        tracing::debug!(peer = %from, %err, "an introspection question from a peer not connected; not answered")
                    }
                }
            }
            None
        }
        Message::TableReport(report) => {
            intro.answered(from, report);
            None
        }
        message => Some(Envelope {
            message,
            ..envelope
        }),
    }
}

/// Answers `from`'s question from `table` on `link` (the link to `from`), within the bounds
/// of the module documentation. `own_max_frame` is this node's frame limit. Never fails: a
/// question that cannot be answered is dropped, and the asker lists this node as missing.
///
/// On a tokio runtime (the node's thread) the report is read on a task of its own, a slice at
/// a time ([`ReportSource::report_paced`]), and sent when done: the link's task goes on at
/// once, and a large table keeps neither it nor the rest of the thread waiting. Without one
/// (a test's plain thread) it is read and sent before this returns.
pub(crate) fn answer(
    intro: &Introspection,
    table: Arc<dyn ReportSource>,
    own_max_frame: usize,
    from: &NodeId,
    request: IntrospectRequest,
    link: Arc<dyn RemoteLink>,
) {
    let allowed = intro
        .budget
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .allow(from, Instant::now());
    if !allowed {
        match intro.warnings.event("introspection requests over budget") {
            Verdict::Warn { suppressed } => tracing::warn!(
                peer = %from, suppressed_since_last_warning = suppressed,
                "a peer asks for this node's lock table faster than it is answered; not answered"
            ),
            Verdict::Quiet => {
                tracing::debug!(peer = %from, "an introspection request over budget not answered")
            }
        }
        return;
    }
    let max_locks = usize::try_from(request.max_locks)
        .unwrap_or(usize::MAX)
        .min(MAX_LOCKS_ANSWERED);
    let asker_max = usize::try_from(request.max_bytes).unwrap_or(usize::MAX);
    let limit = asker_max
        .min(own_max_frame)
        .min(HARD_MAX_FRAME)
        .saturating_sub(FRAME_MARGIN);
    let from = from.clone();
    let send = move |mut report: TableReport| {
        report.id = request.id;
        let Some(envelope) = fit(report, limit) else {
            tracing::debug!(peer = %from, limit, "not even an empty table report fits the frame limit; not answered");
            return;
        };
        if let Err(err) = link.send(envelope) {
            tracing::debug!(peer = %from, %err, "an introspection answer could not be sent");
        }
    };
    match tokio::runtime::Handle::try_current() {
        // The budget above bounds how many of these a peer has running.
        Ok(runtime) => drop(runtime.spawn(async move {
            send(table.report_paced(max_locks).await);
        })),
        Err(_) => send(table.report(max_locks)),
    }
}

/// The report in an envelope of at most `limit` encoded bytes, listing fewer locks (halving)
/// until it fits; `None` if even no lock does not fit.
fn fit(mut report: TableReport, limit: usize) -> Option<Envelope> {
    loop {
        let envelope = Envelope::new(Message::TableReport(report));
        if codec::encode(&envelope, limit).is_ok() {
            return Some(envelope);
        }
        let Message::TableReport(back) = envelope.message else {
            return None;
        };
        report = back;
        if report.locks.is_empty() {
            return None;
        }
        let keep = report.locks.len() / 2;
        report.locks.truncate(keep);
    }
}

/// Forgets a question when its caller stops waiting, whichever way.
struct Asked<'a> {
    intro: &'a Introspection,
    id: u64,
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        self.intro.forget(self.id);
    }
}

/// Asks each of `peers` (node `node`'s connected peers) for its table through `send`, waits for
/// the answers until `query.timeout`, and adds the node's own `table`, read a slice at a time
/// meanwhile (see [`crate::Node::cluster_view`]). `max_frame` is the largest frame this node
/// reads. Needs a tokio runtime (for the timer).
pub(crate) async fn cluster_view(
    intro: &Introspection,
    node: &NodeId,
    peers: Vec<NodeId>,
    send: impl Fn(&NodeId, Envelope) -> Result<(), RouteError>,
    table: Arc<impl ReportSource + 'static>,
    max_frame: usize,
    query: ClusterQuery,
) -> ClusterView {
    let max_locks = query.max_locks_per_node.min(MAX_LOCKS_ANSWERED);
    let deadline = tokio::time::Instant::now() + query.timeout;
    let mut missing = Vec::new();
    let mut asked = Vec::new();
    for peer in peers {
        let (id, rx) = intro.ask(peer.clone());
        let guard = Asked { intro, id };
        let request = IntrospectRequest {
            id,
            max_locks: u32::try_from(max_locks).unwrap_or(u32::MAX),
            max_bytes: u32::try_from(max_frame).unwrap_or(u32::MAX),
        };
        match send(&peer, Envelope::new(Message::Introspect(request))) {
            Ok(()) => asked.push((peer, guard, rx)),
            Err(err) => {
                tracing::debug!(%node, %peer, %err, "cannot ask a peer for its table");
                missing.push(peer);
            }
        }
    }
    let answers =
        futures::future::join_all(asked.into_iter().map(|(peer, guard, rx)| async move {
            let answer = tokio::time::timeout_at(deadline, rx).await;
            drop(guard);
            (peer, answer.ok().and_then(Result::ok))
        }));
    let (answers, own) = futures::future::join(answers, table.report_paced(max_locks)).await;
    let mut nodes = BTreeMap::new();
    for (peer, answer) in answers {
        match answer {
            Some(report) => {
                nodes.insert(peer, report);
            }
            None => missing.push(peer),
        }
    }
    nodes.insert(own.node.clone(), own);
    missing.sort();
    ClusterView { nodes, missing }
}

#[cfg(test)]
mod answer_tests;
#[cfg(test)]
mod tests;
