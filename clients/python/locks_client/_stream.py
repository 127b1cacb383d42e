"""The transport under a thread-based :class:`~locks_client.Session`: its stream, the thread
that reads it, and the thread that keeps its lease; the bookkeeping is :mod:`._core`'s.

Requests are sent on the stream, each with an id; the reading thread hands an answer to the
call waiting for it (by request id) and a pushed event (grant, loss, deadlock, status) to the
session's event queue. The keeping thread sends a ``ping`` when nothing was sent for a quarter
of the lease's bound, and ends the session once the lease has run out (:mod:`.lease`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any


from locks_client import lease as _lease
from locks_client._common import Metadata
from locks_client._core import (
    ABORT_ON_DEADLOCK,
    Answer,
    Call,
    SessionCore,
    SessionInfo,
    answered,
    stream_ended,
    unanswered,
)
from locks_client._proto import locks_pb2 as pb
from locks_client._proto import locks_pb2_grpc as pb_grpc
from locks_client.errors import LocksError
from locks_client.events import Event, Grant
from locks_client.lease import Lost

_END = None


class SessionStream(SessionInfo):
    """One session's stream and threads; :class:`~locks_client.Session` is its API."""

    def __init__(
        self,
        stub: pb_grpc.LocksStub,
        metadata: Metadata,
        timeout: float = 30.0,
        *,
        open_timeout: float = 10.0,
        keepalive: float = 10.0,
        address: str = "the node",
        abort_on_deadlock: bool = False,
    ) -> None:
        """Opens a session on ``stub``'s node and waits, at most ``open_timeout`` seconds, for
        it to start. ``keepalive``: the client's own bound, the lease's when it is smaller than
        the node's (or the node does not say its own). Raises :class:`LocksError`: the node's
        refusal (UNAUTHENTICATED, RESOURCE_EXHAUSTED, UNAVAILABLE when it cannot be reached) or
        DEADLINE_EXCEEDED when it did not start the session in time."""
        self.timeout = timeout
        self.cancel_timeout = 10.0
        self.lost = Lost(self._check_lease)
        self._lock = threading.Lock()
        self._requests: queue.Queue[pb.SessionRequest | None] = queue.Queue()
        self._events: queue.Queue[Event] = queue.Queue()
        self._wake = threading.Event()
        self._opened = threading.Event()
        self._core = SessionCore(
            self, address, keepalive, self._events, self._mark_lost, self._cancel_stream
        )
        if abort_on_deadlock:
            metadata = (*metadata, (ABORT_ON_DEADLOCK, "true"))
        opened_at = _lease.now()
        self._stream = stub.Session(self._outgoing(), metadata=metadata)
        threading.Thread(target=self._read, args=(opened_at,), daemon=True).start()
        try:
            started = self._opened.wait(open_timeout)
        except BaseException:
            self._open_interrupted()
            raise
        self._check_started(started, open_timeout)
        threading.Thread(target=self._keep, daemon=True).start()

    # The stream.

    def _outgoing(self) -> Iterator[pb.SessionRequest]:
        while True:
            request = self._requests.get()
            if request is _END:
                return
            yield request

    def _read(self, opened_at: float) -> None:
        ended = None
        try:
            for message in self._stream:
                with self._lock:
                    if not self._opened.is_set():
                        self._core.start(message, opened_at)
                        self._opened.set()
                    else:
                        self._core.receive(message)
            ended = stream_ended(self.address, None, True)
        except Exception as e:  # noqa: BLE001 - a waiting caller must hear of it
            ended = stream_ended(self.address, e, self._opened.is_set())
        # A session this client ended or closed says so, whatever the stream did after.
        with self._lock:
            self._core.finish(self._core.ending or ended, clean=self._core.ended_cleanly)
        self._stop()
        self._opened.set()

    def _mark_lost(self) -> None:
        threading.Event.set(self.lost)

    def _stop(self) -> None:
        """The session is over: the requests end, the keeping thread wakes up to stop."""
        self._requests.put(_END)
        self._wake.set()

    def _cancel_stream(self) -> None:
        self._stop()
        self._stream.cancel()

    def _close(self, error: LocksError, clean: bool = False) -> None:
        """Ends the session with ``error`` and closes the stream: the node ends the
        transaction, releasing every lock."""
        with self._lock:
            self._core.close(error, clean)

    # The lease.

    def _check_lease(self) -> float | None:
        with self._lock:
            return self._core.check_lease()

    def _keep(self) -> None:
        """Sends a ping when nothing was sent for a while; ends the session when its lease runs
        out."""
        while True:
            left = self._check_lease()
            if left is None:
                return
            with self._lock:
                next_ping = self._core.next_ping()
            wait = min(next_ping - _lease.now(), left)
            if wait <= 0:
                try:
                    self._send(ping=pb.Ping())
                except LocksError:
                    return
                continue
            self._wake.wait(wait + 0.001)

    def _holds(self, grant: Grant) -> bool:
        with self._lock:
            return self._core.holds(grant)

    # Calls.

    def _send(self, call: Call | None = None, **kind: Any) -> None:
        """Sends one request; its answer goes to ``call`` (given its id before the request is
        queued) if given. Raises the session's end (:class:`LocksError`) once it is over."""
        with self._lock:
            self._requests.put(self._core.request(call, **kind))

    def _call(self, timeout: float | None = None, **kind: Any) -> tuple[pb.SessionEvent, int]:
        answers: queue.Queue[Answer] = queue.Queue()
        call = Call(answers)
        self._send(call, **kind)
        bound = self.timeout if timeout is None else timeout
        try:
            answer = answers.get(timeout=bound)
        except queue.Empty:
            with self._lock:
                self._core.forget_call(call)
            raise unanswered(self.address, bound) from None
        return answered(answer)
