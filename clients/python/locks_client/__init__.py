"""A Python client of a locks node's gRPC API (package ``locks.v1``), on threads; the same
calls on asyncio are in :mod:`locks_client.aio`.

    from locks_client import Client, Fence

    client = Client(["127.0.0.1:7101", "127.0.0.1:7102"], token="secret")
    fence = Fence()                       # the resource's side: largest token seen per node
    with client.lock("db/x", mode="X") as grant:
        if grant.valid() and fence.admit(grant.tokens):   # {"a": 1042}: node -> token
            write()

A :class:`Session` is one transaction on one node, for several locks, with pushed events
(grants, losses, deadlocks) and a :attr:`Session.lost` flag. It ends with :meth:`Session.end`,
when it is closed, or when the process or its connection goes away: the node then releases its
locks. :meth:`Client.campaign` runs for a group's leadership (the term is the leader's fencing
token), and :meth:`Client.proclaim` changes the leader's value. :class:`TLS` connects to a node
that serves the API over TLS.

What the client promises:

- **Every wait is bounded, every refusal explained.** Opening a session or a campaign and the
  other calls take a ``timeout``; every failure is a :class:`LocksError` with a
  ``grpc.StatusCode`` and a message (a stream the node ended carries the node's status).
- **A lock call given up is withdrawn.** When ``Session.lock`` gives up (its
  ``Session.timeout``, KeyboardInterrupt; on asyncio, the awaiting task cancelled), the client
  cancels the request and waits for the node's last word, so nothing is granted to a call
  after it failed (:mod:`.session`).
- **A lease tells a holder it may have lost its locks.** The session counts the node's
  keepalive bound from the send time of its last answered request, less a margin; past it,
  ``Session.lost`` is set (cause ``lease-expired``) and ``Grant.valid()`` is false, checked
  against the clock at the call, so a process resumed after a long pause knows at once. The
  clock assumption and the margin are in :mod:`.lease`.
- **Fencing makes a late write harmless.** :class:`Fence` remembers the largest token per node
  and refuses older ones: the resource's side of the lock.
"""

from locks_client.campaign import Campaign, Leader
from locks_client.client import TLS, Client
from locks_client.errors import LocksError
from locks_client.events import Event, Grant, LockId
from locks_client.fence import Fence, Tokens
from locks_client.session import Session

# The major version is the API's: 1.x.y speaks locks.v1. pyproject.toml reads it from here.
__version__ = "1.0.0"

__all__ = [
    "Campaign",
    "Client",
    "Event",
    "Fence",
    "Grant",
    "Leader",
    "LockId",
    "LocksError",
    "Session",
    "TLS",
    "Tokens",
]
