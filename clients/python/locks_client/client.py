"""The client: a channel to one node, sessions on it, and the lock context manager.

A session sends its requests on one bidirectional stream and reads the node's events on a
thread of its own: an answer goes to the call waiting for it (by request id), a pushed event
(grant, loss, deadlock, status) to :meth:`Session.next_event`. A loss, or the stream failing,
sets :attr:`Session.lost`.
"""

import contextlib
import queue
import threading
import time
from dataclasses import dataclass, field

import grpc

from locks_client._stubs import pb, pb_grpc

_REQUIREMENTS = {
    "all": pb.REQUIREMENT_ALL,
    "any": pb.REQUIREMENT_ANY,
    "majority": pb.REQUIREMENT_MAJORITY,
    "all_alive": pb.REQUIREMENT_ALL_ALIVE,
    "majority_alive": pb.REQUIREMENT_MAJORITY_ALIVE,
}

_END = object()


class LocksError(Exception):
    """A request the node refused (or a session that ended): ``code`` is a ``grpc.StatusCode``."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def _code(number):
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code
    return grpc.StatusCode.UNKNOWN


def _path(lock):
    """A lock id from a path ``a/b/c`` or a list of keys."""
    if isinstance(lock, str):
        return lock.split("/")
    return [str(k) for k in lock]


@dataclass
class Grant:
    """A lock as held: its path, mode and fencing tokens (node -> version)."""

    lock: str
    mode: str
    tokens: dict = field(default_factory=dict)
    deadlocks: list = field(default_factory=list)

    @property
    def token_text(self):
        """``a@1042,b@977``: the tokens as ``locksctl`` hands them to its command."""
        return ",".join(f"{n}@{v}" for n, v in self.tokens.items())

    @classmethod
    def _from(cls, grant, deadlocks=()):
        return cls(
            lock="/".join(grant.id),
            mode=grant.mode,
            tokens={t.node: t.version for t in grant.tokens},
            deadlocks=["/".join(d.id) for d in deadlocks],
        )


@dataclass
class Event:
    """A pushed event: ``kind`` is ``granted``, ``lost``, ``deadlock`` or ``status``, or
    ``closed`` when the stream ended (``message`` then says why)."""

    kind: str
    lock: str = ""
    grant: Grant = None
    cause: str = ""
    surrendered_by_this_session: bool = False
    status: str = ""
    message: str = ""


def _status_name(number):
    return pb.TransactionStatus.Name(number).removeprefix("TRANSACTION_STATUS_").lower()


def _event(message):
    kind = message.WhichOneof("kind")
    if kind == "granted":
        return Event("granted", lock="/".join(message.granted.id), grant=Grant._from(message.granted))
    if kind == "lost":
        cause = pb.LossCause.Name(message.lost.cause).removeprefix("LOSS_CAUSE_").lower()
        return Event("lost", lock="/".join(message.lost.id), cause=cause)
    if kind == "deadlock":
        d = message.deadlock
        return Event(
            "deadlock",
            lock="/".join(d.id),
            surrendered_by_this_session=d.surrendered_by_this_session,
        )
    if kind == "status":
        return Event("status", status=_status_name(message.status.status))
    return Event(kind or "unknown")


class Session:
    """One transaction on the node (see the module docs). Use as a context manager, or call
    :meth:`end`."""

    def __init__(self, stub, metadata, timeout=30.0):
        self._requests = queue.Queue()
        self._waiting = {}
        self._lock = threading.Lock()
        self._next_id = 1
        self._events = queue.Queue()
        self._closed = False
        self.timeout = timeout
        self.lost = threading.Event()
        self._stream = stub.Session(self._outgoing(), metadata=metadata)
        first = next(self._stream)
        if first.WhichOneof("kind") != "started":
            raise LocksError(grpc.StatusCode.INTERNAL, f"unexpected first event {first}")
        self.agent = first.started.agent
        self.node = first.started.node
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _outgoing(self):
        while True:
            request = self._requests.get()
            if request is _END:
                return
            yield request

    def _read(self):
        why = "the session ended"
        try:
            for message in self._stream:
                if message.request_id:
                    with self._lock:
                        slot = self._waiting.pop(message.request_id, None)
                    if slot is not None:
                        slot.put(message)
                    continue
                event = _event(message)
                if event.kind == "lost":
                    self.lost.set()
                self._events.put(event)
        except grpc.RpcError as e:
            why = f"{e.code().name}: {e.details()}"
        self._closed = True
        self.lost.set()
        self._events.put(Event("closed", message=why))
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for slot in waiting.values():
            slot.put(None)

    def _call(self, **kind):
        slot = queue.Queue(maxsize=1)
        with self._lock:
            if self._closed:
                raise LocksError(grpc.StatusCode.UNAVAILABLE, "the session has ended")
            request_id = self._next_id
            self._next_id += 1
            self._waiting[request_id] = slot
        self._requests.put(pb.SessionRequest(request_id=request_id, **kind))
        try:
            answer = slot.get(timeout=self.timeout)
        except queue.Empty:
            raise LocksError(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer from the node") from None
        if answer is None:
            raise LocksError(grpc.StatusCode.UNAVAILABLE, "the session has ended")
        if answer.WhichOneof("kind") == "error":
            raise LocksError(_code(answer.error.code), answer.error.message)
        return answer

    @staticmethod
    def _lock_request(lock, mode, nodes, requirement, wait):
        if requirement not in _REQUIREMENTS:
            raise ValueError(f"requirement must be one of {sorted(_REQUIREMENTS)}")
        request = pb.Lock(
            id=_path(lock), mode=mode, nodes=list(nodes), requirement=_REQUIREMENTS[requirement]
        )
        if wait is not None:
            request.wait_ms = int(wait * 1000)
        return request

    def lock(self, lock, mode="X", nodes=(), requirement="all", wait=None):
        """Locks ``lock`` (``"a/b"`` or a list of keys) and waits for the grant; ``wait`` in
        seconds bounds the wait (then :class:`LocksError` with DEADLINE_EXCEEDED). Returns the
        :class:`Grant` with its fencing tokens."""
        request = self._lock_request(lock, mode, nodes, requirement, wait)
        if wait is not None:
            self.timeout = max(self.timeout, wait + 10)
        answer = self._call(lock=request)
        return Grant._from(answer.locked.grant, answer.locked.deadlocks)

    def lock_nowait(self, lock, mode="X", nodes=(), requirement="all"):
        """Queues a lock request; its grant comes as a ``granted`` event."""
        self._call(lock_nowait=self._lock_request(lock, mode, nodes, requirement, None))

    def unlock(self, lock):
        """Releases ``lock`` (or withdraws its request)."""
        self._call(unlock=pb.Unlock(id=_path(lock)))

    def convert(self, lock, mode):
        """Converts ``lock``, held or requested, down to the weaker ``mode`` (``X`` to ``S``)."""
        self._call(convert=pb.Convert(id=_path(lock), mode=mode))

    def status(self):
        """``no_locks``, ``waiting``, ``have_all_locks`` or ``cannot_serve``."""
        return _status_name(self._call(status=pb.StatusRequest()).status.status)

    def next_event(self, timeout=None):
        """The next pushed :class:`Event`; ``None`` if none came within ``timeout`` seconds."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    def end(self):
        """Ends the transaction: every lock is released."""
        if not self._closed:
            try:
                self._call(end=pb.End())
            except LocksError:
                pass
        self.close()

    def close(self):
        """Closes the stream (the node ends the transaction)."""
        self._requests.put(_END)
        self._stream.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.end()
        return False


