"""Bounded waits on the event loop that never swallow a cancellation.

``asyncio.wait_for`` may return a result that arrived while its caller was being cancelled,
dropping the cancellation (Python before 3.12), and a cancelled ``Queue.get`` inside it may
have taken an item already. Here a wait only watches an ``asyncio.Event`` (watching takes
nothing) through ``asyncio.wait``, which raises the caller's cancellation as it comes.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Whether ``event`` is set within ``timeout`` seconds (``None``: for ever)."""
    if event.is_set():
        return True
    if timeout is not None and timeout <= 0:
        return False
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return event.is_set()


class Mailbox(Generic[T]):
    """An unbounded queue of ``T`` for one loop: ``put_nowait`` from the loop's thread, and
    :meth:`get` with a bound. An item is taken only by a ``get`` that returns it."""

    def __init__(self) -> None:
        """An empty mailbox."""
        self._items: deque[T] = deque()
        self._arrived = asyncio.Event()

    def put_nowait(self, item: T, /) -> None:
        """Adds ``item``."""
        self._items.append(item)
        self._arrived.set()

    def get_nowait(self) -> T | None:
        """The first item, or ``None`` when there is none."""
        if not self._items:
            return None
        item = self._items.popleft()
        if not self._items:
            self._arrived.clear()
        return item

    async def get(self, timeout: float | None = None) -> T | None:
        """The first item, waiting at most ``timeout`` seconds (``None``: for ever) for one;
        ``None`` if none came."""
        deadline = None if timeout is None else time.monotonic() + timeout
        # Another getter may take the item that woke this one: then wait again.
        while not self._items:
            left = None if deadline is None else deadline - time.monotonic()
            if not await wait_event(self._arrived, left):
                return None
        return self.get_nowait()

    def push_back(self, item: T) -> None:
        """Puts ``item`` back in front: the next :meth:`get` returns it again."""
        self._items.appendleft(item)
        self._arrived.set()
