"""The client on asyncio (``grpc.aio``): the same calls as :mod:`locks_client`, awaited.

    import asyncio
    from locks_client import Fence
    from locks_client.aio import Client

    async def main() -> None:
        client = Client("127.0.0.1:7100", token="s3cret")
        async with client.lock("db/x", mode="X", wait=5) as grant:
            print(grant.tokens)
        async with client.session() as session:
            await session.lock("db/a")
            print(await session.status())
        await client.close()

    asyncio.run(main())

A task awaiting :meth:`Session.lock` that is cancelled (or whose ``asyncio.wait_for`` runs
out) withdraws its request from the node before the cancellation goes on; a grant that came
first stays held until the session ends. :class:`Grant`, :class:`Event`, :class:`Leader`,
:class:`Fence`, :class:`TLS` and :class:`LocksError` are the thread-based client's.
"""

from locks_client._common import TLS
from locks_client.aio.campaign import Campaign
from locks_client.aio.client import Client, Opening
from locks_client.aio.session import Lost, Session
from locks_client.campaign import Leader
from locks_client.errors import LocksError
from locks_client.events import Event, Grant
from locks_client.fence import Fence

__all__ = [
    "Campaign",
    "Client",
    "Event",
    "Fence",
    "Grant",
    "Leader",
    "LocksError",
    "Lost",
    "Opening",
    "Session",
    "TLS",
]
