//! One session of the Rust client: a transaction on the node, its calls and its events
//! ([`Session`]), and what a lock call asks for ([`LockSpec`]).
//!
//! Invariants: request ids grow from 1 (a cancel's id is its call's with [`CANCEL_ID`] set);
//! a call returns the answer with its own id and keeps the pushed events read meanwhile, in
//! order, for [`Session::next_event`]; the answers of the unlocks sent without waiting come in
//! the order sent, and only their refusals are kept.

use super::ClientError;
use crate::pb;
use crate::pb::session_event::Kind;
use futures::SinkExt;
use futures::channel::mpsc;
use std::collections::VecDeque;
use std::time::Duration;

/// How a session's transaction behaves ([`Client::session_with`](super::Client::session_with)).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct SessionOptions {
    /// Abort the transaction (every call fails with `ABORTED`, every lock is released) when it
    /// is chosen as a deadlock's victim, instead of surrendering the lock and asking again.
    pub abort_on_deadlock: bool,
}

impl SessionOptions {
    /// The options with `abort_on_deadlock` set as given.
    pub fn abort_on_deadlock(mut self, abort: bool) -> SessionOptions {
        self.abort_on_deadlock = abort;
        self
    }
}

/// The bit that sets the request ids of the cancels a session sends for `lock` calls dropped
/// before their answer came apart from the ids of its calls.
const CANCEL_ID: u64 = 1 << 63;

/// Withdraws a `lock` call whose future is dropped before its answer came: sends `Cancel` on
/// a sender of its own (each sender of the channel has a slot of its own, so the send does not
/// wait).
struct CancelOnDrop {
    tx: Option<mpsc::Sender<pb::SessionRequest>>,
    request_id: u64,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(mut tx) = self.tx.take() {
            let _ = tx.try_send(pb::SessionRequest {
                request_id: CANCEL_ID | self.request_id,
                kind: Some(pb::session_request::Kind::Cancel(pb::Cancel {
                    request_id: self.request_id,
                })),
            });
        }
    }
}

/// One session (one transaction on the node). Dropping it ends the stream, and so the
/// transaction. A [`Session::lock`] future dropped before its answer came withdraws its
/// request (`Cancel`); if the grant came first, the session holds the lock until it unlocks it
/// or ends.
///
/// The session reads its stream on the caller's task, in [`Session::next_event`] and while a
/// call waits for its answer (pushed events read meanwhile are kept for `next_event`): an
/// answer reaches its call without a hop through another task.
pub struct Session {
    tx: mpsc::Sender<pb::SessionRequest>,
    stream: tonic::Streaming<pb::SessionEvent>,
    next_id: u64,
    /// Pushed events read while a call waited, and the stream's failure, for `next_event`.
    pushed: VecDeque<Result<pb::SessionEvent, tonic::Status>>,
    /// The stream has ended or failed.
    ended: bool,
    started: pb::Started,
    /// The request ids of the unlocks sent by [`Session::send_unlock`] whose answers have not
    /// come yet, in the order sent (the node answers a session's requests in that order).
    unanswered: VecDeque<u64>,
}

/// What one read of the stream gave.
enum Read {
    /// The answer to request `id`, or a pushed event (id 0).
    Event(pb::SessionEvent),
    /// The stream ended (or failed: the failure is kept for `next_event`).
    Ended,
}

/// A lock request: the lock id, the mode, and optionally nodes, requirement and wait bound.
#[derive(Clone, Debug)]
pub struct LockSpec(pub pb::Lock);

impl LockSpec {
    /// A request for `path` (`a/b/c`, split on `/`) in `mode` on the session's node.
    pub fn new(path: &str, mode: &str) -> LockSpec {
        // Every other field at its default, so that a new field of `Lock` is a new method
        // here only if the Rust client should set it.
        LockSpec(pb::Lock {
            id: path.split('/').map(str::to_owned).collect(),
            mode: mode.to_owned(),
            requirement: pb::Requirement::All as i32,
            ..pb::Lock::default()
        })
    }

