"""The bookkeeping of one session, without its I/O: shared by the thread-based session
(:mod:`locks_client._stream`) and the asyncio one (:mod:`locks_client.aio.session`).

It numbers requests and remembers when each was sent (the lease runs from the send time of the
last answered one), routes each event the node sends (an answer to the call waiting for it, a
pushed event to the session's events), counts the generations of each lock (a grant is valid
while no loss or release of its lock came after it), and says what the node's answers to a
withdrawn ``lock`` call mean. The transports do the waiting: a queue they wait on is anything
with ``put_nowait``.

Not thread-safe: the thread-based session calls it under its lock; the asyncio one on its loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, Union

import grpc

from locks_client import lease as _lease
from locks_client._proto import locks_pb2 as pb
from locks_client.errors import LocksError, code_of
from locks_client.events import Event, Grant, LockId, cause_name, path_of, path_text, status_name

Answer = Union[tuple[pb.SessionEvent, int], LocksError]
"""What a waiting call gets: the node's event and the grant generation it was answered in, or
the error that ended the session."""

ABORT_ON_DEADLOCK = "locks-abort-on-deadlock"

REQUIREMENTS = {
    "all": pb.REQUIREMENT_ALL,
    "any": pb.REQUIREMENT_ANY,
    "majority": pb.REQUIREMENT_MAJORITY,
    "all_alive": pb.REQUIREMENT_ALL_ALIVE,
    "majority_alive": pb.REQUIREMENT_MAJORITY_ALIVE,
}


class AnswerSink(Protocol):
    """Where a call's answers go: a ``queue.Queue`` or the asyncio session's mailbox."""

    def put_nowait(self, item: Answer, /) -> None:
        """Hands over one answer without blocking."""


class EventSink(Protocol):
    """Where a session's pushed events go."""

    def put_nowait(self, item: Event, /) -> None:
        """Hands over one event without blocking."""


class Call:
    """A request whose caller waits for the answer: its id once sent, and where its answer goes
    (a call and the cancel sent for it share one)."""

    __slots__ = ("id", "answers")

    def __init__(self, answers: AnswerSink) -> None:
        """A call whose answers go to ``answers``."""
        self.id: int | None = None
        self.answers = answers


def lock_request(
    lock: LockId, mode: str, nodes: Sequence[str], requirement: str, wait: float | None
) -> pb.Lock:
    """The ``Lock`` message of a ``lock`` or ``lock_nowait`` call. Raises ``ValueError`` for an
    unknown requirement."""
    if requirement not in REQUIREMENTS:
        raise ValueError(f"requirement must be one of {sorted(REQUIREMENTS)}")
    request = pb.Lock(
        id=path_of(lock), mode=mode, nodes=list(nodes), requirement=REQUIREMENTS[requirement]
    )
    if wait is not None:
        request.wait_ms = int(wait * 1000)
    return request


def lock_bound(timeout: float, wait: float | None) -> float:
    """The client's own bound on a ``lock`` call: the session's ``timeout``, or ``wait`` plus
    10 s when that is longer (the node gives up first)."""
    return timeout if wait is None else max(timeout, wait + 10)


def message_of(answer: pb.SessionEvent) -> str:
    """``CODE: message`` of an ``error`` answer."""
    return f"{code_of(answer.error.code).name}: {answer.error.message}"


def answered(answer: Answer) -> tuple[pb.SessionEvent, int]:
    """The event and generation of an answer; raises the error it carries."""
    if isinstance(answer, LocksError):
        raise answer.again()
    message, generation = answer
    if message.WhichOneof("kind") == "error":
        raise LocksError(code_of(message.error.code), message.error.message)
    return message, generation


def unanswered(address: str, bound: float) -> LocksError:
    """The error of a call that got no answer within ``bound`` seconds."""
    return LocksError(
        grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer from {address} within {bound:g} s"
    )


