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

import queue

import grpc

from locks_client._stream import Call, SessionStream, message_of
from locks_client._stubs import pb
from locks_client.errors import LocksError
from locks_client.events import path_of, path_text, status_name

_REQUIREMENTS = {
    "all": pb.REQUIREMENT_ALL,
    "any": pb.REQUIREMENT_ANY,
    "majority": pb.REQUIREMENT_MAJORITY,
    "all_alive": pb.REQUIREMENT_ALL_ALIVE,
    "majority_alive": pb.REQUIREMENT_MAJORITY_ALIVE,
}


class Session(SessionStream):
    """One transaction on the node (see the module documentation). Use it as a context manager,
    or call :meth:`end`. Made by :meth:`Client.session`.

    Attributes: ``agent`` (the transaction's id, as the lock table shows it), ``node`` (the
    node's name), ``address`` (where it was opened), ``keepalive`` (the lease's bound in
    seconds), ``abort_on_deadlock``, ``lost`` (a ``threading.Event``, see :class:`Lost`),
    ``timeout`` (the bound, in seconds, on one call's wait for its answer; 30 by default) and
    ``cancel_timeout`` (the bound on the wait for the node's answer to a cancel; 10 by default).
    """

    @staticmethod
    def _lock_request(lock, mode, nodes, requirement, wait):
        if requirement not in _REQUIREMENTS:
            raise ValueError(f"requirement must be one of {sorted(_REQUIREMENTS)}")
        request = pb.Lock(
            id=path_of(lock), mode=mode, nodes=list(nodes), requirement=_REQUIREMENTS[requirement]
        )
        if wait is not None:
            request.wait_ms = int(wait * 1000)
        return request

    def lock(self, lock, mode="X", nodes=(), requirement="all", wait=None):
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
        request = self._lock_request(lock, mode, nodes, requirement, wait)
        bound = self.timeout if wait is None else max(self.timeout, wait + 10)
        call = Call()
        try:
            self._send(call, lock=request)
            answer = call.answers.get(timeout=bound)
        except queue.Empty:
            return self._withdraw(call, path_text(request.id), bound)
        except BaseException:
            # Interrupted: withdrawn if it was queued to be sent (an id), even if not sent yet.
            if call.id is not None:
                self._withdraw(call, path_text(request.id), bound, interrupted=True)
            raise
        message, generation = self._answered(answer)
        locked = message.locked
        return self._grant(locked.grant, generation, locked.deadlocks, locked.surrendered)

    def _withdraw(self, call, path, bound, interrupted=False):
        """Withdraws the ``lock`` call ``call`` that its caller gave up: the grant when the
        node granted it first; otherwise raises (returns ``None`` when ``interrupted``: the
        caller raises its own exception).

        The node answers the call before the cancel, so the cancel's own answer coming first
        means the node never had the call. A node that cannot cancel (it refuses the request)
        leaves the call waiting: the session is closed then, as when no answer comes."""
        if interrupted:
            gave_up = f"the wait for {path} was interrupted"
        else:
            gave_up = f"{path} not granted within {bound:g} s (Session.timeout)"
        cancel = Call(call.answers)
        try:
            self._send(cancel, cancel=pb.Cancel(request_id=call.id))
        except LocksError:
            pass  # The session is over: the node ended its transaction, nothing is granted.
        try:
            answer = call.answers.get(timeout=self.cancel_timeout)
        except queue.Empty:
            answer = None
        except BaseException:
            self._close(
                LocksError(
                    grpc.StatusCode.CANCELLED,
                    f"the session was closed: {path} was given up, and the wait for the node to "
                    "withdraw it was interrupted",
                )
            )
            raise
        if answer is None:
            why = f"{self.address} did not answer its cancel within {self.cancel_timeout:g} s"
            return self._abandon(gave_up, why, interrupted)
        if isinstance(answer, LocksError):
            if interrupted:
                return None
            raise LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"{gave_up}; the session ended: {answer.message}"
            )
        message, generation = answer
        if message.request_id == cancel.id:
            with self._lock:
                self._calls.pop(call.id, None)
            if message.WhichOneof("kind") == "error":
                why = f"{self.address} cannot withdraw it ({message_of(answer)})"
                return self._abandon(gave_up, why, interrupted)
            # The node never had the call: nothing to withdraw.
            if interrupted:
                return None
            raise LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"{gave_up}; the request was withdrawn"
            )
        kind = message.WhichOneof("kind")
        if kind == "locked":
            locked = message.locked
            grant = self._grant(locked.grant, generation, locked.deadlocks, locked.surrendered)
            return None if interrupted else grant
        if interrupted:
            return None
        if kind == "error" and message.error.code == grpc.StatusCode.CANCELLED.value[0]:
            raise LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"{gave_up}; the request was withdrawn"
            )
        self._answered(answer)
        raise LocksError(grpc.StatusCode.INTERNAL, f"{self.address} answered a lock with {kind}")

    def _abandon(self, gave_up, why, interrupted):
        """Closes the session when the node did not withdraw a call given up (``why``): the
        node ends the transaction, so the call cannot be granted later. Raises
        DEADLINE_EXCEEDED, or returns ``None`` when ``interrupted``."""
        error = LocksError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"{gave_up}, and {why}: the session was closed, which releases its locks",
        )
        self._close(error)
        if interrupted:
            return None
        raise error

    def lock_nowait(self, lock, mode="X", nodes=(), requirement="all"):
        """Queues a lock request (arguments as :meth:`lock`) without waiting: its grant comes as
        a ``granted`` event. Raises :class:`LocksError` for a refused request."""
        self._call(lock_nowait=self._lock_request(lock, mode, nodes, requirement, None))

    def unlock(self, lock):
        """Releases ``lock`` (or withdraws its request): its grants are no longer valid.
        Raises :class:`LocksError` for a refused request."""
        path = path_text(path_of(lock))
        with self._lock:
            self._generations[path] = self._generations.get(path, 0) + 1
            self._held.pop(path, None)
        self._call(unlock=pb.Unlock(id=path_of(lock)))

    def convert(self, lock, mode):
        """Converts ``lock``, held or requested, down to the weaker ``mode`` (``X`` to ``S``).
        Raises :class:`LocksError` for a refused request."""
        self._call(convert=pb.Convert(id=path_of(lock), mode=mode))

    def tokens(self, lock):
        """The current :class:`Grant` of ``lock``, a lock this session holds, with its fencing
        tokens as the node has them now. Raises :class:`LocksError` FAILED_PRECONDITION when it
        is not held now."""
        message, generation = self._call(tokens=pb.Tokens(id=path_of(lock)))
        return self._grant(message.granted, generation)

    def held(self):
        """The locks this session was told it holds and has not lost or released since, as
        ``{path: Grant}`` (a copy)."""
        with self._lock:
            return dict(self._held)

    def status(self):
        """``no_locks``, ``waiting``, ``have_all_locks`` or ``cannot_serve``. Raises
        :class:`LocksError` once the session has ended."""
        message, _ = self._call(status=pb.StatusRequest())
        return status_name(message.status.status)

    def next_event(self, timeout=None):
        """The next pushed :class:`Event`; ``None`` if none came within ``timeout`` seconds.
        The last one is ``closed``."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    @property
    def ended(self):
        """The :class:`LocksError` that ended the session (what its calls raise now), or
        ``None`` while it runs."""
        self._check_lease()
        return self._ended

    def end(self):
        """Ends the transaction, every lock released, and waits (at most :attr:`timeout`) for
        the node to say so; then closes the stream. Never raises for a session that is over."""
        try:
            self._call(end=pb.End())
        except LocksError:
            pass
        self.close()

    def close(self):
        """Closes the stream without waiting: the node ends the transaction, releasing every
        lock, once it sees the stream go."""
        self._close(
            LocksError(
                grpc.StatusCode.FAILED_PRECONDITION, "the session was closed by this client"
            ),
            clean=True,
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.end()
        return False
