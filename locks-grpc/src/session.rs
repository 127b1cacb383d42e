//! One session: a client's stream of requests served by one transaction on the node.
//!
//! The session owns its transaction. It reads requests, starts each `lock` call at once (so
//! requests reach the agent in the order sent; a lock granted at once on the node's fast path
//! is answered then) and waits for the calls' answers, the transaction's events and the next
//! request together. Its future is polled by the stream of its events (`server.rs`). It ends,
//! dropping the transaction and so releasing every lock, when the client sends `End`, closes
//! its side of the stream, or its connection is gone (the server's keepalive drops a silent
//! connection, and with it the stream and the session). Nothing else ends it: a failed request
//! is answered with an `Error` event and the session goes on (a request over
//! `Limits::max_message_bytes` too). A stream that fails (a message over
//! `Limits::max_frame_bytes`, or one that does not decode) ends with a status that says why.
//!
//! A waiting `lock` call can be withdrawn by the client (`Cancel`), as a dropped
//! `Transaction::lock` future withdraws its request: its future races the call's answer
//! against a trigger, answer first, so a call granted before the cancel arrived answers with
//! its grant; otherwise its request is unlocked before the call is answered `CANCELLED`, and
//! nothing is granted for it afterwards. The `Cancel` is answered right after the call.
//!
//! The transaction's agent starts only when a request needs it (see
//! `Transaction::events_once_started`): until then nothing is pushed that the answers did not
//! say, and the grant of a `lock_nowait` decided at once is pushed here.
//!
//! Every grant, loss, deadlock and status change the agent reports is pushed, but for one
//! status: `Waiting` while a `lock` call of the session waits tells the client nothing its
//! call does not (unless the client last heard `CannotServe`, which `Waiting` then corrects).
//! Not writing it spares a write and a wake-up of the client in the middle of every lock that
//! waits (a lock on other nodes waits for their answers).

use crate::limits::{Limits, LockBooking, SessionPermit};
use crate::pb;
use crate::pb::session_event::Kind;
use crate::wire::{self, WireLock, WireRefusal};
use futures::channel::oneshot;
use futures::future::{BoxFuture, Either};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use locks_agent::{LockState, Locked, Options, Transaction, TransactionEvent, TransactionStatus};
use locks_core::{LockId, NodeId};
use locks_server::Node;
use locks_server::embed::{LogLimiter, Verdict};
use prost::Message;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tonic::{Code, Status, Streaming};

/// The nodes this node has reached since it started: a request may name only these (and the
/// node itself). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub(crate) struct Known(Arc<Mutex<HashSet<NodeId>>>);

impl Known {
    pub(crate) fn add(&self, node: NodeId) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(node);
    }

    fn contains(&self, node: &NodeId) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(node)
    }
}

/// What every session of a server shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) node: Node,
    pub(crate) known: Known,
    pub(crate) limits: Limits,
    pub(crate) log: LogLimiter,
    /// The server's keepalive bound, told to each client in `Started`.
    pub(crate) keepalive: Duration,
}

type Out = crate::outbox::Outbox<Result<pb::SessionEvent, Status>>;

/// What a waiting `lock` call ends with.
enum WaitOutcome {
    Done(Result<Locked, locks_agent::Error>),
    /// Its wait bound ran out.
    TimedOut(LockId, u64),
    /// The client withdrew it (`Cancel`) before it was granted.
    Cancelled(LockId),
}

/// The `lock` calls that wait, as futures answering with their request id.
type Pending = FuturesUnordered<BoxFuture<'static, (u64, WaitOutcome)>>;

/// What the session knows of its waiting `lock` calls, besides their futures.
#[derive(Default)]
struct Waiting {
    /// By request id: the trigger that withdraws the call (`Cancel`).
    cancel: HashMap<u64, oneshot::Sender<()>>,
    /// By the request id of a call being withdrawn: the ids of the `Cancel` requests to answer
    /// once the call's own answer is sent.
    cancels: HashMap<u64, Vec<u64>>,
}

