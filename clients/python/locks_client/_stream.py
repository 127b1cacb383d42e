"""The transport under a :class:`~locks_client.Session`: its stream, the thread that reads
it, the lease and the thread that keeps it, and the bookkeeping of requests and grants.

Requests are sent on the stream, each with an id; the reading thread hands an answer to the
call waiting for it (by request id) and a pushed event (grant, loss, deadlock, status) to the
session's event queue. The keeping thread sends a ``ping`` when nothing was sent for a quarter
of the lease's bound, and ends the session once the lease has run out (:mod:`.lease`).
"""

import queue
import threading

import grpc

from locks_client._stubs import pb
from locks_client.errors import LocksError, code_of
from locks_client.events import Event, Grant, cause_name, path_text, status_name
from locks_client.lease import Lease, Lost, now

_END = object()

_ABORT_ON_DEADLOCK = "locks-abort-on-deadlock"


def message_of(answer):
    """``CODE: message`` of an ``error`` answer."""
    error = answer[0].error
    return f"{code_of(error.code).name}: {error.message}"


class Call:
    """A request whose caller waits for the answer: its id once sent, and the queue its answer
    goes to, ``(event, generation)`` or the :class:`LocksError` that ended the session (calls
    may share one queue)."""

    __slots__ = ("id", "answers")

    def __init__(self, answers=None):
        self.id = None
        self.answers = queue.Queue() if answers is None else answers


