"""Leader election on asyncio: a :class:`Campaign` (or an observation) of a group's leadership,
read by a task of its own so that every wait on it is bounded. Its changes are the same
:class:`locks_client.Leader` values as the thread-based campaign's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Union

import grpc

from locks_client._proto import locks_pb2 as pb
from locks_client.aio._wait import Mailbox, wait_event
from locks_client.campaign import Leader, ended_error, not_leading_error, not_started_error
from locks_client.errors import LocksError
from locks_client.lease import now


class Campaign:
    """A campaign (or an observation) of a group's leadership, made by
    ``await client.campaign(...)`` or ``await client.observe(...)``: ``async for`` over the
    changes of leader, or wait for one with :meth:`next_change` or :meth:`wait_leading`;
    :meth:`resign` (or the end of an ``async with`` block) ends it."""

    def __init__(
        self,
        call: grpc.aio.UnaryStreamCall[pb.ElectionRequest, pb.LeaderEvent],
        address: str,
        group: str,
        via: Any = None,
    ) -> None:
        """Reads ``call``, the stream of ``LeaderEvent`` from ``address`` (the node ``via``)."""
        self.group = group
        self.address = address
        self._call = call
        self._via = via
        self._changes: Mailbox[Union[Leader, LocksError]] = Mailbox()
        # Set and replaced at every change (and at the end): a waiter watches the one it saw.
        self._changed = asyncio.Event()
        self._current: Leader | None = None
        self._ended: LocksError | None = None
        self._resigned = False
        self._secret = b""
        self._reader = asyncio.ensure_future(self._read())

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _read(self) -> None:
        failure = None
        try:
            async for e in self._call:
                self._secret = e.campaign_secret or self._secret
                change = Leader._of(e, self._via, self._secret)
                self._current = change
                self._notify()
                self._changes.put_nowait(change)
        except grpc.RpcError as e:
            failure = e
        finally:
            # A stream cancelled by resign() ends here with CancelledError, raised on.
            self._ended = ended_error(self.address, self.group, failure, self._resigned)
            self._notify()
            self._changes.put_nowait(self._ended)

    async def _until(self, done: Any, timeout: float | None) -> None:
        """Waits until ``done()`` or the stream's end, at most ``timeout`` seconds."""
        deadline = None if timeout is None else now() + timeout
        while not (done() or self._ended):
            left = None if deadline is None else deadline - now()
            if left is not None and left <= 0:
                return
            await wait_event(self._changed, left)

    async def _started(self, timeout: float) -> None:
        """Waits, at most ``timeout`` seconds, for the first change; raises
        :class:`LocksError` if the stream ended first or nothing came in time."""
        try:
            await self._until(lambda: self._current is not None, timeout)
        except BaseException:
            await self.resign()
            raise
        if self._current is not None:
            return
        if self._ended is None:
            await self.resign()
            raise not_started_error(self.address, self.group, timeout)
        raise self._ended.again()

    @property
    def leader(self) -> Leader | None:
        """The latest :class:`Leader` heard (``None`` before the first)."""
        return self._current

    async def next_change(self, timeout: float | None = None) -> Leader | None:
        """The next change of leader, or ``None`` if none came within ``timeout`` seconds.
        Raises :class:`LocksError` once the stream has ended (CANCELLED after :meth:`resign`)."""
        change = await self._changes.get(timeout)
        if isinstance(change, LocksError):
            self._changes.push_back(change)
            raise change.again()
        return change

    async def __aiter__(self) -> AsyncIterator[Leader]:
        """The changes of leader as they come; ends after :meth:`resign`. Raises
        :class:`LocksError` when the stream ends otherwise."""
        while True:
            try:
                change = await self.next_change()
            except LocksError as e:
                if self._resigned:
                    return
                raise e from None
            if change is not None:
                yield change

    async def wait_leading(self, timeout: float | None = None) -> Leader:
        """Waits until this campaign leads, at most ``timeout`` seconds (``None``: for ever);
        returns the :class:`Leader` with its term. Raises :class:`LocksError`:
        DEADLINE_EXCEEDED when it does not lead in time (saying who does), or the end of the
        stream."""
        await self._until(lambda: self._current is not None and self._current.is_me, timeout)
        if self._ended is not None:
            raise self._ended.again()
        if self._current is not None and self._current.is_me:
            return self._current
        raise not_leading_error(self.group, timeout, self._current)

    async def resign(self) -> None:
        """Ends the campaign (another campaigner takes over) or the observation, and waits for
        its stream to end."""
        self._resigned = True
        self._call.cancel()
        await asyncio.wait({self._reader})

    async def __aenter__(self) -> Campaign:
        """The campaign itself; it resigns at the end of the block."""
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Resigns (:meth:`resign`)."""
        await self.resign()
