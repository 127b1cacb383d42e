"""A Python client of a locks node's gRPC API (package ``locks.v1``).

    from locks_client import Client

    client = Client("127.0.0.1:7100", token="secret")
    with client.lock("db/x", mode="X") as grant:
        write_with(grant.tokens)          # {"a": 1042}: node -> fencing token

A :class:`Session` is one transaction on the node, for several locks, pushed events (grants,
losses, deadlocks) and a :attr:`Session.lost` flag. It ends with :meth:`Session.end`, when it is
closed, or when the process or its connection goes away: the node then releases its locks.
:meth:`Client.campaign` runs for a group's leadership (the term is the leader's fencing token),
and :meth:`Client.proclaim` changes the leader's value. :class:`TLS` connects to a node that
serves the API over TLS.
"""

from locks_client.client import TLS, Campaign, Client, Event, Grant, Leader, LocksError, Session

__all__ = ["Campaign", "Client", "Event", "Grant", "Leader", "LocksError", "Session", "TLS"]