class SessionInfo:
    """What both kinds of session share: what a session tells of itself, read from its core;
    the checks once its opening was waited for; the cancel that withdraws a ``lock`` call given
    up; and ``close``. Each transport has its own ``_send`` and ``_close``."""

    _core: SessionCore

    def _send(self, call: Call | None = None, **kind: Any) -> None:
        """Sends one request; its answer goes to ``call`` if given."""
        raise NotImplementedError

    def _close(self, error: LocksError, clean: bool = False) -> None:
        """Ends the session with ``error`` and closes the stream."""
        raise NotImplementedError

    def close(self) -> None:
        """Closes the stream without waiting: the node ends the transaction, releasing every
        lock, once it sees the stream go."""
        self._close(
            LocksError(
                grpc.StatusCode.FAILED_PRECONDITION, "the session was closed by this client"
            ),
            clean=True,
        )

    def _open_interrupted(self) -> None:
        """The wait for the session to start was interrupted: closes it."""
        self._close(LocksError(grpc.StatusCode.CANCELLED, "interrupted while the session opened"))

    def _check_started(self, started: bool, open_timeout: float) -> None:
        """After the wait for the session to start (``started``: it did within
        ``open_timeout`` seconds): raises DEADLINE_EXCEEDED, closing it, when it did not, or
        the session's end when it ended first."""
        if not started:
            error = LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"{self._core.address} did not start a session within {open_timeout:g} s",
            )
            self._close(error)
            raise error
        if self._core.ended is not None:
            raise self._core.ended.again()

    def _send_cancel(self, call: Call, answers: AnswerSink) -> Call:
        """Sends the cancel of ``call``, whose answer goes to ``answers``; the cancel's call.
        Sent nothing when the session is over: the node ended its transaction, nothing is
        granted."""
        cancel = Call(answers)
        try:
            self._send(cancel, cancel=pb.Cancel(request_id=call.id or 0))
        except LocksError:
            pass
        return cancel

    @property
    def address(self) -> str:
        """Where the session was opened."""
        return self._core.address

    @property
    def agent(self) -> str:
        """The transaction's id, as the lock table shows it."""
        return self._core.agent

    @property
    def node(self) -> str:
        """The name of the session's node."""
        return self._core.node

    @property
    def keepalive(self) -> float:
        """The lease's bound in seconds: the node's keepalive, or the client's when smaller."""
        return self._core.keepalive

    @property
    def abort_on_deadlock(self) -> bool:
        """Whether the transaction aborts as a deadlock's victim (the node says so)."""
        return self._core.abort_on_deadlock


def stream_ended(address: str, error: Exception | None, opened: bool) -> LocksError:
    """Why the session's stream from ``address`` ended: it raised ``error`` (``None``: it ran
    out), before the session started unless ``opened``."""
    if error is None:
        return LocksError(
            grpc.StatusCode.UNAVAILABLE, f"{address} ended the session without a reason"
        )
    if isinstance(error, LocksError):
        return error
    if isinstance(error, grpc.RpcError):
        what = "ended the session" if opened else "started no session"
        return LocksError(error.code(), f"{address} {what}: {error.details()}")
    return LocksError(grpc.StatusCode.INTERNAL, f"reading the session failed: {error!r}")


def withdraw_interrupted(path: str) -> LocksError:
    """What closes a session when the wait for the node to withdraw its given-up ``lock`` call
    of ``path`` is interrupted."""
    return LocksError(
        grpc.StatusCode.CANCELLED,
        f"the session was closed: {path} was given up, and the wait for the node to "
        "withdraw it was interrupted",
    )


def gave_up(path: str, bound: float, interrupted: bool) -> str:
    """Why a ``lock`` call of ``path`` was given up."""
    if interrupted:
        return f"the wait for {path} was interrupted"
    return f"{path} not granted within {bound:g} s (Session.timeout)"


