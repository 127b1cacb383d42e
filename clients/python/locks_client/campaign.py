"""Leader election: a :class:`Campaign` (or an observation) of a group's leadership, read on a
thread of its own so that every wait on it is bounded. :class:`Leader` and the errors are
shared with the asyncio campaign (:mod:`locks_client.aio`)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Union

import grpc

from locks_client._proto import locks_pb2 as pb
from locks_client.errors import LocksError


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
    # The node it was heard from: a proclamation goes there (the campaign runs there).
    _via: Any = field(default=None, repr=False, compare=False)
    # The campaign's secret (its own stream's campaign_secret), which a proclamation carries.
    _secret: bytes = field(default=b"", repr=False, compare=False)

    @classmethod
    def _of(cls, event: pb.LeaderEvent, via: Any, secret: bytes) -> Leader:
        return cls(
            event.has_leader,
            event.leader,
            event.leader_node,
            event.term,
            event.is_this_campaign,
            event.value,
            via,
            secret,
        )


def proclaim_request(group: str, leader: Leader, value: bytes) -> pb.ProclaimRequest:
    """The request by which ``leader`` (heard on its campaign's own stream) proclaims
    ``value``: it carries the campaign's secret."""
    return pb.ProclaimRequest(
        group=group,
        leader=leader.leader,
        term=leader.term,
        value=value,
        campaign_secret=leader._secret,
    )


def ended_error(address: str, group: str, rpc: grpc.RpcError | None, resigned: bool) -> LocksError:
    """Why a campaign's stream ended: ``rpc`` the failure, if any; CANCELLED after a resign."""
    if resigned:
        return LocksError(grpc.StatusCode.CANCELLED, f"the campaign for {group!r} resigned")
    if rpc is not None:
        return LocksError(rpc.code(), f"{address}: {rpc.details()}")
    return LocksError(grpc.StatusCode.UNAVAILABLE, f"{address} ended the stream of {group!r}")


def not_started_error(address: str, group: str, timeout: float) -> LocksError:
    """The error of a campaign whose node said nothing within ``timeout`` seconds."""
    return LocksError(
        grpc.StatusCode.DEADLINE_EXCEEDED,
        f"{address} did not start the campaign for {group!r} within {timeout:g} s",
    )


def not_leading_error(group: str, timeout: float | None, current: Leader | None) -> LocksError:
    """The error of a ``wait_leading`` that ran out, saying who leads."""
    if current is not None and current.has_leader:
        who = f"{current.leader} on {current.node} leads in term {current.term}"
    else:
        who = "no leader yet"
    after = "" if timeout is None else f" after {timeout:g} s"
    return LocksError(grpc.StatusCode.DEADLINE_EXCEEDED, f"not leading {group!r}{after}: {who}")


class Campaign:
    """A campaign (or an observation) of a group's leadership, made by :meth:`Client.campaign`
    or :meth:`Client.observe`: iterate over the changes of leader, or wait for one with
    :meth:`next_change` or :meth:`wait_leading`; :meth:`resign` (or the end of a ``with``
    block) ends it."""

    def __init__(self, call: Any, address: str, group: str, via: Any = None) -> None:
        """Reads ``call``, the stream of ``LeaderEvent`` from ``address`` (the node ``via``)."""
        self.group = group
        self.address = address
        self._call = call
        self._via = via
        self._changes: queue.Queue[Union[Leader, LocksError]] = queue.Queue()
        self._changed = threading.Condition()
        self._current: Leader | None = None
        self._ended: LocksError | None = None
        self._resigned = False
        self._secret = b""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        failure = None
        try:
            for e in self._call:
                self._secret = e.campaign_secret or self._secret
                change = Leader._of(e, self._via, self._secret)
                with self._changed:
                    self._current = change
                    self._changed.notify_all()
                self._changes.put(change)
        except grpc.RpcError as e:
            failure = e
        ended = ended_error(self.address, self.group, failure, self._resigned)
        with self._changed:
            self._ended = ended
            self._changed.notify_all()
        self._changes.put(ended)

    def _started(self, timeout: float) -> None:
        """Waits, at most ``timeout`` seconds, for the first change; raises
        :class:`LocksError` if the stream ended first or nothing came in time."""
        with self._changed:
            self._changed.wait_for(lambda: self._current or self._ended, timeout)
            current, ended = self._current, self._ended
        if current is not None:
            return
        if ended is None:
            self.resign()
            raise not_started_error(self.address, self.group, timeout)
        raise ended.again()

    @property
    def leader(self) -> Leader | None:
        """The latest :class:`Leader` heard (``None`` before the first)."""
        with self._changed:
            return self._current

    def next_change(self, timeout: float | None = None) -> Leader | None:
        """The next change of leader (a :class:`Leader`), or ``None`` if none came within
        ``timeout`` seconds. Raises :class:`LocksError` once the stream has ended (CANCELLED
        after :meth:`resign`)."""
        try:
            change = self._changes.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(change, LocksError):
            self._changes.put(change)
            raise change.again()
        return change

    def __iter__(self) -> Iterator[Leader]:
        """The changes of leader as they come; ends after :meth:`resign`. Raises
        :class:`LocksError` when the stream ends otherwise."""
        while True:
            try:
                change = self.next_change()
            except LocksError as e:
                if self._resigned:
                    return
                raise e from None
            if change is not None:
                yield change

    def wait_leading(self, timeout: float | None = None) -> Leader:
        """Waits until this campaign leads, at most ``timeout`` seconds (``None``: for ever);
        returns the :class:`Leader` with its term. Raises :class:`LocksError`:
        DEADLINE_EXCEEDED when it does not lead in time (saying who does), or the end of the
        stream."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._ended or (self._current and self._current.is_me), timeout
            )
            current, ended = self._current, self._ended
        if ended is not None:
            raise ended.again()
        if current is not None and current.is_me:
            return current
        raise not_leading_error(self.group, timeout, current)

    def resign(self) -> None:
        """Ends the campaign (another campaigner takes over) or the observation."""
        self._resigned = True
        self._call.cancel()

    def __enter__(self) -> Campaign:
        """The campaign itself; it resigns at the end of the block."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Resigns (:meth:`resign`)."""
        self.resign()
