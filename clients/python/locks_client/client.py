"""The client: channels to one or more nodes, sessions on them, campaigns, and the unary calls.

Each call that opens something (a session, a campaign) or asks something (info, tables, the
wait-for graph, a proclamation) is bounded by a ``timeout`` (the client's, 10 s by default) and
raises :class:`LocksError`, never a raw ``grpc.RpcError``. With several addresses, a session
(or a campaign, or a unary call) goes to the node that answered last; when it does not answer,
to the next one, each address getting an equal share of what is left of the timeout.
"""

import contextlib
from dataclasses import dataclass

import grpc

from locks_client._stubs import pb, pb_grpc
from locks_client.campaign import Campaign
from locks_client.errors import LocksError, from_rpc
from locks_client.lease import now
from locks_client.session import Session

# Failures that say a node cannot be reached (try the next address), not that it refused.
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


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


def _addresses(addr):
    addresses = addr.split(",") if isinstance(addr, str) else list(addr)
    addresses = [a.strip() for a in addresses if a.strip()]
    if not addresses:
        raise ValueError("no node address")
    return addresses


class _Node:
    """One address, its channel and stub."""

    def __init__(self, address, options, tls):
        self.address = address
        if tls is None:
            self.channel = grpc.insecure_channel(address, options=options)
        else:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_pem(tls.ca),
                private_key=_pem(tls.key),
                certificate_chain=_pem(tls.cert),
            )
            options = [*options, ("grpc.ssl_target_name_override", tls.server_name)]
            self.channel = grpc.secure_channel(address, credentials, options=options)
        self.stub = pb_grpc.LocksStub(self.channel)


