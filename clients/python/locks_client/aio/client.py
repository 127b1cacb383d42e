"""The asyncio client: ``grpc.aio`` channels to one or more nodes, sessions on them, campaigns,
and the unary calls, each bounded and failing over as the thread-based
:class:`locks_client.Client`'s do."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Sequence
from types import TracebackType
from typing import Any, Generic, TypeVar

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
from locks_client.aio.campaign import Campaign
from locks_client.aio.session import Session
from locks_client.campaign import Leader, proclaim_request
from locks_client.errors import LocksError, from_rpc
from locks_client.events import Grant, LockId

T = TypeVar("T")
Opened = TypeVar("Opened", Session, Campaign)


class _Node:
    """One address, and its channel and stub once first used: a ``grpc.aio`` channel belongs
    to the event loop it is made on."""

    def __init__(self, address: str, keepalive: float, tls: TLS | None) -> None:
        """The node at ``address``; its channel is made at first use."""
        self.address = address
        self._keepalive = keepalive
        self._tls = tls
        self.channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.LocksAsyncStub | None = None

    @property
    def stub(self) -> pb_grpc.LocksAsyncStub:
        """The node's stub, on a channel made on the running loop the first time."""
        if self._stub is None:
            options = channel_options(self._keepalive, self._tls)
            if self._tls is None:
                self.channel = grpc.aio.insecure_channel(self.address, options=options)
            else:
                credentials = self._tls.credentials()
                self.channel = grpc.aio.secure_channel(self.address, credentials, options=options)
            self._stub = pb_grpc.LocksStub(self.channel)
        return self._stub


