"""A session: one transaction on one node, over one bidirectional stream (:mod:`._stream`).

Two promises hold whatever the caller does:

- **Nothing is granted to a call after it failed.** A ``lock`` call that the client gives up
  (its bound :attr:`Session.timeout`, KeyboardInterrupt, any exception while it waits) sends
  ``cancel`` for it and waits, at most :attr:`Session.cancel_timeout`, for the node's last word
  on it: a grant that beat the cancel is kept (and returned, when only the bound ran out);
  otherwise the request is gone from every queue before the call raises. If the node does not
  answer in time, the session is closed, and the node ends its transaction.
- **A lost lock is known before it is relied on.** :attr:`Session.lost` and
  :meth:`Grant.valid` read the clock: once the lease has run out (the node may have ended the
  session and handed its locks to others), the session counts as lost, even in a process that
  was just resumed and whose threads have not run yet.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from types import TracebackType


from locks_client._core import (
    Answer,
    Call,
    gave_up,
    lock_bound,
    lock_request,
    withdraw_interrupted,
)
from locks_client._proto import locks_pb2 as pb
from locks_client._stream import SessionStream
from locks_client.errors import LocksError
from locks_client.events import Event, Grant, LockId, path_of, path_text, status_name


class Session(SessionStream):
    """One transaction on the node (see the module documentation). Use it as a context manager,
    or call :meth:`end`. Made by :meth:`Client.session`.

    Attributes: ``agent`` (the transaction's id, as the lock table shows it), ``node`` (the
    node's name), ``address`` (where it was opened), ``keepalive`` (the lease's bound in
    seconds), ``abort_on_deadlock``, ``lost`` (a ``threading.Event``, see :class:`Lost`),
    ``timeout`` (the bound, in seconds, on one call's wait for its answer; 30 by default) and
    ``cancel_timeout`` (the bound on the wait for the node's answer to a cancel; 10 by default).
    """

    def lock(
        self,
        lock: LockId,
        mode: str = "X",
        nodes: Sequence[str] = (),
        requirement: str = "all",
        wait: float | None = None,
    ) -> Grant:
        """Locks ``lock`` (``"a/b"`` or a list of keys) in ``mode`` on ``nodes`` (names; none:
        the session's node), ``requirement`` being how many of them must grant it (``all``,
        ``any``, ``majority``, ``all_alive``, ``majority_alive``), and waits for the grant.

        ``wait`` (seconds) is a bound the node keeps: past it the node withdraws the request.
        :attr:`timeout` is the client's own bound (``wait`` plus 10 s, when that is longer):
        past it the client withdraws the request (see the module documentation) and raises,
        unless the node granted it first, when the grant is returned. A KeyboardInterrupt (or
        any exception) while waiting withdraws it the same way and is raised again; a grant
        that beat the cancel stays held by the session until it ends.

        Returns the :class:`Grant` with its fencing tokens. Raises :class:`LocksError`: the
        node's refusal (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, FAILED_PRECONDITION,
        ABORTED for a deadlock's victim with ``abort_on_deadlock``), DEADLINE_EXCEEDED when a
        bound ran out (the request withdrawn), or the session's end. ``ValueError`` for an
        unknown requirement.
        """
        request = lock_request(lock, mode, nodes, requirement, wait)
        bound = lock_bound(self.timeout, wait)
        answers: queue.Queue[Answer] = queue.Queue()
        call = Call(answers)
        try:
            self._send(call, lock=request)
            answer = answers.get(timeout=bound)
        except queue.Empty:
            grant = self._withdraw(call, answers, path_text(request.id), bound)
            assert grant is not None  # the withdrawal raises otherwise
            return grant
        except BaseException:
            # Interrupted: withdrawn if it was queued to be sent (an id), even if not sent yet.
            if call.id is not None:
                self._withdraw(call, answers, path_text(request.id), bound, interrupted=True)
            raise
        with self._lock:
            return self._core.locked(answer)

    def _withdraw(
        self,
        call: Call,
        answers: queue.Queue[Answer],
        path: str,
        bound: float,
        interrupted: bool = False,
    ) -> Grant | None:
        """Withdraws the ``lock`` call ``call`` that its caller gave up: the grant when the
        node granted it first; otherwise raises (returns ``None`` when ``interrupted``: the
        caller raises its own exception)."""
        why = gave_up(path, bound, interrupted)
        cancel = self._send_cancel(call, answers)
        answer: Answer | None
        try:
            answer = answers.get(timeout=self.cancel_timeout)
        except queue.Empty:
            answer = None
        except BaseException:
            self._close(withdraw_interrupted(path))
            raise
        with self._lock:
            return self._core.withdrawn(
                call, cancel, answer, why, interrupted, self.cancel_timeout
            )

    def lock_nowait(
        self, lock: LockId, mode: str = "X", nodes: Sequence[str] = (), requirement: str = "all"
    ) -> None:
        """Queues a lock request (arguments as :meth:`lock`) without waiting: its grant comes as
        a ``granted`` event. Raises :class:`LocksError` for a refused request."""
        self._call(lock_nowait=lock_request(lock, mode, nodes, requirement, None))

    def unlock(self, lock: LockId) -> None:
        """Releases ``lock`` (or withdraws its request): its grants are no longer valid.
        Raises :class:`LocksError` for a refused request."""
        with self._lock:
            self._core.forget(lock)
        self._call(unlock=pb.Unlock(id=path_of(lock)))

    def convert(self, lock: LockId, mode: str) -> None:
        """Converts ``lock``, held or requested, down to the weaker ``mode`` (``X`` to ``S``).
        Raises :class:`LocksError` for a refused request."""
        self._call(convert=pb.Convert(id=path_of(lock), mode=mode))

    def tokens(self, lock: LockId) -> Grant:
        """The current :class:`Grant` of ``lock``, a lock this session holds, with its fencing
        tokens as the node has them now. Raises :class:`LocksError` FAILED_PRECONDITION when it
        is not held now."""
        message, generation = self._call(tokens=pb.Tokens(id=path_of(lock)))
        with self._lock:
            return self._core.grant(message.granted, generation)

    def held(self) -> dict[str, Grant]:
        """The locks this session was told it holds and has not lost or released since, as
        ``{path: Grant}`` (a copy)."""
        with self._lock:
            return dict(self._core.held)

    def status(self) -> str:
        """``no_locks``, ``waiting``, ``have_all_locks`` or ``cannot_serve``. Raises
        :class:`LocksError` once the session has ended."""
        message, _ = self._call(status=pb.StatusRequest())
        return status_name(message.status.status)

    def next_event(self, timeout: float | None = None) -> Event | None:
        """The next pushed :class:`Event`; ``None`` if none came within ``timeout`` seconds.
        The last one is ``closed``."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    @property
    def ended(self) -> LocksError | None:
        """The :class:`LocksError` that ended the session (what its calls raise now), or
        ``None`` while it runs."""
        with self._lock:
            self._core.check_lease()
            return self._core.ended

    def end(self) -> None:
        """Ends the transaction, every lock released, and waits (at most :attr:`timeout`) for
        the node to say so; then closes the stream. Never raises for a session that is over."""
        try:
            self._call(end=pb.End())
        except LocksError:
            pass
        self.close()

    def __enter__(self) -> Session:
        """The session itself; it ends with the block (:meth:`end`)."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Ends the session (:meth:`end`)."""
        self.end()