class SessionCore:
    """One session's state (see the module documentation). ``owner`` is the public session,
    which grants name; ``mark_lost()`` sets its ``lost`` flag; ``cancel_stream()`` closes the
    stream, after which the node ends the transaction."""

    def __init__(
        self,
        owner: Any,
        address: str,
        keepalive: float,
        events: EventSink,
        mark_lost: Callable[[], None],
        cancel_stream: Callable[[], None],
    ) -> None:
        """A session opened at ``address`` with the client's own ``keepalive`` bound."""
        self.owner = owner
        self.address = address
        self.agent = ""
        self.node = ""
        self.keepalive = keepalive
        self.abort_on_deadlock = False
        self.events = events
        self.mark_lost = mark_lost
        self.cancel_stream = cancel_stream
        self.lease: _lease.Lease | None = None
        self.ended: LocksError | None = None
        # What ended the session on this client's side, and whether it was this client's own
        # doing (End, close) rather than a failure: the `closed` event says OK then.
        self.ending: LocksError | None = None
        self.ended_cleanly = False
        self.calls: dict[int, Call] = {}
        self.sent: dict[int, float] = {}
        self.next_id = 1
        self.last_send = _lease.now()
        self.generations: dict[str, int] = {}
        self.held: dict[str, Grant] = {}

    # The node's events.

    def start(self, message: pb.SessionEvent, opened_at: float) -> None:
        """The first event, which must be ``started``: the session's names, and its lease
        counted from ``opened_at``. Raises :class:`LocksError` for any other event."""
        if message.WhichOneof("kind") != "started":
            raise LocksError(
                grpc.StatusCode.INTERNAL, f"{self.address} began the session with {message}"
            )
        started = message.started
        self.agent = started.agent
        self.node = started.node
        self.abort_on_deadlock = started.abort_on_deadlock
        if started.keepalive_ms:
            self.keepalive = min(self.keepalive, started.keepalive_ms / 1000)
        self.lease = _lease.Lease(self.keepalive, opened_at)

    def receive(self, message: pb.SessionEvent) -> None:
        """Routes one event after ``started``: an answer to its call, a pushed event to the
        events."""
        kind = message.WhichOneof("kind")
        if message.request_id:
            sent = self.sent.pop(message.request_id, None)
            if sent is not None and self.lease is not None:
                self.lease.renew(sent)
            call = self.calls.pop(message.request_id, None)
            # The grant's generation is the one when it was answered, not when its caller
            # wakes: a loss read in between must make it invalid.
            generation = 0
            if kind in ("locked", "granted"):
                granted = message.locked.grant if kind == "locked" else message.granted
                generation = self.generations.get(path_text(granted.id), 0)
            if kind == "ended":
                self.ending = LocksError(
                    grpc.StatusCode.FAILED_PRECONDITION, "the session was ended by this client"
                )
                self.ended_cleanly = True
            if call is not None:
                call.answers.put_nowait((message, generation))
            return
        if kind == "granted":
            path = path_text(message.granted.id)
            grant = Grant._from(message.granted, self.owner, self.generations.get(path, 0))
            self.held[path] = grant
            self.events.put_nowait(Event("granted", lock=path, grant=grant))
        elif kind == "lost":
            path = path_text(message.lost.id)
            self.generations[path] = self.generations.get(path, 0) + 1
            self.held.pop(path, None)
            self.mark_lost()
            self.events.put_nowait(Event("lost", lock=path, cause=cause_name(message.lost.cause)))
        elif kind == "deadlock":
            d = message.deadlock
            self.events.put_nowait(
                Event(
                    "deadlock",
                    lock=path_text(d.id),
                    surrendered_by_this_session=d.surrendered_by_this_session,
                )
            )
        elif kind == "status":
            self.events.put_nowait(Event("status", status=status_name(message.status.status)))
        else:
            self.events.put_nowait(Event(kind or "unknown"))

    # The session's end.

    def finish(self, error: LocksError, first: Iterable[Event] = (), clean: bool = False) -> bool:
        """Ends the session with ``error`` (what later calls raise), unless it has ended
        already: ``first`` (events) and ``closed`` are pushed (with code OK when ``clean``:
        this client ended it), the session is marked lost and every waiting call fails.
        Whether it ended the session; the transport then stops its stream."""
        if self.ended is not None:
            return False
        self.ended = error
        calls, self.calls = self.calls, {}
        for event in first:
            self.events.put_nowait(event)
        code = grpc.StatusCode.OK if clean else error.code
        self.events.put_nowait(Event("closed", message=error.message, code=code))
        self.mark_lost()
        for call in calls.values():
            call.answers.put_nowait(error)
        return True

    def close(self, error: LocksError, clean: bool = False) -> None:
        """Ends the session with ``error`` and closes the stream: the node ends the
        transaction, releasing every lock."""
        if self.ending is None:
            self.ending = error
            self.ended_cleanly = clean
        self.finish(error, clean=clean)
        self.cancel_stream()

    # The lease.

    def check_lease(self) -> float | None:
        """Ends the session if its lease has run out; the seconds it has left (``None`` when
        the session has ended or not started)."""
        if self.ended is not None or self.lease is None:
            return None
        lease = self.lease
        left = lease.expires() - _lease.now()
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
        if self.finish(error, first=[lost]):
            self.cancel_stream()
        return 0.0

    def next_ping(self) -> float:
        """When a ping is due (on the lease's clock): a quarter of the bound after the last
        request sent."""
        keepalive = self.lease.keepalive if self.lease is not None else self.keepalive
        return self.last_send + keepalive / 4

    def holds(self, grant: Grant) -> bool:
        """Whether ``grant`` is still held as granted (the lease checked now)."""
        self.check_lease()
        if self.ended is not None:
            return False
        return self.generations.get(grant.lock, 0) == grant._generation

    # Requests and grants.

    def request(self, call: Call | None = None, **kind: Any) -> pb.SessionRequest:
        """The next request, numbered and timed; its answer will go to ``call`` (given its id
        now) if given. Raises the session's end (:class:`LocksError`) once it is over."""
        self.check_lease()
        if self.ended is not None:
            raise self.ended.again()
        request_id = self.next_id
        self.next_id += 1
        sent = _lease.now()
        self.sent[request_id] = sent
        self.last_send = sent
        if call is not None:
            call.id = request_id
            self.calls[request_id] = call
        return pb.SessionRequest(request_id=request_id, **kind)

    def grant(
        self,
        grant: pb.Grant,
        generation: int,
        deadlocks: Iterable[pb.LockId] = (),
        surrendered: Iterable[pb.LockId] = (),
    ) -> Grant:
        """The :class:`Grant` of an answer, recorded as held unless its lock was lost or
        released since the answer came."""
        granted = Grant._from(grant, self.owner, generation, deadlocks, surrendered)
        if self.generations.get(granted.lock, 0) == generation:
            self.held[granted.lock] = granted
        return granted

    def locked(self, answer: Answer) -> Grant:
        """The grant of a ``lock`` call's answer; raises the error it carries."""
        message, generation = answered(answer)
        locked = message.locked
        return self.grant(locked.grant, generation, locked.deadlocks, locked.surrendered)

    def forget(self, lock: LockId) -> None:
        """``lock`` is being released: its grants are no longer valid."""
        path = path_text(path_of(lock))
        self.generations[path] = self.generations.get(path, 0) + 1
        self.held.pop(path, None)

    def forget_call(self, call: Call) -> None:
        """Its caller no longer waits for ``call``'s answer."""
        if call.id is not None:
            self.calls.pop(call.id, None)

    # A lock call given up.

    def withdrawn(
        self,
        call: Call,
        cancel: Call,
        answer: Answer | None,
        gave_up: str,
        interrupted: bool,
        cancel_timeout: float,
    ) -> Grant | None:
        """The outcome of the ``lock`` call ``call`` that its caller gave up (``gave_up``
        says why) and that ``cancel`` withdrew, given the first answer after the cancel was
        sent (``None``: none within ``cancel_timeout``). The grant when the node granted it
        first; otherwise raises DEADLINE_EXCEEDED, or returns ``None`` when ``interrupted``
        (the caller raises its own exception then).

        The node answers the call before the cancel, so the cancel's own answer coming first
        means the node never had the call. A node that cannot cancel (it refuses the request)
        leaves the call waiting: the session is closed then, as when no answer comes."""
        if answer is None:
            why = f"{self.address} did not answer its cancel within {cancel_timeout:g} s"
            self._abandon(gave_up, why, interrupted)
            return None
        if isinstance(answer, LocksError):
            if interrupted:
                return None
            ended = f"{gave_up}; the session ended: {answer.message}"
            raise LocksError(grpc.StatusCode.DEADLINE_EXCEEDED, ended)
        message, generation = answer
        if message.request_id == cancel.id:
            self.forget_call(call)
            if message.WhichOneof("kind") == "error":
                why = f"{self.address} cannot withdraw it ({message_of(message)})"
                self._abandon(gave_up, why, interrupted)
                return None
            # The node never had the call: nothing to withdraw.
            if interrupted:
                return None
            raise LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"{gave_up}; the request was withdrawn"
            )
        kind = message.WhichOneof("kind")
        if kind == "locked":
            locked = message.locked
            grant = self.grant(locked.grant, generation, locked.deadlocks, locked.surrendered)
            return None if interrupted else grant
        if interrupted:
            return None
        if kind == "error" and message.error.code == grpc.StatusCode.CANCELLED.value[0]:
            raise LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"{gave_up}; the request was withdrawn"
            )
        answered(answer)
        raise LocksError(grpc.StatusCode.INTERNAL, f"{self.address} answered a lock with {kind}")

    def _abandon(self, gave_up: str, why: str, interrupted: bool) -> None:
        """Closes the session when the node did not withdraw a call given up (``why``): the
        node ends the transaction, so the call cannot be granted later. Raises
        DEADLINE_EXCEEDED unless ``interrupted``."""
        error = LocksError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"{gave_up}, and {why}: the session was closed, which releases its locks",
        )
        self.close(error)
        if not interrupted:
            raise error
