"""What a session hands back: :class:`Grant` (a lock as held) and :class:`Event` (something the
node pushed, or the end of the session), and the conversions of lock ids and the API's enums.
Shared by the thread-based and the asyncio sessions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import grpc

from locks_client._proto import locks_pb2 as pb

LockId = Union[str, Sequence[str]]
"""A lock: a path ``"db/x"`` or its keys ``["db", "x"]``."""


def path_of(lock: LockId) -> list[str]:
    """The lock id of ``lock``, a path ``"a/b/c"`` or a list of keys, as a list of strings."""
    if isinstance(lock, str):
        return lock.split("/")
    return [str(k) for k in lock]


def path_text(keys: Iterable[str]) -> str:
    """The path ``a/b/c`` of a lock id given as keys."""
    return "/".join(keys)


@dataclass
class Grant:
    """A lock as held: its path, mode and fencing tokens (node -> version).

    ``deadlocks``: the locks of the deadlocks resolved so far in the session (whoever gave
    way); ``surrendered``: the locks this session surrendered to resolve one (it lost each for a
    while and holds it again, with new tokens). ``session``: the session that holds it (a
    :class:`locks_client.Session`, or a :class:`locks_client.aio.Session`).
    """

    lock: str
    mode: str
    tokens: dict[str, int] = field(default_factory=dict)
    deadlocks: list[str] = field(default_factory=list)
    surrendered: list[str] = field(default_factory=list)
    session: Any = field(default=None, repr=False, compare=False)
    # How many times the session had lost or released this lock when it was granted.
    _generation: int = field(default=0, repr=False, compare=False)

    @property
    def token_text(self) -> str:
        """``a@1042,b@977``: the tokens as ``locksctl`` hands them to its command."""
        return ",".join(f"{n}@{v}" for n, v in self.tokens.items())

    def valid(self) -> bool:
        """Whether the lock is still held as granted: its session has not ended, the session's
        lease has not run out (checked against the clock now), and the lock was not lost or
        released since. A grant made outside a session is never valid. Check it right before
        acting on the lock, and fence the action too (:class:`locks_client.Fence`): the answer
        may be out of date by the time the action lands."""
        if self.session is None:
            return False
        return bool(self.session._holds(self))

    @classmethod
    def _from(
        cls,
        grant: pb.Grant,
        session: Any = None,
        generation: int = 0,
        deadlocks: Iterable[pb.LockId] = (),
        surrendered: Iterable[pb.LockId] = (),
    ) -> Grant:
        return cls(
            lock=path_text(grant.id),
            mode=grant.mode,
            tokens={t.node: t.version for t in grant.tokens},
            deadlocks=[path_text(d.id) for d in deadlocks],
            surrendered=[path_text(d.id) for d in surrendered],
            session=session,
            _generation=generation,
        )


@dataclass
class Event:
    """A pushed event. ``kind`` is one of:

    - ``granted``: ``lock`` is held, ``grant`` says how (also after a loss, with new tokens);
    - ``lost``: ``lock`` is no longer held; ``cause`` is ``node-down``, ``lease-expired``,
      ``surrendered``, ``aborted`` or ``revoked``. The client's own lease running out is a
      ``lost`` event with cause ``lease-expired`` and an empty ``lock`` (every lock of the
      session), ``message`` saying why;
    - ``deadlock``: a deadlock involving the session was resolved
      (``surrendered_by_this_session``);
    - ``status``: the transaction's ``status`` changed;
    - ``closed``: the session ended, the last event: ``code`` (a ``grpc.StatusCode``) and
      ``message`` say why: OK when this client ended or closed it, the node's status when the
      node ended the stream, the client's own code otherwise (ABORTED when the lease ran out).
    """

    kind: str
    lock: str = ""
    grant: Grant | None = None
    cause: str = ""
    surrendered_by_this_session: bool = False
    status: str = ""
    message: str = ""
    code: grpc.StatusCode | None = None


def status_name(number: pb.TransactionStatus.ValueType) -> str:
    """``no_locks``, ``waiting``, ``have_all_locks`` or ``cannot_serve``."""
    return pb.TransactionStatus.Name(number).removeprefix("TRANSACTION_STATUS_").lower()


def cause_name(number: pb.LossCause.ValueType) -> str:
    """``node-down``, ``lease-expired``, ``surrendered``, ``aborted`` or ``revoked``."""
    return pb.LossCause.Name(number).removeprefix("LOSS_CAUSE_").lower().replace("_", "-")