    /// On these nodes.
    pub fn nodes<S: Into<String>>(mut self, nodes: impl IntoIterator<Item = S>) -> LockSpec {
        self.0.nodes = nodes.into_iter().map(Into::into).collect();
        self
    }

    /// Held when `req` of the nodes grant it.
    pub fn requirement(mut self, req: pb::Requirement) -> LockSpec {
        self.0.requirement = req as i32;
        self
    }

    /// Give up after `wait` (for [`Session::lock`]).
    pub fn wait(mut self, wait: Duration) -> LockSpec {
        self.0.wait_ms = Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        self
    }
}

impl Session {
    /// The session of a stream whose first event, `Started`, said `started`; requests go out
    /// through `tx`.
    pub(super) fn opened(
        tx: mpsc::Sender<pb::SessionRequest>,
        stream: tonic::Streaming<pb::SessionEvent>,
        started: pb::Started,
    ) -> Session {
        Session {
            tx,
            stream,
            next_id: 1,
            pushed: VecDeque::new(),
            ended: false,
            started,
            unanswered: VecDeque::new(),
        }
    }

    /// The transaction's agent id and node.
    pub fn started(&self) -> &pb::Started {
        &self.started
    }

    /// Reads the next event of the stream (cancel-safe: a read dropped midway loses nothing).
    async fn read(&mut self) -> Read {
        if self.ended {
            return Read::Ended;
        }
        match self.stream.message().await {
            Ok(Some(event)) => Read::Event(event),
            Ok(None) => {
                self.ended = true;
                Read::Ended
            }
            Err(status) => {
                self.ended = true;
                self.pushed.push_back(Err(status));
                Read::Ended
            }
        }
    }

    async fn call(&mut self, kind: pb::session_request::Kind) -> Result<Kind, ClientError> {
        let request_id = self.next_id;
        self.next_id += 1;
        let request = pb::SessionRequest {
            request_id,
            kind: Some(kind),
        };
        if self.ended || self.tx.send(request).await.is_err() {
            return Err(ClientError::Closed);
        }
        let event = loop {
            match self.read().await {
                Read::Event(event) if event.request_id == request_id => break event,
                Read::Event(event) => self.aside(event),
                Read::Ended => return Err(self.why_ended()),
            }
        };
        match event.kind {
            Some(Kind::Error(e)) => Err(ClientError::Refused {
                code: tonic::Code::from_i32(e.code),
                message: e.message,
            }),
            Some(kind) => Ok(kind),
            None => Err(ClientError::Unexpected(Box::new(event))),
        }
    }

    /// Keeps an event that is not the answer a call waits for: a pushed event for
    /// [`Session::next_event`], and the refusal of an unlock sent by [`Session::send_unlock`]
    /// as well (its `Accepted` is dropped, as is the answer to a call dropped before it came).
    fn aside(&mut self, event: pb::SessionEvent) {
        let id = event.request_id;
        if id == 0 {
            self.pushed.push_back(Ok(event));
            return;
        }
        // The node answers an unlock before it reads the next request, so the answers of the
        // sent unlocks come in the order they were sent.
        if self.unanswered.front() == Some(&id) {
            self.unanswered.pop_front();
            if matches!(event.kind, Some(Kind::Error(_))) {
                self.pushed.push_back(Ok(event));
            }
        }
    }

    /// Why the stream ended: the node's status when it ended with one.
    fn why_ended(&self) -> ClientError {
        match self.pushed.back() {
            Some(Err(status)) => ClientError::Status(status.clone()),
            _ => ClientError::Closed,
        }
    }

    /// Locks and waits for the grant (with its fencing tokens). Dropping the future before the
    /// answer withdraws the request.
    pub async fn lock(&mut self, spec: LockSpec) -> Result<pb::Locked, ClientError> {
        let mut cancel = CancelOnDrop {
            tx: Some(self.tx.clone()),
            request_id: self.next_id,
        };
        let answer = self.call(pb::session_request::Kind::Lock(spec.0)).await;
        cancel.tx = None;
        match answer? {
            Kind::Locked(locked) => Ok(locked),
            other => Err(unexpected(other)),
        }
    }