class Opening(Generic[Opened]):
    """A session or a campaign being opened: ``await`` it for the :class:`Session` or
    :class:`Campaign`, or use it in ``async with``, which ends that at the block's end."""

    def __init__(self, opener: Callable[[], Awaitable[Opened]]) -> None:
        """What ``opener()`` opens."""
        self._open: Callable[[], Awaitable[Opened]] = opener
        self._opened: Opened | None = None

    def __await__(self) -> Generator[Any, Any, Opened]:
        """Opens it."""
        return self._open().__await__()

    async def __aenter__(self) -> Opened:
        """Opens it for the block."""
        self._opened = await self._open()
        return self._opened

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Ends what was opened (the session ends, the campaign resigns)."""
        if self._opened is not None:
            await self._opened.__aexit__(kind, error, traceback)


class Client:
    """``grpc.aio`` channels to a node's client API, or to several nodes' (``"host:port"``, a
    list of them, or a comma-separated string), with the nodes' token if they have one.
    Arguments and behaviour as the thread-based :class:`locks_client.Client`'s. The channels
    are made on first use, on the running event loop: use a client on one loop."""

    def __init__(
        self,
        addr: str | Sequence[str],
        token: str | None = None,
        keepalive: float = 10.0,
        tls: TLS | None = None,
        timeout: float = 10.0,
    ) -> None:
        """A client of the nodes of ``addr``."""
        self.addresses = addresses(addr)
        self.keepalive = keepalive
        self.timeout = timeout
        self._nodes = [_Node(a, keepalive, tls) for a in self.addresses]
        self._current = 0
        self._metadata = metadata(token)

    async def _each(
        self, attempt: Callable[[_Node, float], Awaitable[T]], timeout: float | None
    ) -> T:
        """Awaits ``attempt(node, seconds)`` on the node that answered last, then on the next
        ones while they cannot be reached, within ``timeout`` seconds in all; its result."""
        bound = self.timeout if timeout is None else timeout
        failover = Failover(len(self._nodes), self._current, bound)
        for index, seconds in failover.attempts():
            try:
                result = await attempt(self._nodes[index], seconds)
            except LocksError as e:
                failover.failed(e)
                continue
            self._current = index
            return result
        raise failover.error()

    async def _unary(self, method: str, request: Any, timeout: float | None) -> Any:
        async def attempt(node: _Node, seconds: float) -> Any:
            try:
                return await getattr(node.stub, method)(
                    request, metadata=self._metadata, timeout=seconds
                )
            except grpc.RpcError as e:
                raise from_rpc(e, node.address, seconds) from None

        return await self._each(attempt, timeout)

    async def info(self, timeout: float | None = None) -> tuple[str, list[str]]:
        """The node's name and the nodes it reaches: ``(node, [nodes])``. Raises
        :class:`LocksError` as :meth:`locks_client.Client.info` does."""
        reply: pb.InfoReply = await self._unary("Info", pb.InfoRequest(), timeout)
        return reply.node, list(reply.nodes)

    async def table(
        self, max_locks_per_node: int = 0, timeout: float | None = None, wait: float | None = None
    ) -> pb.TableReply:
        """The lock tables of the node and of the nodes it reaches, as
        :meth:`locks_client.Client.table`."""
        request = table_request(max_locks_per_node, wait)
        reply: pb.TableReply = await self._unary(
            "Table", request, table_bound(self.timeout, timeout, wait)
        )
        return reply

    async def graph(
        self, timeout: float | None = None, wait: float | None = None
    ) -> pb.GraphReply:
        """The cluster's wait-for graph, as :meth:`locks_client.Client.graph`."""
        request = graph_request(wait)
        reply: pb.GraphReply = await self._unary(
            "Graph", request, table_bound(self.timeout, timeout, wait)
        )
        return reply

    async def _election(
        self, method: str, request: pb.ElectionRequest, timeout: float | None
    ) -> Campaign:
        async def attempt(node: _Node, seconds: float) -> Campaign:
            call = getattr(node.stub, method)(request, metadata=self._metadata)
            campaign = Campaign(call, node.address, request.group, via=node)
            await campaign._started(seconds)
            return campaign

        return await self._each(attempt, timeout)

    def campaign(
        self,
        group: str,
        nodes: Sequence[str] = (),
        value: bytes = b"",
        timeout: float | None = None,
    ) -> Opening[Campaign]:
        """Campaigns for the leadership of ``group``: ``await`` it for the :class:`Campaign`
        once the node has said who leads now, or ``async with`` it to resign at the block's
        end. Arguments and errors as :meth:`locks_client.Client.campaign`."""
        request = pb.ElectionRequest(group=group, nodes=list(nodes), value=value)
        return Opening(lambda: self._election("Campaign", request, timeout))

    def observe(
        self, group: str, nodes: Sequence[str] = (), timeout: float | None = None
    ) -> Opening[Campaign]:
        """Observes the leader of ``group`` without competing (as :meth:`campaign`)."""
        request = pb.ElectionRequest(group=group, nodes=list(nodes))
        return Opening(lambda: self._election("Observe", request, timeout))

    async def proclaim(
        self, group: str, leader: Leader, value: bytes, timeout: float = 30.0
    ) -> None:
        """The leader (a :class:`locks_client.Leader` of a campaign of this client that leads
        ``group``) changes its value without a new election, carrying the campaign's secret.
        Raises :class:`LocksError` as :meth:`locks_client.Client.proclaim` does."""
        request = proclaim_request(group, leader, value)
        node = leader._via if isinstance(leader._via, _Node) else self._nodes[self._current]
        try:
            await node.stub.Proclaim(request, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc(e, node.address, timeout) from None

    def session(
        self, timeout: float | None = None, abort_on_deadlock: bool = False
    ) -> Opening[Session]:
        """A new :class:`Session` (one transaction), on the node that answered last or the next
        one that answers: ``await`` it, or ``async with`` it to end the session at the
        block's end. Arguments and errors as :meth:`locks_client.Client.session`."""

        async def attempt(node: _Node, seconds: float) -> Session:
            return await Session._open(
                node.stub,
                self._metadata,
                open_timeout=seconds,
                keepalive=self.keepalive,
                address=node.address,
                abort_on_deadlock=abort_on_deadlock,
            )

        return Opening(lambda: self._each(attempt, timeout))

    @contextlib.asynccontextmanager
    async def lock(
        self,
        lock: LockId,
        mode: str = "X",
        nodes: Sequence[str] = (),
        requirement: str = "all",
        wait: float | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[Grant]:
        """Holds ``lock`` for the ``async with`` block, in a session of its own; yields the
        :class:`Grant`. Arguments and errors as :meth:`locks_client.Client.lock`."""
        session = await self.session()
        try:
            if timeout is not None:
                session.timeout = timeout
            yield await session.lock(
                lock, mode=mode, nodes=nodes, requirement=requirement, wait=wait
            )
        finally:
            await session.end()

    async def close(self) -> None:
        """Closes the channels."""
        for node in self._nodes:
            if node.channel is not None:
                await node.channel.close()

    async def __aenter__(self) -> Client:
        """The client itself; its channels close at the end of the block."""
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Closes the channels (:meth:`close`)."""
        await self.close()
