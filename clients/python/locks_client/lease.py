"""The session lease: the client-side lease of a session (Chubby's "jeopardy"), and the clock it is counted on.

The node ends a session, releasing its locks, once it has heard nothing from the client's
connection for its keepalive bound (``Started.keepalive_ms``). Whatever the node answers was
sent by the client no earlier than the time the client took just before sending it, so the
session's locks are surely still held until *that send time* plus the bound: the lease runs
from the send time of the last request whose answer arrived, and ends ``margin`` before the
bound, with ``margin = max(10 % of the bound, 50 ms)`` (at most half of it). The margin absorbs
a difference in the rates of the two clocks (up to about 10 %) and the time between a check of
the lease and the action it guards; a write that must never land late is fenced as well
(:class:`locks_client.Fence`).

The clock assumption: the client's and the node's clocks advance at the same rate within the
margin; their readings are never compared. The lease is counted on ``CLOCK_BOOTTIME`` where
the system has it (Linux): it goes on counting while the machine is suspended, so a machine
that wakes up finds its leases expired, as the node does. Elsewhere it is counted on
``time.monotonic()``, which on some systems (macOS among them) stops while the machine sleeps:
there a suspended client may believe in a lease that has already ended. A process that is
merely paused (SIGSTOP, a long GC pause, a debugger) is covered on every system: the clock
keeps running while it is stopped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

_BOOTTIME: int | None
try:
    _BOOTTIME = time.CLOCK_BOOTTIME
    time.clock_gettime(_BOOTTIME)
except (AttributeError, OSError):
    _BOOTTIME = None


def now() -> float:
    """Seconds on the lease's clock (see the module documentation); only differences count."""
    if _BOOTTIME is not None:
        return time.clock_gettime(_BOOTTIME)
    return time.monotonic()


def margin_for(keepalive: float) -> float:
    """The part of a keepalive bound of ``keepalive`` seconds that the lease leaves unused:
    ``max(10 %, 50 ms)``, at most half the bound."""
    return min(max(0.1 * keepalive, 0.05), keepalive / 2)


class Lease:
    """A session's lease: it runs from the send time of the last answered request for the
    node's keepalive bound less the margin. Not thread-safe: the session guards it. Shared by
    the thread-based and the asyncio sessions."""

    def __init__(self, keepalive: float, since: float) -> None:
        """``keepalive``: the bound in seconds; ``since``: the send time (:func:`now`) of the
        request that opened the session."""
        self.keepalive = keepalive
        self.margin = margin_for(keepalive)
        self.since = since

    def renew(self, sent: float) -> None:
        """An answer arrived to a request sent at ``sent``: the lease runs from then at least."""
        if sent > self.since:
            self.since = sent

    def expires(self) -> float:
        """When the lease ends, on the :func:`now` clock."""
        return self.since + self.keepalive - self.margin

    def ping_interval(self) -> float:
        """How long the session may send nothing before it sends a ping: a quarter of the
        bound, so that three pings in a row may go unanswered before the lease is in danger."""
        return self.keepalive / 4


class Lost(threading.Event):
    """:attr:`locks_client.Session.lost`: set once a lock of the session was lost or the
    session ended, including by its lease running out.

    :meth:`is_set` reads the clock itself: a process resumed after a pause longer than the
    lease sees the session lost at its first check, before any background thread has run.
    """

    def __init__(self, check: Callable[[], float | None]) -> None:
        """``check()`` ends the session if its lease has run out (setting this event) and
        returns the seconds the lease has left, or ``None`` when no lease is counted."""
        super().__init__()
        self._check = check

    def is_set(self) -> bool:
        """Whether the session lost a lock or ended, the lease checked against the clock now."""
        if super().is_set():
            return True
        self._check()
        return super().is_set()

    isSet = is_set

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until the session lost a lock or ended, at most ``timeout`` seconds; returns
        whether it did."""
        deadline = None if timeout is None else now() + timeout
        while not self.is_set():
            step = self._check()
            if deadline is not None:
                left = deadline - now()
                if left <= 0:
                    return False
                step = left if step is None else min(step, left)
            # Woken by set(), or when the lease would run out.
            super().wait(None if step is None else step + 0.001)
        return True
