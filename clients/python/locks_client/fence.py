"""Fencing: the resource's side of a lock. A holder can lose its lock without knowing it yet (a
pause, a partition); its late writes must be refused. Every grant carries one token per
granting node, and a new holder of the lock on a node gets a larger one; a :class:`Fence`
remembers the largest token it has seen per node and refuses older ones."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Union

import grpc

from locks_client.errors import LocksError
from locks_client.events import Grant

Tokens = Union[Grant, Mapping[str, int], str]
"""Fencing tokens: a :class:`Grant`, a mapping ``{node: version}``, or a text ``a@1042,b@977``
(``locksctl``'s ``LOCKS_TOKENS``)."""


def tokens_of(tokens: Tokens) -> dict[str, int]:
    """The tokens of a :class:`Grant`, a dict ``{node: version}`` or a text ``a@1042,b@977``
    (``locksctl``'s ``LOCKS_TOKENS``), as a dict. Raises ``ValueError`` for a malformed text."""
    if isinstance(tokens, Grant):
        tokens = tokens.tokens
    if isinstance(tokens, str):
        parsed = {}
        for part in filter(None, tokens.split(",")):
            node, at, version = part.rpartition("@")
            if not at or not node:
                raise ValueError(f"a token is node@version, not {part!r}")
            parsed[node] = int(version)
        return parsed
    return {str(node): int(version) for node, version in dict(tokens).items()}


class Fence:
    """The largest fencing token seen per node, for one resource. Thread-safe.

    A write carrying ``tokens`` is admitted unless one of its tokens is older (smaller) than
    the largest seen from the same node: the holder lost the lock on that node, and someone
    else has held it since. A token from a node never seen is admitted (comparing per node is
    what makes a lock granted by a majority safe: two majorities share a node). Admitting a
    write records its tokens. Tokens equal to those seen are admitted: the same holder writes
    again.

    ``seen``: the state to start from (``{node: version}``), for a resource that keeps the
    fence beside its data (see :attr:`seen`).
    """

    def __init__(self, seen: Tokens | None = None) -> None:
        """A fence that has seen ``seen`` (nothing by default)."""
        self._lock = threading.Lock()
        self._seen = tokens_of(seen or {})

    @property
    def seen(self) -> dict[str, int]:
        """A copy of the largest token seen per node: store it with the resource's data (in
        the same transaction as the write) to keep the fence across restarts."""
        with self._lock:
            return dict(self._seen)

    def admit(self, tokens: Tokens) -> bool:
        """Whether a write carrying ``tokens`` (a :class:`Grant`, a dict or a token text) may
        land: ``True``, and the tokens are recorded, or ``False`` when one of them is older than
        one seen from its node (nothing is recorded then). Raises ``ValueError`` for no tokens
        at all: an unfenced write cannot be judged."""
        parsed = tokens_of(tokens)
        if not parsed:
            raise ValueError("no fencing tokens to admit")
        with self._lock:
            if any(version < self._seen.get(node, version) for node, version in parsed.items()):
                return False
            for node, version in parsed.items():
                self._seen[node] = max(version, self._seen.get(node, version))
            return True

    def check(self, tokens: Tokens) -> None:
        """As :meth:`admit`, but raises :class:`LocksError` (FAILED_PRECONDITION), naming the
        node whose token is older, instead of returning ``False``."""
        parsed = tokens_of(tokens)
        if self.admit(parsed):
            return
        seen = self.seen
        older = [f"{n}@{v} < {n}@{seen[n]}" for n, v in parsed.items() if v < seen.get(n, v)]
        raise LocksError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"fenced: a newer holder has written ({', '.join(older)})",
        )