class Client:
    """Channels to a node's client API, or to several nodes' (``"host:port"``, a list of them,
    or a comma-separated string), with the nodes' token if they have one.

    With several addresses, each new session opens on the node that answered last, or on the
    next one that answers when that one is down; a session's locks still end with its node
    (a session does not move).

    ``keepalive`` (seconds): how long the node may stay silent before the connection counts
    as gone, and the longest lease a session counts (see :class:`Session`). ``tls``: a
    :class:`TLS` for nodes that serve the API over TLS. ``timeout`` (seconds): the default bound
    on opening a session or a campaign and on the other calls.
    """

    def __init__(self, addr, token=None, keepalive=10.0, tls=None, timeout=10.0):
        half = max(1, int(keepalive * 500))
        options = [
            ("grpc.keepalive_time_ms", half),
            ("grpc.keepalive_timeout_ms", half),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        self.addresses = _addresses(addr)
        self.keepalive = keepalive
        self.timeout = timeout
        self._nodes = [_Node(a, options, tls) for a in self.addresses]
        self._current = 0
        self._metadata = [("authorization", f"Bearer {token}")] if token else []

    def _each(self, attempt, timeout):
        """Runs ``attempt(node, seconds)`` on the node that answered last, then on the next
        ones while they cannot be reached, within ``timeout`` seconds in all; its result."""
        timeout = self.timeout if timeout is None else timeout
        deadline = now() + timeout
        count = len(self._nodes)
        first = self._current
        failures = []
        for i in range(count):
            index = (first + i) % count
            node = self._nodes[index]
            left = deadline - now()
            if left <= 0:
                break
            try:
                result = attempt(node, left / (count - i))
            except LocksError as e:
                if e.code not in _UNREACHABLE:
                    raise
                failures.append(e)
                continue
            self._current = index
            return result
        if count == 1 and failures:
            raise failures[0]
        tried = "; ".join(f.message for f in failures) or "no time left"
        code = failures[-1].code if failures else grpc.StatusCode.DEADLINE_EXCEEDED
        raise LocksError(code, f"none of {count} nodes answered ({tried})")

    def _unary(self, method, request, timeout):
        def attempt(node, seconds):
            try:
                return getattr(node.stub, method)(
                    request, metadata=self._metadata, timeout=seconds
                )
            except grpc.RpcError as e:
                raise from_rpc(e, node.address, seconds) from None

        return self._each(attempt, timeout)

    def info(self, timeout=None):
        """The node's name and the nodes it reaches: ``(node, [nodes])``. Raises
        :class:`LocksError` (DEADLINE_EXCEEDED or UNAVAILABLE when no node answers within
        ``timeout`` seconds, the client's by default)."""
        reply = self._unary("Info", pb.InfoRequest(), timeout)
        return reply.node, list(reply.nodes)

    def table(self, max_locks_per_node=0, timeout=None, wait=None):
        """The lock tables of the node and of the nodes it reaches (a ``TableReply``: per node
        its locks' queues, and the nodes that did not answer within ``wait`` seconds, the
        node's default of 2 s when ``None``, 10 s at most). ``timeout`` bounds the call (by
        default the client's, or ``wait`` plus 5 s when longer). Raises :class:`LocksError`."""
        request = pb.TableRequest(
            max_locks_per_node=max_locks_per_node, timeout_ms=int((wait or 0) * 1000)
        )
        return self._unary("Table", request, self._bound(timeout, wait))

    def graph(self, timeout=None, wait=None):
        """The cluster's wait-for graph (a ``GraphReply``: edges, and the graph in DOT);
        ``wait`` and ``timeout`` as for :meth:`table`. Raises :class:`LocksError`."""
        request = pb.GraphRequest(timeout_ms=int((wait or 0) * 1000))
        return self._unary("Graph", request, self._bound(timeout, wait))

    def _bound(self, timeout, wait):
        if timeout is not None:
            return timeout
        return max(self.timeout, (wait if wait is not None else 2.0) + 5)

    def _election(self, method, request, timeout):
        def attempt(node, seconds):
            call = getattr(node.stub, method)(request, metadata=self._metadata)
            campaign = Campaign(call, node.address, request.group, via=node)
            campaign._started(seconds)
            return campaign

        return self._each(attempt, timeout)

    def campaign(self, group, nodes=(), value=b"", timeout=None):
        """Campaigns for the leadership of ``group`` (over ``nodes``, names; none: the nodes the
        members learn of), announcing ``value`` when leading: a :class:`Campaign`, once the
        node has said who leads now. Raises :class:`LocksError` (INVALID_ARGUMENT for a bad
        group, DEADLINE_EXCEEDED or UNAVAILABLE when no node answers within ``timeout``
        seconds, the client's by default)."""
        request = pb.ElectionRequest(group=group, nodes=list(nodes), value=value)
        return self._election("Campaign", request, timeout)

    def observe(self, group, nodes=(), timeout=None):
        """Observes the leader of ``group`` without competing: a :class:`Campaign` (arguments
        and errors as :meth:`campaign`)."""
        request = pb.ElectionRequest(group=group, nodes=list(nodes))
        return self._election("Observe", request, timeout)

    def proclaim(self, group, leader, value, timeout=30.0):
        """The leader (a :class:`Leader` of a campaign that leads ``group``) changes its value
        without a new election; returns once a majority of the group's nodes have it. It is
        sent to the node the campaign runs on, with the campaign's secret. Raises
        :class:`LocksError`: FAILED_PRECONDITION when that campaign does not lead in
        ``leader.term``, PERMISSION_DENIED for a :class:`Leader` not heard on the campaign's
        own stream (an observer's), DEADLINE_EXCEEDED past ``timeout`` seconds."""
        request = pb.ProclaimRequest(
            group=group,
            leader=leader.leader,
            term=leader.term,
            value=value,
            campaign_secret=leader._secret,
        )
        node = leader._via or self._nodes[self._current]
        try:
            node.stub.Proclaim(request, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc(e, node.address, timeout) from None

    def session(self, timeout=None, abort_on_deadlock=False):
        """A new :class:`Session` (one transaction), on the node that answered last or the next
        one that answers. ``timeout``: the bound in seconds on its opening (the client's by
        default). ``abort_on_deadlock``: the transaction aborts when chosen as a deadlock's
        victim (its waiting call raises ABORTED, its locks are released) instead of
        surrendering a lock and asking for it again. Raises :class:`LocksError`:
        UNAUTHENTICATED, RESOURCE_EXHAUSTED (the node's session limits), or DEADLINE_EXCEEDED
        or UNAVAILABLE when no node started a session in time."""

        def attempt(node, seconds):
            return Session(
                node.stub,
                self._metadata,
                open_timeout=seconds,
                keepalive=self.keepalive,
                address=node.address,
                abort_on_deadlock=abort_on_deadlock,
            )

        return self._each(attempt, timeout)

    @contextlib.contextmanager
    def lock(self, lock, mode="X", nodes=(), requirement="all", wait=None, timeout=None):
        """Holds ``lock`` for the ``with`` block, in a session of its own; yields the
        :class:`Grant` (``grant.session`` is the session; check ``grant.valid()`` before acting
        on it). Arguments as :meth:`Session.lock`; ``timeout`` sets the session's
        :attr:`Session.timeout`. Raises :class:`LocksError` as :meth:`session` and
        :meth:`Session.lock` do."""
        session = self.session()
        try:
            if timeout is not None:
                session.timeout = timeout
            yield session.lock(lock, mode=mode, nodes=nodes, requirement=requirement, wait=wait)
        finally:
            session.end()

    def close(self):
        """Closes the channels."""
        for node in self._nodes:
            node.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
