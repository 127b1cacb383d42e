"""Leader election: a :class:`Campaign` (or an observation) of a group's leadership, read on a
thread of its own so that every wait on it is bounded."""

import queue
import threading
from dataclasses import dataclass, field

import grpc

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
    _via: object = field(default=None, repr=False, compare=False)
    # The campaign's secret (its own stream's campaign_secret), which a proclamation carries.
    _secret: bytes = field(default=b"", repr=False, compare=False)


class Campaign:
    """A campaign (or an observation) of a group's leadership, made by :meth:`Client.campaign`
    or :meth:`Client.observe`: iterate over the changes of leader, or wait for one with
    :meth:`next_change` or :meth:`wait_leading`; :meth:`resign` (or the end of a ``with``
    block) ends it."""

    def __init__(self, call, address, group, via=None):
        self.group = group
        self.address = address
        self._call = call
        self._via = via
        self._changes = queue.Queue()
        self._changed = threading.Condition()
        self._current = None
        self._ended = None
        self._resigned = False
        self._secret = b""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for e in self._call:
                self._secret = e.campaign_secret or self._secret
                change = Leader(
                    e.has_leader,
                    e.leader,
                    e.leader_node,
                    e.term,
                    e.is_this_campaign,
                    e.value,
                    self._via,
                    self._secret,
                )
                with self._changed:
                    self._current = change
                    self._changed.notify_all()
                self._changes.put(change)
            ended = LocksError(
                grpc.StatusCode.UNAVAILABLE, f"{self.address} ended the stream of {self.group!r}"
            )
        except grpc.RpcError as e:
            ended = LocksError(e.code(), f"{self.address}: {e.details()}")
        if self._resigned:
            ended = LocksError(
                grpc.StatusCode.CANCELLED, f"the campaign for {self.group!r} resigned"
            )
        with self._changed:
            self._ended = ended
            self._changed.notify_all()
        self._changes.put(ended)

    def _started(self, timeout):
        """Waits, at most ``timeout`` seconds, for the first change; raises
        :class:`LocksError` if the stream ended first or nothing came in time."""
        with self._changed:
            self._changed.wait_for(lambda: self._current or self._ended, timeout)
            current, ended = self._current, self._ended
        if current is not None:
            return
        if ended is None:
            self.resign()
            raise LocksError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"{self.address} did not start the campaign for {self.group!r} within "
                f"{timeout:g} s",
            )
        raise LocksError(ended.code, ended.message)

    @property
    def leader(self):
        """The latest :class:`Leader` heard (``None`` before the first)."""
        with self._changed:
            return self._current

    def next_change(self, timeout=None):
        """The next change of leader (a :class:`Leader`), or ``None`` if none came within
        ``timeout`` seconds. Raises :class:`LocksError` once the stream has ended (CANCELLED
        after :meth:`resign`)."""
        try:
            change = self._changes.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(change, LocksError):
            self._changes.put(change)
            raise LocksError(change.code, change.message)
        return change

    def __iter__(self):
        """The changes of leader as they come; ends after :meth:`resign`. Raises
        :class:`LocksError` when the stream ends otherwise."""
        while True:
            try:
                yield self.next_change()
            except LocksError as e:
                if self._resigned:
                    return
                raise e from None

    def wait_leading(self, timeout=None):
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
            raise LocksError(ended.code, ended.message)
        if current is not None and current.is_me:
            return current
        if current is not None and current.has_leader:
            who = f"{current.leader} on {current.node} leads in term {current.term}"
        else:
            who = "no leader yet"
        raise LocksError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"not leading {self.group!r} after {timeout:g} s: {who}",
        )

    def resign(self):
        """Ends the campaign (another campaigner takes over) or the observation."""
        self._resigned = True
        self._call.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.resign()
        return False