/// Serves one session until it ends (see the module documentation).
pub(crate) async fn run(
    shared: Shared,
    mut inbound: Streaming<pb::SessionRequest>,
    mut out: Out,
    permit: SessionPermit,
    options: Options,
) {
    let abort_on_deadlock = options.abort_on_deadlock;
    let txn = match locks_agent::begin_transaction(&shared.node, options).await {
        Ok(txn) => txn,
        Err(e) => {
            let _ = out.send(Err(Status::unavailable(e.to_string()))).await;
            return;
        }
    };
    let me = txn.id().to_string();
    let started = Kind::Started(pb::Started {
        agent: me.clone(),
        node: shared.node.id().to_string(),
        keepalive_ms: u64::try_from(shared.keepalive.as_millis()).unwrap_or(u64::MAX),
        abort_on_deadlock,
    });
    if out.send(Ok(wire::event(0, started))).await.is_err() {
        return;
    }
    let mut session = Session {
        shared,
        txn,
        me,
        requested: HashSet::default(),
        booking: permit.booking(),
        deadlocks: 0,
        told_cannot_serve: false,
        waiting: Waiting::default(),
    };
    // Subscribed without starting the agent: local locks granted at once stay on the node's
    // fast path (answered by their calls), and the agent, once a request needs it, reports
    // everything from its start (see `Transaction::events_once_started`).
    let mut events = session.txn.events_once_started();
    let mut pending = Pending::new();
    // One wait for the eviction for the whole session: a new one per turn of the loop would
    // take the token's lock and register a waiter again for every request.
    let mut evicted = std::pin::pin!(permit.evicted());
    let ended = loop {
        let sent = tokio::select! {
            request = inbound.message() => match request {
                Ok(Some(request)) => {
                    let (replies, end) = session.request(request, &mut pending).await;
                    if end {
                        break Ending::Ended(replies);
                    }
                    replies
                }
                // The client closed its side.
                Ok(None) => break Ending::Closed,
                // A message that could not be read, or the connection is gone.
                Err(status) => break Ending::Failed(session.stream_failed(&status)),
            },
            () = &mut evicted => {
                break Ending::Failed(Status::resource_exhausted(crate::limits::EVICTED));
            }
            Some(event) = events.next() => session.pushed(event, !pending.is_empty()),
            Some((id, outcome)) = pending.next(), if !pending.is_empty() => {
                session.answer(id, outcome).await
            }
        };
        if send_all(&mut out, sent).await.is_err() {
            break Ending::Closed;
        }
    };
    drop(pending);
    let Session { txn, .. } = session;
    let _ = txn.end().await;
    match ended {
        Ending::Ended(replies) => {
            let _ = send_all(&mut out, replies).await;
        }
        Ending::Failed(status) => {
            let _ = out.send(Err(status)).await;
        }
        Ending::Closed => {}
    }
    drop(permit);
}

/// How a session's loop ended.
enum Ending {
    /// By `End`: the answers to send after the transaction ended.
    Ended(Vec<pb::SessionEvent>),
    /// The client closed its side, or stopped reading.
    Closed,
    /// The request stream failed: the status that ends the stream, saying why.
    Failed(Status),
}

async fn send_all(
    out: &mut Out,
    events: Vec<pb::SessionEvent>,
) -> Result<(), crate::outbox::Closed> {
    for event in events {
        out.send(Ok(event)).await?;
    }
    Ok(())
}

struct Session {
    shared: Shared,
    txn: Transaction,
    /// The transaction's agent id, as written in deadlock reports.
    me: String,
    /// The locks requested and not unlocked, bounded by `Limits::max_locks`.
    requested: HashSet<LockId, ahash::RandomState>,
    /// The same locks, booked against the bounds of the client's address and of the node.
    booking: LockBooking,
    /// The deadlocks reported so far.
    deadlocks: usize,
    /// The last status the client was told (pushed, or answering `status`) is `CannotServe`.
    told_cannot_serve: bool,
    /// The `lock` calls that wait, for `Cancel`.
    waiting: Waiting,
}

