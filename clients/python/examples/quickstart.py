import os

from locks_client import Client, Fence

# As for locksctl: the nodes' client addresses and their token, from the environment.
nodes = os.environ.get("LOCKS_NODES", "127.0.0.1:7100")
client = Client(nodes, token=os.environ.get("LOCKS_TOKEN", "s3cret"))
fence = Fence()  # the resource's side: the largest fencing version seen per node

with client.lock("db/x", mode="X", wait=5) as grant:  # held for the block
    print("holding", grant.lock, "with tokens", grant.token_text)  # a@1042
    if grant.valid() and fence.admit(grant.tokens):  # still held, and no newer holder wrote
        print("writing under the lock")

with client.session() as session:  # one transaction, several locks
    session.lock("db/a")
    session.lock("db/b", mode="S")
    print("status:", session.status())  # have_all_locks
    print("held:", sorted(session.held()))  # ['db/a', 'db/b']

with client.campaign("jobs") as campaign:  # resigns at the end of the block
    print("leading in term", campaign.wait_leading(timeout=30).term)

client.close()
