import asyncio
import os

from locks_client.aio import Client


async def main() -> None:
    nodes = os.environ.get("LOCKS_NODES", "127.0.0.1:7100")
    async with Client(nodes, token=os.environ.get("LOCKS_TOKEN", "s3cret")) as client:
        async with client.lock("db/x", wait=5) as grant:
            print("holding", grant.lock, "with tokens", grant.token_text)

        async with client.session() as holder, client.session() as other:
            await holder.lock("db/y")
            try:
                # Cancelled after 1 s: the request leaves the lock's queue before this raises.
                await asyncio.wait_for(other.lock("db/y"), timeout=1)
            except asyncio.TimeoutError:
                print("gave up waiting:", await other.status())  # no_locks

        async with client.campaign("jobs", value=b"10.0.0.7:8080") as campaign:
            leader = await campaign.wait_leading(timeout=30)
            await client.proclaim("jobs", leader, b"10.0.0.7:8081")  # a new value, same term
            print("leading in term", leader.term)


asyncio.run(main())