class SessionStream:
    """One session's stream and its bookkeeping; :class:`~locks_client.Session` is its API."""

    def __init__(
        self,
        stub,
        metadata,
        timeout=30.0,
        *,
        open_timeout=10.0,
        keepalive=10.0,
        address="the node",
        abort_on_deadlock=False,
    ):
        """Opens a session on ``stub``'s node and waits, at most ``open_timeout`` seconds, for
        it to start. ``keepalive``: the client's own bound, the lease's when it is smaller than
        the node's (or the node does not say its own). Raises :class:`LocksError`: the node's
        refusal (UNAUTHENTICATED, RESOURCE_EXHAUSTED, UNAVAILABLE when it cannot be reached) or
        DEADLINE_EXCEEDED when it did not start the session in time."""
        self.timeout = timeout
        self.cancel_timeout = 10.0
        self.address = address
        self.agent = ""
        self.node = ""
        self.keepalive = keepalive
        self.abort_on_deadlock = False
        self.lost = Lost(self._check_lease)
        self._lock = threading.Lock()
        self._requests = queue.Queue()
        self._calls = {}
        self._sent = {}
        self._next_id = 1
        self._events = queue.Queue()
        self._ended = None
        # What ended the session on this client's side, and whether it was this client's
        # own doing (End, close) rather than a failure: the `closed` event says OK then.
        self._ending = None
        self._ended_cleanly = False
        self._lease = None
        self._generations = {}
        self._held = {}
        self._wake = threading.Event()
        self._opened = threading.Event()
        if abort_on_deadlock:
            metadata = [*metadata, (_ABORT_ON_DEADLOCK, "true")]
        opened_at = now()
        self._last_send = opened_at
        self._stream = stub.Session(self._outgoing(), metadata=metadata)
        threading.Thread(target=self._read, args=(opened_at, keepalive), daemon=True).start()
        try:
            started = self._opened.wait(open_timeout)
        except BaseException:
            self._close(
                LocksError(grpc.StatusCode.CANCELLED, "interrupted while the session opened")
            )
            raise
        if not started:
            error = LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"{address} did not start a session within {open_timeout:g} s",
            )
            self._close(error)
            raise error
        if self._ended is not None:
            raise LocksError(self._ended.code, self._ended.message)
        threading.Thread(target=self._keep, daemon=True).start()

    # The stream.

    def _outgoing(self):
        while True:
            request = self._requests.get()
            if request is _END:
                return
            yield request

    def _read(self, opened_at, keepalive):
        ended = None
        try:
            for message in self._stream:
                if not self._opened.is_set():
                    self._start(message, opened_at, keepalive)
                else:
                    self._dispatch(message)
            ended = LocksError(
                grpc.StatusCode.UNAVAILABLE, f"{self.address} ended the session without a reason"
            )
        except grpc.RpcError as e:
            what = "ended the session" if self._opened.is_set() else "started no session"
            ended = LocksError(e.code(), f"{self.address} {what}: {e.details()}")
        except LocksError as e:
            ended = e
        except Exception as e:  # noqa: BLE001 - a waiting caller must hear of it
            ended = LocksError(grpc.StatusCode.INTERNAL, f"reading the session failed: {e!r}")
        # A session this client ended or closed says so, whatever the stream did after.
        self._finish(self._ending or ended, clean=self._ended_cleanly)
        self._opened.set()

    def _start(self, message, opened_at, keepalive):
        if message.WhichOneof("kind") != "started":
            raise LocksError(
                grpc.StatusCode.INTERNAL, f"{self.address} began the session with {message}"
            )
        started = message.started
        self.agent = started.agent
        self.node = started.node
        self.abort_on_deadlock = started.abort_on_deadlock
        if started.keepalive_ms:
            keepalive = min(keepalive, started.keepalive_ms / 1000)
        self.keepalive = keepalive
        with self._lock:
            self._lease = Lease(keepalive, opened_at)
        self._opened.set()

    def _dispatch(self, message):
        kind = message.WhichOneof("kind")
        if message.request_id:
            with self._lock:
                sent = self._sent.pop(message.request_id, None)
                if sent is not None:
                    self._lease.renew(sent)
                call = self._calls.pop(message.request_id, None)
                # The grant's generation is the one when it was answered, not when its caller
                # wakes: a loss read in between must make it invalid.
                generation = 0
                if kind in ("locked", "granted"):
                    grant = message.locked.grant if kind == "locked" else message.granted
                    generation = self._generations.get(path_text(grant.id), 0)
            if kind == "ended":
                self._ending = LocksError(
                    grpc.StatusCode.FAILED_PRECONDITION, "the session was ended by this client"
                )
                self._ended_cleanly = True
            if call is not None:
                call.answers.put((message, generation))
            return
        if kind == "granted":
            with self._lock:
                path = path_text(message.granted.id)
                grant = Grant._from(message.granted, self, self._generations.get(path, 0))
                self._held[path] = grant
            self._events.put(Event("granted", lock=path, grant=grant))
        elif kind == "lost":
            path = path_text(message.lost.id)
            with self._lock:
                self._generations[path] = self._generations.get(path, 0) + 1
                self._held.pop(path, None)
            self.lost.set()
            self._events.put(Event("lost", lock=path, cause=cause_name(message.lost.cause)))
        elif kind == "deadlock":
            d = message.deadlock
            self._events.put(
                Event(
                    "deadlock",
                    lock=path_text(d.id),
                    surrendered_by_this_session=d.surrendered_by_this_session,
                )
            )
        elif kind == "status":
            self._events.put(Event("status", status=status_name(message.status.status)))
        else:
            self._events.put(Event(kind or "unknown"))

    def _finish(self, error, first=(), clean=False):
        """Ends the session with ``error`` (what later calls raise), unless it has ended
        already: ``first`` (events) and ``closed`` are pushed (with code OK when ``clean``: this
        client ended it), and every waiting call fails. Whether it ended the session."""
        with self._lock:
            if self._ended is not None:
                return False
            self._ended = error
            calls, self._calls = self._calls, {}
            for event in first:
                self._events.put(event)
            code = grpc.StatusCode.OK if clean else error.code
            self._events.put(Event("closed", message=error.message, code=code))
        threading.Event.set(self.lost)
        self._wake.set()
        self._requests.put(_END)
        for call in calls.values():
            call.answers.put(error)
        return True

    def _close(self, error, clean=False):
        """Ends the session with ``error`` and closes the stream: the node ends the
        transaction, releasing every lock."""
        if self._ending is None:
            self._ending = error
            self._ended_cleanly = clean
        self._finish(error, clean=clean)
        self._stream.cancel()

    # The lease.

    def _check_lease(self):
        """Ends the session if its lease has run out; the seconds it has left (``None`` when
        the session has ended or not started)."""
        with self._lock:
            if self._ended is not None or self._lease is None:
                return None
            lease = self._lease
            left = lease.expires() - now()
            if left >= 0:
                return left
            error = LocksError(
                grpc.StatusCode.ABORTED,
                f"the session's lease expired: {self.address} answered nothing sent in the last "
                f"{lease.keepalive - lease.margin - left:.3f} s, past its keepalive bound of "
                f"{lease.keepalive:g} s less a margin of {lease.margin:g} s, so it may have "
                "ended the session and handed its locks to others",
            )
        lost = Event("lost", cause="lease-expired", message=error.message)
        if self._finish(error, first=[lost]):
            self._stream.cancel()
        return 0.0

    def _keep(self):
        """Sends a ping when nothing was sent for a while; ends the session when its lease runs
        out."""
        while True:
            left = self._check_lease()
            if left is None:
                return
            with self._lock:
                next_ping = self._last_send + self._lease.ping_interval()
            wait = min(next_ping - now(), left)
            if wait <= 0:
                try:
                    self._send(ping=pb.Ping())
                except LocksError:
                    return
                continue
            self._wake.wait(wait + 0.001)

    def _holds(self, grant):
        self._check_lease()
        with self._lock:
            if self._ended is not None:
                return False
            return self._generations.get(grant.lock, 0) == grant._generation

    # Calls.

    def _send(self, call=None, **kind):
        """Sends one request; its answer goes to ``call`` (a :class:`Call`, given its id
        before the request is queued) if given. Raises the session's end
        (:class:`LocksError`) once it is over."""
        self._check_lease()
        with self._lock:
            if self._ended is not None:
                raise LocksError(self._ended.code, self._ended.message)
            request_id = self._next_id
            self._next_id += 1
            sent = now()
            self._sent[request_id] = sent
            self._last_send = sent
            if call is not None:
                call.id = request_id
                self._calls[request_id] = call
            self._requests.put(pb.SessionRequest(request_id=request_id, **kind))

    @staticmethod
    def _answered(answer):
        """The event of an answer taken from a call; raises the error it carries."""
        if isinstance(answer, LocksError):
            raise LocksError(answer.code, answer.message)
        message, generation = answer
        if message.WhichOneof("kind") == "error":
            raise LocksError(code_of(message.error.code), message.error.message)
        return message, generation

    def _call(self, timeout=None, **kind):
        call = Call()
        self._send(call, **kind)
        bound = self.timeout if timeout is None else timeout
        try:
            answer = call.answers.get(timeout=bound)
        except queue.Empty:
            with self._lock:
                self._calls.pop(call.id, None)
            raise LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no answer from {self.address} within {bound:g} s",
            ) from None
        return self._answered(answer)

    def _grant(self, grant, generation, deadlocks=(), surrendered=()):
        granted = Grant._from(grant, self, generation, deadlocks, surrendered)
        with self._lock:
            if self._generations.get(granted.lock, 0) == generation:
                self._held[granted.lock] = granted
        return granted
