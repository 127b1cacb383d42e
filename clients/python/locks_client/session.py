"""A session: one transaction on one node, over one bidirectional stream.

Requests are sent on the stream, each with an id; a thread reads the node's events: an answer
goes to the call waiting for it (by request id), a pushed event (grant, loss, deadlock, status)
to :meth:`Session.next_event`. Another thread keeps the session's lease (:mod:`.lease`): it
sends a ``ping`` when nothing was sent for a quarter of the node's keepalive bound, and ends the
session once the lease has run out.

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
import threading

import grpc

from locks_client._stubs import pb
from locks_client.errors import LocksError, code_of
from locks_client.events import (
    Event,
    Grant,
    cause_name,
    path_of,
    path_text,
    status_name,
)
from locks_client.lease import Lease, Lost, now

_REQUIREMENTS = {
    "all": pb.REQUIREMENT_ALL,
    "any": pb.REQUIREMENT_ANY,
    "majority": pb.REQUIREMENT_MAJORITY,
    "all_alive": pb.REQUIREMENT_ALL_ALIVE,
    "majority_alive": pb.REQUIREMENT_MAJORITY_ALIVE,
}

_END = object()

_ABORT_ON_DEADLOCK = "locks-abort-on-deadlock"


def message_of(answer):
    """``CODE: message`` of an ``error`` answer."""
    error = answer[0].error
    return f"{code_of(error.code).name}: {error.message}"


class _Call:
    """A request whose caller waits for the answer: its id once sent, and the queue its answer
    goes to, ``(event, generation)`` or the :class:`LocksError` that ended the session (calls
    may share one queue)."""

    __slots__ = ("id", "answers")

    def __init__(self, answers=None):
        self.id = None
        self.answers = queue.Queue() if answers is None else answers


class Session:
    """One transaction on the node (see the module documentation). Use it as a context manager,
    or call :meth:`end`. Made by :meth:`Client.session`.

    Attributes: ``agent`` (the transaction's id, as the lock table shows it), ``node`` (the
    node's name), ``address`` (where it was opened), ``keepalive`` (the lease's bound in
    seconds), ``abort_on_deadlock``, ``lost`` (a ``threading.Event``, see :class:`Lost`),
    ``timeout`` (the bound, in seconds, on one call's wait for its answer; 30 by default) and
    ``cancel_timeout`` (the bound on the wait for the node's answer to a cancel; 10 by default).
    """

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
            self.close()
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
        """Sends one request; its answer goes to ``call`` (a :class:`_Call`, given its id
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
        call = _Call()
        self._send(call, **kind)
        bound = self.timeout if timeout is None else timeout
        try:
            answer = call.answers.get(timeout=bound)
        except queue.Empty:
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
        call = _Call()
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
        gave_up = f"{path} not granted within {bound:g} s (Session.timeout)"
        cancel = _Call(call.answers)
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
        if isinstance(answer, LocksError):
            if interrupted:
                return None
            raise LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"{gave_up}; the session ended: {answer.message}"
            )
        message = answer[0] if answer is not None else None
        if message is not None and message.request_id == cancel.id:
            with self._lock:
                self._calls.pop(call.id, None)
            if message.WhichOneof("kind") != "error":
                # The node never had the call: nothing to withdraw.
                if interrupted:
                    return None
                raise LocksError(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"{gave_up}; the request was withdrawn"
                )
            message = None
            why = f"{self.address} cannot withdraw it ({message_of(answer)})"
        else:
            why = f"{self.address} did not answer its cancel within {self.cancel_timeout:g} s"
        if message is None:
            error = LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"{gave_up}, and {why}: the session was closed, which releases its locks",
            )
            self._close(error)
            if interrupted:
                return None
            raise error
        kind = message.WhichOneof("kind")
        if kind == "locked":
            locked = message.locked
            grant = self._grant(locked.grant, answer[1], locked.deadlocks, locked.surrendered)
            return None if interrupted else grant
        if interrupted:
            return None
        if kind == "error" and message.error.code == grpc.StatusCode.CANCELLED.value[0]:
            raise LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"{gave_up}; the request was withdrawn"
            )
        self._answered(answer)
        raise LocksError(grpc.StatusCode.INTERNAL, f"{self.address} answered a lock with {kind}")

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