@dataclass
class Leader:
    """A change of a group's leader, or of its value: ``term`` is the fencing token of the
    leader's writes; ``is_me`` says whether this campaign leads; ``value`` is the leader's
    (its campaign's, or the last it proclaimed)."""

    has_leader: bool
    leader: str
    node: str
    term: int
    is_me: bool
    value: bytes = b""


class Campaign:
    """A campaign (or an observation) of a group's leadership: iterate over the changes of
    leader; :meth:`resign` (or closing it) ends it."""

    def __init__(self, stream):
        self._stream = stream

    def __iter__(self):
        try:
            for e in self._stream:
                yield Leader(
                    e.has_leader, e.leader, e.leader_node, e.term, e.is_this_campaign, e.value
                )
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                raise LocksError(e.code(), e.details()) from None

    def wait_leading(self, timeout=None):
        """Waits until this campaign leads; returns the :class:`Leader` with its term."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for change in self:
            if change.is_me:
                return change
            if deadline is not None and time.monotonic() > deadline:
                break
        raise LocksError(grpc.StatusCode.DEADLINE_EXCEEDED, "not leading")

    def resign(self):
        """Ends the campaign: another campaigner takes over."""
        self._stream.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.resign()
        return False


@dataclass
class TLS:
    """TLS to the node (its ``--client-tls-*`` flags): ``ca``, the PEM of the CA its certificate
    must chain to; ``server_name``, the name it must carry; ``cert`` and ``key``, this client's
    PEM certificate chain and key, for a node that asks for client certificates. Each is bytes
    or a path to a file."""

    ca: object
    server_name: str = "locks"
    cert: object = None
    key: object = None


def _pem(value):
    if value is None or isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()


class Client:
    """A channel to one node's client API (``host:port``), with its token if it has one.
    ``keepalive`` (seconds): how long the node may stay silent before the connection counts
    as gone. ``tls``: a :class:`TLS` for a node that serves the API over TLS."""

    def __init__(self, addr, token=None, keepalive=10.0, tls=None):
        half = max(1, int(keepalive * 500))
        options = [
            ("grpc.keepalive_time_ms", half),
            ("grpc.keepalive_timeout_ms", half),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        if tls is None:
            self._channel = grpc.insecure_channel(addr, options=options)
        else:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_pem(tls.ca),
                private_key=_pem(tls.key),
                certificate_chain=_pem(tls.cert),
            )
            options.append(("grpc.ssl_target_name_override", tls.server_name))
            self._channel = grpc.secure_channel(addr, credentials, options=options)
        self._stub = pb_grpc.LocksStub(self._channel)
        self._metadata = [("authorization", f"Bearer {token}")] if token else []

    def info(self):
        """The node's name and the nodes it reaches: ``(node, [nodes])``."""
        reply = self._stub.Info(pb.InfoRequest(), metadata=self._metadata, timeout=10)
        return reply.node, list(reply.nodes)

    def campaign(self, group, nodes=(), value=b""):
        """Campaigns for the leadership of ``group``, announcing ``value`` when leading: a
        :class:`Campaign`."""
        request = pb.ElectionRequest(group=group, nodes=list(nodes), value=value)
        return Campaign(self._stub.Campaign(request, metadata=self._metadata))

    def proclaim(self, group, leader, value):
        """The leader (a :class:`Leader` of a campaign on this node that leads ``group``)
        changes its value without a new election; returns once a majority of the group's nodes
        have it."""
        request = pb.ProclaimRequest(
            group=group, leader=leader.leader, term=leader.term, value=value
        )
        try:
            self._stub.Proclaim(request, metadata=self._metadata, timeout=30)
        except grpc.RpcError as e:
            raise LocksError(e.code(), e.details()) from None

    def table(self, max_locks_per_node=0, timeout=0.0):
        """The lock tables of the node and of the nodes it reaches (a ``TableReply``: per node
        its locks' queues, and the nodes that did not answer within ``timeout`` seconds)."""
        request = pb.TableRequest(
            max_locks_per_node=max_locks_per_node, timeout_ms=int(timeout * 1000)
        )
        return self._stub.Table(request, metadata=self._metadata, timeout=30)

    def graph(self, timeout=0.0):
        """The cluster's wait-for graph (a ``GraphReply``: edges, and the graph in DOT)."""
        request = pb.GraphRequest(timeout_ms=int(timeout * 1000))
        return self._stub.Graph(request, metadata=self._metadata, timeout=30)

    def observe(self, group, nodes=()):
        """Observes the leader of ``group`` without competing: a :class:`Campaign`."""
        request = pb.ElectionRequest(group=group, nodes=list(nodes))
        return Campaign(self._stub.Observe(request, metadata=self._metadata))

    def session(self):
        """A new :class:`Session` (one transaction)."""
        try:
            return Session(self._stub, self._metadata)
        except grpc.RpcError as e:
            raise LocksError(e.code(), e.details()) from None

    @contextlib.contextmanager
    def lock(self, lock, mode="X", nodes=(), requirement="all", wait=None):
        """Holds ``lock`` for the ``with`` block, in a session of its own; yields the
        :class:`Grant`. The session's :attr:`Session.lost` is ``grant.session.lost``."""
        session = self.session()
        try:
            grant = session.lock(lock, mode=mode, nodes=nodes, requirement=requirement, wait=wait)
            grant.session = session
            yield grant
        finally:
            session.end()

    def close(self):
        """Closes the channel."""
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