impl Session {
    /// Handles one request: the events it answers with now, and whether the session ends.
    async fn request(
        &mut self,
        request: pb::SessionRequest,
        pending: &mut Pending,
    ) -> (Vec<pb::SessionEvent>, bool) {
        let id = request.request_id;
        let size = request.encoded_len();
        let max = self.shared.limits.max_message_bytes;
        if size > max {
            let refusal = WireRefusal::new(
                Code::ResourceExhausted,
                format!(
                    "a request has at most {max} bytes (max_message_bytes); this one has {size}"
                ),
            );
            return (vec![self.refused(id, &refusal)], false);
        }
        let reply = match request.kind {
            None => Err(WireRefusal::new(
                Code::InvalidArgument,
                "a request with no kind (lock, lock_nowait, unlock, convert, status, cancel, \
                 tokens, ping or end)",
            )),
            Some(pb::session_request::Kind::End(_)) => {
                return (vec![wire::event(id, Kind::Ended(pb::Ended {}))], true);
            }
            Some(pb::session_request::Kind::Lock(lock)) => {
                match self.parse(&lock).and_then(|call| self.admit(call, pending)) {
                    Ok(call) => {
                        // A lock granted at once (the fast path) is answered now, without a
                        // turn of the session's loop, a trigger or a boxed wait.
                        let mut wait = Box::pin(call.call(&self.txn));
                        if let Some(answer) = (&mut wait).now_or_never() {
                            return (self.answer(id, WaitOutcome::Done(answer)).await, false);
                        }
                        let (cancel, cancelled) = oneshot::channel();
                        self.waiting.cancel.insert(id, cancel);
                        pending.push(waiting_lock(wait, id, call, cancelled));
                        return (vec![], false);
                    }
                    Err(refusal) => Err(refusal),
                }
            }
            Some(pb::session_request::Kind::LockNowait(lock)) => {
                match self.parse(&lock).and_then(|call| self.admit(call, pending)) {
                    Ok(call) => return self.lock_nowait(id, call).await,
                    Err(refusal) => Err(refusal),
                }
            }
            Some(pb::session_request::Kind::Unlock(unlock)) => {
                match wire::lock_id(&unlock.id, &self.shared.limits) {
                    Ok(lock) => {
                        self.forget(&lock);
                        self.txn
                            .unlock(lock)
                            .await
                            .map(|()| Kind::Accepted(pb::Accepted {}))
                            .map_err(|e| wire::agent_error(&e))
                    }
                    Err(refusal) => Err(refusal),
                }
            }
            Some(pb::session_request::Kind::Convert(c)) => match self.conversion(&c) {
                Ok((lock, mode)) => self
                    .txn
                    .convert(lock, mode)
                    .await
                    .map(|()| Kind::Accepted(pb::Accepted {}))
                    .map_err(|e| wire::agent_error(&e)),
                Err(refusal) => Err(refusal),
            },
            Some(pb::session_request::Kind::Cancel(c)) => {
                return (self.cancel(id, c.request_id), false);
            }
            Some(pb::session_request::Kind::Tokens(t)) => self.tokens(&t).await,
            Some(pb::session_request::Kind::Ping(_)) => Ok(Kind::Accepted(pb::Accepted {})),
            Some(pb::session_request::Kind::Status(_)) => match self.txn.status().await {
                Ok(s) => {
                    self.told_cannot_serve = matches!(s, TransactionStatus::CannotServe { .. });
                    Ok(Kind::Status(wire::status(&s, self.deadlocks)))
                }
                Err(e) => Err(wire::agent_error(&e)),
            },
        };
        let event = match reply {
            Ok(kind) => wire::event(id, kind),
            Err(refusal) => self.refused(id, &refusal),
        };
        (vec![event], false)
    }

    /// Queues a request without waiting: `Accepted`, then the pushed `Grant`. The agent pushes
    /// the grant of a request it serves; a request granted at once on the fast path (no agent
    /// after the call) is pushed here, with what the node's table says is held.
    async fn lock_nowait(&mut self, id: u64, call: WireLock) -> (Vec<pb::SessionEvent>, bool) {
        let lock = call.lock.clone();
        let queued = call.queue(&self.txn).await;
        if let Err(e) = queued {
            return (vec![self.refused(id, &wire::agent_error(&e))], false);
        }
        let mut sent = vec![wire::event(id, Kind::Accepted(pb::Accepted {}))];
        if !self.txn.has_agent()
            && let Ok(LockState::Held(granted)) = self.txn.lock_state(lock).await
        {
            sent.push(wire::event(0, Kind::Granted(wire::grant(&granted))));
        }
        (sent, false)
    }

    /// The lock and mode of a `convert` request, checked.
    fn conversion(&self, c: &pb::Convert) -> Result<(LockId, locks_core::Mode), WireRefusal> {
        let lock = wire::lock_id(&c.id, &self.shared.limits)?;
        let mode = c.mode.parse().map_err(|_| {
            WireRefusal::new(Code::InvalidArgument, format!("unknown mode {:?}", c.mode))
        })?;
        Ok((lock, mode))
    }

    fn parse(&self, lock: &pb::Lock) -> Result<WireLock, WireRefusal> {
        let known = &self.shared.known;
        wire::parse_lock(
            lock,
            self.shared.node.id(),
            |n| known.contains(n),
            &self.shared.limits,
        )
    }

