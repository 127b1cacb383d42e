"""The client: channels to one or more nodes, sessions on them, campaigns, and the unary calls.

Each call that opens something (a session, a campaign) or asks something (info, tables, the
wait-for graph, a proclamation) is bounded by a ``timeout`` (the client's, 10 s by default) and
raises :class:`LocksError`, never a raw ``grpc.RpcError``. With several addresses, a session
(or a campaign, or a unary call) goes to the node that answered last; when it does not answer,
to the next one, each address getting an equal share of what is left of the timeout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc

from locks_client._common import (
    TLS,
    Failover,
    addresses,
    channel_options,
    graph_request,
    metadata,
    table_bound,
    table_request,
)
from locks_client._proto import locks_pb2 as pb
from locks_client._proto import locks_pb2_grpc as pb_grpc
from locks_client.campaign import Campaign, Leader, proclaim_request
from locks_client.errors import LocksError, from_rpc
from locks_client.events import Grant, LockId
from locks_client.session import Session

__all__ = ["TLS", "Client"]

T = TypeVar("T")


class _Node:
    """One address, its channel and stub."""

    def __init__(self, address: str, keepalive: float, tls: TLS | None) -> None:
        """A channel to ``address`` (it connects at first use)."""
        self.address = address
        options = channel_options(keepalive, tls)
        if tls is None:
            self.channel = grpc.insecure_channel(address, options=options)
        else:
            self.channel = grpc.secure_channel(address, tls.credentials(), options=options)
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

    def __init__(
        self,
        addr: str | Sequence[str],
        token: str | None = None,
        keepalive: float = 10.0,
        tls: TLS | None = None,
        timeout: float = 10.0,
    ) -> None:
        """Channels to the nodes of ``addr`` (connected on first use)."""
        self.addresses = addresses(addr)
        self.keepalive = keepalive
        self.timeout = timeout
        self._nodes = [_Node(a, keepalive, tls) for a in self.addresses]
        self._current = 0
        self._metadata = metadata(token)

    def _each(self, attempt: Callable[[_Node, float], T], timeout: float | None) -> T:
        """Runs ``attempt(node, seconds)`` on the node that answered last, then on the next
        ones while they cannot be reached, within ``timeout`` seconds in all; its result."""
        bound = self.timeout if timeout is None else timeout
        failover = Failover(len(self._nodes), self._current, bound)
        for index, seconds in failover.attempts():
            try:
                result = attempt(self._nodes[index], seconds)
            except LocksError as e:
                failover.failed(e)
                continue
            self._current = index
            return result
        raise failover.error()

    def _unary(self, method: str, request: Any, timeout: float | None) -> Any:
        def attempt(node: _Node, seconds: float) -> Any:
            try:
                return getattr(node.stub, method)(
                    request, metadata=self._metadata, timeout=seconds
                )
            except grpc.RpcError as e:
                raise from_rpc(e, node.address, seconds) from None

        return self._each(attempt, timeout)

    def info(self, timeout: float | None = None) -> tuple[str, list[str]]:
        """The node's name and the nodes it reaches: ``(node, [nodes])``. Raises
        :class:`LocksError` (DEADLINE_EXCEEDED or UNAVAILABLE when no node answers within
        ``timeout`` seconds, the client's by default)."""
        reply: pb.InfoReply = self._unary("Info", pb.InfoRequest(), timeout)
        return reply.node, list(reply.nodes)

    def table(
        self, max_locks_per_node: int = 0, timeout: float | None = None, wait: float | None = None
    ) -> pb.TableReply:
        """The lock tables of the node and of the nodes it reaches (a ``TableReply``: per node
        its locks' queues, and the nodes that did not answer within ``wait`` seconds, the
        node's default of 2 s when ``None``, 10 s at most). ``timeout`` bounds the call (by
        default the client's, or ``wait`` plus 5 s when longer). Raises :class:`LocksError`."""
        request = table_request(max_locks_per_node, wait)
        reply: pb.TableReply = self._unary(
            "Table", request, table_bound(self.timeout, timeout, wait)
        )
        return reply

    def graph(self, timeout: float | None = None, wait: float | None = None) -> pb.GraphReply:
        """The cluster's wait-for graph (a ``GraphReply``: edges, and the graph in DOT);
        ``wait`` and ``timeout`` as for :meth:`table`. Raises :class:`LocksError`."""
        request = graph_request(wait)
        reply: pb.GraphReply = self._unary(
            "Graph", request, table_bound(self.timeout, timeout, wait)
        )
        return reply

    def _election(
        self, method: str, request: pb.ElectionRequest, timeout: float | None
    ) -> Campaign:
        def attempt(node: _Node, seconds: float) -> Campaign:
            call = getattr(node.stub, method)(request, metadata=self._metadata)
            campaign = Campaign(call, node.address, request.group, via=node)
            campaign._started(seconds)
            return campaign

        return self._each(attempt, timeout)

    def campaign(
        self,
        group: str,
        nodes: Sequence[str] = (),
        value: bytes = b"",
        timeout: float | None = None,
    ) -> Campaign:
        """Campaigns for the leadership of ``group`` (over ``nodes``, names; none: the nodes the
        members learn of), announcing ``value`` when leading: a :class:`Campaign`, once the
        node has said who leads now. Raises :class:`LocksError` (INVALID_ARGUMENT for a bad
        group, DEADLINE_EXCEEDED or UNAVAILABLE when no node answers within ``timeout``
        seconds, the client's by default)."""
        request = pb.ElectionRequest(group=group, nodes=list(nodes), value=value)
        return self._election("Campaign", request, timeout)

    def observe(
        self, group: str, nodes: Sequence[str] = (), timeout: float | None = None
    ) -> Campaign:
        """Observes the leader of ``group`` without competing: a :class:`Campaign` (arguments
        and errors as :meth:`campaign`)."""
        request = pb.ElectionRequest(group=group, nodes=list(nodes))
        return self._election("Observe", request, timeout)

    def proclaim(self, group: str, leader: Leader, value: bytes, timeout: float = 30.0) -> None:
        """The leader (a :class:`Leader` of a campaign that leads ``group``) changes its value
        without a new election; returns once a majority of the group's nodes have it. It is
        sent to the node the campaign runs on, with the campaign's secret. Raises
        :class:`LocksError`: FAILED_PRECONDITION when that campaign does not lead in
        ``leader.term``, PERMISSION_DENIED for a :class:`Leader` not heard on the campaign's
        own stream (an observer's), DEADLINE_EXCEEDED past ``timeout`` seconds."""
        request = proclaim_request(group, leader, value)
        node = leader._via if isinstance(leader._via, _Node) else self._nodes[self._current]
        try:
            node.stub.Proclaim(request, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc(e, node.address, timeout) from None

    def session(self, timeout: float | None = None, abort_on_deadlock: bool = False) -> Session:
        """A new :class:`Session` (one transaction), on the node that answered last or the next
        one that answers. ``timeout``: the bound in seconds on its opening (the client's by
        default). ``abort_on_deadlock``: the transaction aborts when chosen as a deadlock's
        victim (its waiting call raises ABORTED, its locks are released) instead of
        surrendering a lock and asking for it again. Raises :class:`LocksError`:
        UNAUTHENTICATED, RESOURCE_EXHAUSTED (the node's session limits), or DEADLINE_EXCEEDED
        or UNAVAILABLE when no node started a session in time."""

        def attempt(node: _Node, seconds: float) -> Session:
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
    def lock(
        self,
        lock: LockId,
        mode: str = "X",
        nodes: Sequence[str] = (),
        requirement: str = "all",
        wait: float | None = None,
        timeout: float | None = None,
    ) -> Iterator[Grant]:
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

    def close(self) -> None:
        """Closes the channels."""
        for node in self._nodes:
            node.channel.close()

    def __enter__(self) -> Client:
        """The client itself; its channels close at the end of the block."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Closes the channels (:meth:`close`)."""
        self.close()
