"""What a session hands back: :class:`Grant` (a lock as held) and :class:`Event` (something the
node pushed, or the end of the session)."""

from dataclasses import dataclass, field

import grpc

from locks_client._stubs import pb


def path_of(lock):
    """The lock id of ``lock``, a path ``"a/b/c"`` or a list of keys, as a list of strings."""
    if isinstance(lock, str):
        return lock.split("/")
    return [str(k) for k in lock]


def path_text(keys):
    """The path ``a/b/c`` of a lock id given as keys."""
    return "/".join(keys)


@dataclass
class Grant:
    """A lock as held: its path, mode and fencing tokens (node -> version).

    ``deadlocks``: the locks of the deadlocks resolved so far in the session (whoever gave
    way); ``surrendered``: the locks this session surrendered to resolve one (it lost each for a
    while and holds it again, with new tokens). ``session``: the :class:`Session` that holds it.
    """

    lock: str
    mode: str
    tokens: dict = field(default_factory=dict)
    deadlocks: list = field(default_factory=list)
    surrendered: list = field(default_factory=list)
    session: object = field(default=None, repr=False, compare=False)
    # How many times the session had lost or released this lock when it was granted.
    _generation: int = field(default=0, repr=False, compare=False)

    @property
    def token_text(self):
        """``a@1042,b@977``: the tokens as ``locksctl`` hands them to its command."""
        return ",".join(f"{n}@{v}" for n, v in self.tokens.items())

    def valid(self):
        """Whether the lock is still held as granted: its session has not ended, the session's
        lease has not run out (checked against the clock now), and the lock was not lost or
        released since. A grant made outside a session is never valid. Check it right before
        acting on the lock, and fence the action too (:class:`Fence`): the answer may be out
        of date by the time the action lands."""
        if self.session is None:
            return False
        return self.session._holds(self)

    @classmethod
    def _from(cls, grant, session=None, generation=0, deadlocks=(), surrendered=()):
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
    - ``deadlock``: a deadlock involving the session was resolved (``surrendered_by_this_session``);
    - ``status``: the transaction's ``status`` changed;
    - ``closed``: the session ended, the last event: ``code`` (a ``grpc.StatusCode``) and
      ``message`` say why: OK when this client ended or closed it, the node's status when the
      node ended the stream, the client's own code otherwise (ABORTED when the lease ran out).
    """

    kind: str
    lock: str = ""
    grant: Grant = None
    cause: str = ""
    surrendered_by_this_session: bool = False
    status: str = ""
    message: str = ""
    code: grpc.StatusCode = None


def status_name(number):
    """``no_locks``, ``waiting``, ``have_all_locks`` or ``cannot_serve``."""
    return pb.TransactionStatus.Name(number).removeprefix("TRANSACTION_STATUS_").lower()


def cause_name(number):
    """``node-down``, ``lease-expired``, ``surrendered``, ``aborted`` or ``revoked``."""
    return pb.LossCause.Name(number).removeprefix("LOSS_CAUSE_").lower().replace("_", "-")