    /// The current fencing tokens of `path`, which this session holds (refused with
    /// `FAILED_PRECONDITION` when it does not hold it now).
    pub async fn tokens(&mut self, path: &str) -> Result<pb::Grant, ClientError> {
        let id = path.split('/').map(str::to_owned).collect();
        match self
            .call(pb::session_request::Kind::Tokens(pb::Tokens { id }))
            .await?
        {
            Kind::Granted(grant) => Ok(grant),
            other => Err(unexpected(other)),
        }
    }

    /// Tells the node the client is alive; answered at once.
    pub async fn ping(&mut self) -> Result<(), ClientError> {
        match self
            .call(pb::session_request::Kind::Ping(pb::Ping {}))
            .await?
        {
            Kind::Accepted(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Queues a lock request without waiting for the grant (it comes as a pushed `Grant`).
    pub async fn lock_nowait(&mut self, spec: LockSpec) -> Result<(), ClientError> {
        match self
            .call(pb::session_request::Kind::LockNowait(spec.0))
            .await?
        {
            Kind::Accepted(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Releases `path` (or withdraws its request).
    pub async fn unlock(&mut self, path: &str) -> Result<(), ClientError> {
        let id = path.split('/').map(str::to_owned).collect();
        match self
            .call(pb::session_request::Kind::Unlock(pb::Unlock { id }))
            .await?
        {
            Kind::Accepted(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Sends the release of `path` (or the withdrawal of its request) and returns without
    /// waiting for the node's answer: the request is on its way when this returns.
    ///
    /// The node carries out a session's requests in the order they were sent, so whatever the
    /// session asks next is answered after the release is done: `send_unlock` then `lock` is
    /// one round trip to the node where [`Session::unlock`] then `lock` is two. A refusal of
    /// the unlock (a path the node does not take) comes from [`Session::next_event`] as an
    /// `Error` event with the unlock's request id; its `Accepted` is not reported. Fails with
    /// [`ClientError::Closed`] when the session has ended.
    pub async fn send_unlock(&mut self, path: &str) -> Result<(), ClientError> {
        let request_id = self.next_id;
        self.next_id += 1;
        let request = pb::SessionRequest {
            request_id,
            kind: Some(pb::session_request::Kind::Unlock(pb::Unlock {
                id: path.split('/').map(str::to_owned).collect(),
            })),
        };
        if self.ended || self.tx.send(request).await.is_err() {
            return Err(ClientError::Closed);
        }
        self.unanswered.push_back(request_id);
        Ok(())
    }

    /// Converts `path`, requested by this session, down to the weaker `mode`.
    pub async fn convert(&mut self, path: &str, mode: &str) -> Result<(), ClientError> {
        let c = pb::Convert {
            id: path.split('/').map(str::to_owned).collect(),
            mode: mode.to_owned(),
        };
        match self.call(pb::session_request::Kind::Convert(c)).await? {
            Kind::Accepted(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The transaction's status.
    pub async fn status(&mut self) -> Result<pb::Status, ClientError> {
        match self
            .call(pb::session_request::Kind::Status(pb::StatusRequest {}))
            .await?
        {
            Kind::Status(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    /// Ends the transaction (every lock released) and waits until the node says so.
    pub async fn end(mut self) -> Result<(), ClientError> {
        match self
            .call(pb::session_request::Kind::End(pb::End {}))
            .await?
        {
            Kind::Ended(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The next pushed event (or refusal of an unlock sent by [`Session::send_unlock`]);
    /// `Some(Err(_))` when the stream failed (the connection is gone),
    /// `None` once it has ended. Cancel-safe (for `select!`): an event is returned once, or
    /// kept.
    pub async fn next_event(&mut self) -> Option<Result<pb::SessionEvent, tonic::Status>> {
        loop {
            if let Some(event) = self.pushed.pop_front() {
                return Some(event);
            }
            match self.read().await {
                Read::Event(event) => self.aside(event),
                Read::Ended => return self.pushed.pop_front(),
            }
        }
    }
}

fn unexpected(kind: Kind) -> ClientError {
    ClientError::Unexpected(Box::new(pb::SessionEvent {
        request_id: 0,
        kind: Some(kind),
    }))
}