    /// Checks the session's limits for one more request.
    fn admit(&mut self, call: WireLock, pending: &Pending) -> Result<WireLock, WireRefusal> {
        let limits = &self.shared.limits;
        if pending.len() >= limits.max_pending {
            return Err(WireRefusal::new(
                Code::ResourceExhausted,
                format!("{} lock calls already wait in this session", pending.len()),
            ));
        }
        if !self.requested.contains(&call.lock) {
            if self.requested.len() >= limits.max_locks {
                return Err(WireRefusal::new(
                    Code::ResourceExhausted,
                    format!("this session has requested {} locks", self.requested.len()),
                ));
            }
            self.booking
                .take(id_bytes(&call.lock), limits)
                .map_err(|why| WireRefusal::new(Code::ResourceExhausted, why))?;
            self.requested.insert(call.lock.clone());
        }
        Ok(call)
    }

    /// Withdraws the waiting `lock` call `target` (request `id`, a `Cancel`): the call is
    /// answered when its future ends (by its grant, if that came first, or by `CANCELLED` once
    /// its request is withdrawn), and this request right after it. With no such call waiting,
    /// it is answered at once.
    fn cancel(&mut self, id: u64, target: u64) -> Vec<pb::SessionEvent> {
        let accepted = wire::event(id, Kind::Accepted(pb::Accepted {}));
        if let Some(trigger) = self.waiting.cancel.remove(&target) {
            // A call that was granted meanwhile ignores the trigger: its future answers with
            // the grant.
            let _ = trigger.send(());
            self.waiting.cancels.entry(target).or_default().push(id);
            return vec![];
        }
        match self.waiting.cancels.get_mut(&target) {
            // Withdrawn already, not answered yet: answered with the first cancel.
            Some(ids) => {
                ids.push(id);
                vec![]
            }
            None => vec![accepted],
        }
    }

    /// The answer to `tokens`: the lock as held now, with its current fencing tokens.
    async fn tokens(&mut self, t: &pb::Tokens) -> Result<Kind, WireRefusal> {
        let lock = wire::lock_id(&t.id, &self.shared.limits)?;
        match self.txn.lock_state(lock.clone()).await {
            Ok(LockState::Held(granted)) => Ok(Kind::Granted(wire::grant(&granted))),
            Ok(state) => {
                let now = match state {
                    LockState::NotRequested => "not requested",
                    LockState::Waiting => "waiting for its grant",
                    LockState::Lost(_) => "lost",
                    LockState::Held(_) => "held",
                };
                Err(WireRefusal::new(
                    Code::FailedPrecondition,
                    format!("{lock} is not held by this session: it is {now}"),
                ))
            }
            Err(e) => Err(wire::agent_error(&e)),
        }
    }

    /// The status that ends the stream when the request stream failed, saying why (a message
    /// over the hard frame limit, one that does not decode), logged rate-limited.
    fn stream_failed(&self, status: &Status) -> Status {
        let hard = self.shared.limits.max_frame_bytes;
        let ended = match status.code() {
            Code::OutOfRange | Code::ResourceExhausted => Status::resource_exhausted(format!(
                "a message on this stream has at most {hard} bytes (max_frame_bytes); the \
                 session ended: {}",
                status.message()
            )),
            Code::Internal | Code::InvalidArgument | Code::DataLoss => {
                Status::invalid_argument(format!(
                    "a request that is not a locks.v1.SessionRequest; the session ended: {}",
                    status.message()
                ))
            }
            // The connection is gone: nobody reads the status.
            _ => Status::new(status.code(), status.message().to_owned()),
        };
        tracing::debug!(agent = %self.me, code = ?ended.code(), "session stream failed: {}", ended.message());
        if matches!(
            ended.code(),
            Code::ResourceExhausted | Code::InvalidArgument
        ) && let Verdict::Warn { suppressed } = self.shared.log.event("grpc-stream-refused")
        {
            tracing::info!(
                suppressed,
                "a client session was ended: {} (further ones at DEBUG)",
                ended.message()
            );
        }
        ended
    }

    /// The `Error` event for a refused request, logged at DEBUG (a client sending bad requests
    /// in a loop must not fill the log), with one rate-limited INFO line per interval.
    fn refused(&self, id: u64, refusal: &WireRefusal) -> pb::SessionEvent {
        tracing::debug!(agent = %self.me, code = ?refusal.code, "request refused: {}", refusal.message);
        if let Verdict::Warn { suppressed } = self.shared.log.event("grpc-request-refused") {
            tracing::info!(
                suppressed,
                "a client request was refused: {} (further refusals at DEBUG)",
                refusal.message
            );
        }
        refusal.event(id)
    }

