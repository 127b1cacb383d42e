"""An asyncio session: one transaction on one node, over one bidirectional stream of
``grpc.aio``, with the same calls and promises as the thread-based :class:`locks_client.Session`
(its bookkeeping is the same :mod:`locks_client._core`).

- **A lock call given up is withdrawn.** When the task awaiting :meth:`Session.lock` is
  cancelled (``task.cancel()``, ``asyncio.wait_for`` running out, a ``TaskGroup`` failing), or
  the call's own bound :attr:`Session.timeout` passes, the session sends ``cancel`` for it and
  waits, at most :attr:`Session.cancel_timeout`, for the node's last word: the request is gone
  from every queue before the cancellation goes on. A grant that beat the cancel stays held
  (and is returned, when only the bound ran out) until it is unlocked or the session ends; if
  the node does not answer, the session is closed, and the node ends its transaction.
- **A lost lock is known before it is relied on.** :attr:`Session.lost` and
  :meth:`Grant.valid` read the clock: once the lease has run out, the session counts as lost,
  even in a process that was just resumed and whose loop has not run a task yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType

import grpc

from locks_client import lease as _lease
from locks_client._common import Metadata
from locks_client._core import (
    ABORT_ON_DEADLOCK,
    Answer,
    Call,
    SessionCore,
    SessionInfo,
    answered,
    gave_up,
    lock_bound,
    lock_request,
    stream_ended,
    unanswered,
    withdraw_interrupted,
)
from locks_client._proto import locks_pb2 as pb
from locks_client._proto import locks_pb2_grpc as pb_grpc
from locks_client.aio._wait import Mailbox, wait_event
from locks_client.errors import LocksError
from locks_client.events import Event, Grant, LockId, path_of, path_text, status_name


class Lost:
    """:attr:`Session.lost` of an asyncio session: set once a lock of the session was lost or
    the session ended, including by its lease running out. :meth:`is_set` reads the clock
    itself, as the thread-based :class:`locks_client.lease.Lost` does."""

    def __init__(self, check: Callable[[], float | None]) -> None:
        """``check()`` ends the session if its lease has run out (setting this flag) and
        returns the seconds the lease has left, or ``None`` when no lease is counted."""
        self._event = asyncio.Event()
        self._check = check

    def set(self) -> None:
        """Marks the session lost."""
        self._event.set()

    def is_set(self) -> bool:
        """Whether the session lost a lock or ended, the lease checked against the clock now."""
        if self._event.is_set():
            return True
        self._check()
        return self._event.is_set()

    async def wait(self, timeout: float | None = None) -> bool:
        """Waits until the session lost a lock or ended, at most ``timeout`` seconds; returns
        whether it did."""
        deadline = None if timeout is None else _lease.now() + timeout
        while not self.is_set():
            step = self._check()
            if deadline is not None:
                left = deadline - _lease.now()
                if left <= 0:
                    return False
                step = left if step is None else min(step, left)
            # Woken by set(), or when the lease would run out.
            await wait_event(self._event, None if step is None else step + 0.001)
        return True


class Session(SessionInfo):
    """One transaction on the node (see the module documentation), made by
    ``await client.session()``. Use it in ``async with``, or ``await`` :meth:`end`.

    Attributes: ``agent``, ``node``, ``address``, ``keepalive`` and ``abort_on_deadlock`` as
    the thread-based session's; ``lost`` (a :class:`Lost`); ``timeout`` (the bound, in
    seconds, on one call's wait for its answer; 30 by default) and ``cancel_timeout`` (the
    bound on the wait for the node's answer to a cancel; 10 by default).
    """

    def __init__(self, address: str, keepalive: float) -> None:
        """A session not opened yet; :meth:`Client.session` opens it."""
        self.timeout = 30.0
        self.cancel_timeout = 10.0
        self.lost = Lost(self._check_lease)
        self._requests: Mailbox[pb.SessionRequest | None] = Mailbox()
        self._events: Mailbox[Event] = Mailbox()
        self._opened = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stream: grpc.aio.StreamStreamCall[pb.SessionRequest, pb.SessionEvent] | None = None
        self._tasks: list[asyncio.Future[None]] = []
        self._core = SessionCore(
            self, address, keepalive, self._events, self.lost.set, self._cancel_stream
        )

    @classmethod
    async def _open(
        cls,
        stub: pb_grpc.LocksAsyncStub,
        metadata: Metadata,
        *,
        open_timeout: float,
        keepalive: float,
        address: str,
        abort_on_deadlock: bool,
    ) -> Session:
        """Opens a session on ``stub``'s node and waits, at most ``open_timeout`` seconds, for
        it to start. Raises :class:`LocksError` as the thread-based session does."""
        session = cls(address, keepalive)
        if abort_on_deadlock:
            metadata = (*metadata, (ABORT_ON_DEADLOCK, "true"))
        opened_at = _lease.now()
        session._stream = stub.Session(session._outgoing(), metadata=metadata)
        session._tasks.append(asyncio.ensure_future(session._read(opened_at)))
        try:
            started = await wait_event(session._opened, open_timeout)
        except BaseException:
            session._open_interrupted()
            raise
        session._check_started(started, open_timeout)
        session._tasks.append(asyncio.ensure_future(session._keep()))
        return session

    # The stream.

    async def _outgoing(self) -> AsyncIterator[pb.SessionRequest]:
        while True:
            request = await self._requests.get()
            if request is None:
                return
            yield request

    async def _read(self, opened_at: float) -> None:
        assert self._stream is not None
        ended = LocksError(grpc.StatusCode.CANCELLED, f"reading {self.address} was cancelled")
        try:
            async for message in self._stream:
                if not self._opened.is_set():
                    self._core.start(message, opened_at)
                    self._opened.set()
                else:
                    self._core.receive(message)
            ended = stream_ended(self.address, None, True)
        except Exception as e:  # noqa: BLE001 - a waiting caller must hear of it
            ended = stream_ended(self.address, e, self._opened.is_set())
        finally:
            # A session this client ended or closed says so, whatever the stream did after;
            # a stream cancelled by close() ends here with CancelledError, raised on.
            self._core.finish(self._core.ending or ended, clean=self._core.ended_cleanly)
            self._stop()
            self._opened.set()

    def _stop(self) -> None:
        """The session is over: the requests end, the keeping task stops."""
        self._requests.put_nowait(None)
        self._stopped.set()

    def _cancel_stream(self) -> None:
        self._stop()
        if self._stream is not None:
            self._stream.cancel()

    def _close(self, error: LocksError, clean: bool = False) -> None:
        self._core.close(error, clean)

    # The lease.

    def _check_lease(self) -> float | None:
        return self._core.check_lease()

    async def _keep(self) -> None:
        """Sends a ping when nothing was sent for a while; ends the session when its lease runs
        out."""
        while True:
            left = self._core.check_lease()
            if left is None:
                return
            wait = min(self._core.next_ping() - _lease.now(), left)
            if wait <= 0:
                try:
                    self._send(ping=pb.Ping())
                except LocksError:
                    return
                continue
            if await wait_event(self._stopped, wait + 0.001):
                return

    def _holds(self, grant: Grant) -> bool:
        return self._core.holds(grant)

    # Calls.

    def _send(self, call: Call | None = None, **kind: object) -> None:
        self._requests.put_nowait(self._core.request(call, **kind))

    async def _call(self, **kind: object) -> tuple[pb.SessionEvent, int]:
        answers: Mailbox[Answer] = Mailbox()
        call = Call(answers)
        self._send(call, **kind)
        try:
            answer = await answers.get(self.timeout)
        finally:
            self._core.forget_call(call)
        if answer is None:
            raise unanswered(self.address, self.timeout)
        return answered(answer)

    async def lock(
        self,
        lock: LockId,
        mode: str = "X",
        nodes: Sequence[str] = (),
        requirement: str = "all",
        wait: float | None = None,
    ) -> Grant:
        """Locks ``lock`` in ``mode`` on ``nodes`` with ``requirement``, and waits for the
        grant (arguments as :meth:`locks_client.Session.lock`; ``wait`` is the node's bound).

        Cancelling the awaiting task withdraws the request before the cancellation goes on; so
        does :attr:`timeout` running out (``wait`` plus 10 s when longer), which then raises
        DEADLINE_EXCEEDED unless the node granted the lock first, when the grant is returned.

        Returns the :class:`Grant` with its fencing tokens. Raises :class:`LocksError` as the
        thread-based :meth:`locks_client.Session.lock` does; ``ValueError`` for an unknown
        requirement.
        """
        request = lock_request(lock, mode, nodes, requirement, wait)
        bound = lock_bound(self.timeout, wait)
        answers: Mailbox[Answer] = Mailbox()
        call = Call(answers)
        self._send(call, lock=request)
        path = path_text(request.id)
        try:
            answer = await answers.get(bound)
        except BaseException:
            await self._withdraw(call, answers, path, bound, interrupted=True)
            raise
        if answer is None:
            grant = await self._withdraw(call, answers, path, bound)
            assert grant is not None  # the withdrawal raises otherwise
            return grant
        return self._core.locked(answer)

    async def _withdraw(
        self,
        call: Call,
        answers: Mailbox[Answer],
        path: str,
        bound: float,
        interrupted: bool = False,
    ) -> Grant | None:
        """Withdraws the ``lock`` call ``call`` that its caller gave up: the grant when the
        node granted it first; otherwise raises (returns ``None`` when ``interrupted``: the
        caller raises its own exception)."""
        why = gave_up(path, bound, interrupted)
        cancel = self._send_cancel(call, answers)
        try:
            answer = await answers.get(self.cancel_timeout)
        except BaseException:
            self._close(withdraw_interrupted(path))
            raise
        return self._core.withdrawn(call, cancel, answer, why, interrupted, self.cancel_timeout)

    async def lock_nowait(
        self, lock: LockId, mode: str = "X", nodes: Sequence[str] = (), requirement: str = "all"
    ) -> None:
        """Queues a lock request without waiting for the grant, which comes as a ``granted``
        event. Raises :class:`LocksError` for a refused request."""
        await self._call(lock_nowait=lock_request(lock, mode, nodes, requirement, None))

    async def unlock(self, lock: LockId) -> None:
        """Releases ``lock`` (or withdraws its request): its grants are no longer valid.
        Raises :class:`LocksError` for a refused request."""
        self._core.forget(lock)
        await self._call(unlock=pb.Unlock(id=path_of(lock)))

    async def convert(self, lock: LockId, mode: str) -> None:
        """Converts ``lock``, held or requested, down to the weaker ``mode``. Raises
        :class:`LocksError` for a refused request."""
        await self._call(convert=pb.Convert(id=path_of(lock), mode=mode))

    async def tokens(self, lock: LockId) -> Grant:
        """The current :class:`Grant` of ``lock``, held by this session, with its tokens as the
        node has them now. Raises :class:`LocksError` FAILED_PRECONDITION when not held."""
        message, generation = await self._call(tokens=pb.Tokens(id=path_of(lock)))
        return self._core.grant(message.granted, generation)

    def held(self) -> dict[str, Grant]:
        """The locks this session was told it holds and has not lost or released since, as
        ``{path: Grant}`` (a copy)."""
        return dict(self._core.held)

    async def status(self) -> str:
        """``no_locks``, ``waiting``, ``have_all_locks`` or ``cannot_serve``. Raises
        :class:`LocksError` once the session has ended."""
        message, _ = await self._call(status=pb.StatusRequest())
        return status_name(message.status.status)

    async def next_event(self, timeout: float | None = None) -> Event | None:
        """The next pushed :class:`Event`; ``None`` if none came within ``timeout`` seconds.
        The last one is ``closed``."""
        return await self._events.get(timeout)

    @property
    def ended(self) -> LocksError | None:
        """The :class:`LocksError` that ended the session, or ``None`` while it runs."""
        self._core.check_lease()
        return self._core.ended

    async def end(self) -> None:
        """Ends the transaction, every lock released, and waits (at most :attr:`timeout`) for
        the node to say so; then closes the stream. Never raises for a session that is over;
        cancelled while it waits, it closes the stream."""
        try:
            await self._call(end=pb.End())
        except LocksError:
            pass
        finally:
            self.close()

    async def __aenter__(self) -> Session:
        """The session itself; it ends with the block (:meth:`end`)."""
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Ends the session (:meth:`end`)."""
        await self.end()