    /// The answer to a `lock` call that ended, followed by the answers to the `Cancel`s that
    /// named it.
    async fn answer(&mut self, id: u64, outcome: WaitOutcome) -> Vec<pb::SessionEvent> {
        self.waiting.cancel.remove(&id);
        let event = match outcome {
            WaitOutcome::Done(Ok(locked)) => {
                wire::event(id, Kind::Locked(wire::locked(&locked, &self.me)))
            }
            WaitOutcome::Done(Err(e)) => self.refused(id, &wire::agent_error(&e)),
            WaitOutcome::TimedOut(lock, ms) => {
                self.withdraw(&lock).await;
                let refusal = WireRefusal::new(
                    Code::DeadlineExceeded,
                    format!("{lock} not granted within {ms} ms; the request was withdrawn"),
                );
                self.refused(id, &refusal)
            }
            WaitOutcome::Cancelled(lock) => {
                self.withdraw(&lock).await;
                let refusal = WireRefusal::new(
                    Code::Cancelled,
                    format!(
                        "{lock} was not granted; the request was withdrawn at the client's request"
                    ),
                );
                self.refused(id, &refusal)
            }
        };
        let mut sent = vec![event];
        for cancel in self.waiting.cancels.remove(&id).unwrap_or_default() {
            sent.push(wire::event(cancel, Kind::Accepted(pb::Accepted {})));
        }
        sent
    }

    /// Withdraws the request of a `lock` call given up (its future dropped): once the agent
    /// has answered the unlock, the request is in no queue the agent serves, and it grants
    /// nothing more for it.
    async fn withdraw(&mut self, lock: &LockId) {
        self.forget(lock);
        let _ = self.txn.unlock(lock.clone()).await;
    }

    /// `lock` is no longer requested: it no longer counts against any bound.
    fn forget(&mut self, lock: &LockId) {
        if self.requested.remove(lock) {
            self.booking.give(id_bytes(lock));
        }
    }

    /// The events pushed for one transaction event; `lock_waits` says whether a `lock` call of
    /// the session waits (see the module documentation).
    fn pushed(&mut self, event: TransactionEvent, lock_waits: bool) -> Vec<pb::SessionEvent> {
        match event {
            TransactionEvent::Granted(g) => {
                vec![wire::event(0, Kind::Granted(wire::grant(&g)))]
            }
            TransactionEvent::Lost(l) => vec![wire::event(0, Kind::Lost(wire::loss(&l)))],
            TransactionEvent::Status(s) => {
                let mut sent = Vec::new();
                if let TransactionStatus::HaveAllLocks { deadlocks } = &s {
                    for d in deadlocks.iter().skip(self.deadlocks) {
                        let d = wire::deadlock(d, &self.me);
                        sent.push(wire::event(0, Kind::Deadlock(d)));
                    }
                    self.deadlocks = self.deadlocks.max(deadlocks.len());
                }
                let said = matches!(s, TransactionStatus::Waiting)
                    && lock_waits
                    && !self.told_cannot_serve;
                if !said {
                    self.told_cannot_serve = matches!(s, TransactionStatus::CannotServe { .. });
                    let status = wire::status(&s, self.deadlocks);
                    sent.push(wire::event(0, Kind::Status(status)));
                }
                sent
            }
        }
    }
}

/// The bytes a lock id counts against `Limits::max_lock_bytes_per_client`: its keys' payloads.
fn id_bytes(lock: &LockId) -> usize {
    lock.keys().iter().map(|k| k.payload_len()).sum()
}

/// The wait of one `lock` call (`wait`, the call started and polled once, which reached the
/// agent): its answer (within the call's wait bound, if any) or `cancelled`. The call is polled
/// before the trigger, so a call already answered when the trigger fires ends with its answer.
fn waiting_lock(
    wait: Pin<Box<dyn Future<Output = Result<Locked, locks_agent::Error>> + Send>>,
    id: u64,
    call: WireLock,
    cancelled: oneshot::Receiver<()>,
) -> BoxFuture<'static, (u64, WaitOutcome)> {
    let lock = call.lock.clone();
    let bounded = async move {
        match call.wait_ms {
            None => WaitOutcome::Done(wait.await),
            Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), wait).await {
                Ok(r) => WaitOutcome::Done(r),
                Err(_) => WaitOutcome::TimedOut(call.lock, ms),
            },
        }
    };
    async move {
        // A trigger dropped unsent (the call answered) is no cancellation.
        let cancelled = cancelled.then(|sent| async move {
            if sent.is_err() {
                std::future::pending::<()>().await;
            }
        });
        match futures::future::select(Box::pin(bounded), Box::pin(cancelled)).await {
            Either::Left((answer, _)) => (id, answer),
            Either::Right(((), _)) => (id, WaitOutcome::Cancelled(lock)),
        }
    }
    .boxed()
}
