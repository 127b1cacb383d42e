import os

import grpc

from locks_client import Client, LocksError

# Each session opens on the node that answered last, or on the next one that answers;
# a lock taken on a majority of the nodes outlives any one of them.
addresses = os.environ.get("LOCKS_NODES", "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
client = Client(addresses, token=os.environ.get("LOCKS_TOKEN", "s3cret"), timeout=5)
names = sorted(client.info()[1])  # the nodes the first one reaches: ['a', 'b', 'c']

try:
    # A deadlock's victim aborts (ABORTED, every lock released) instead of giving a lock up
    # and asking for it again.
    with client.session(abort_on_deadlock=True) as session:
        grant = session.lock("jobs/7", nodes=names, requirement="majority", wait=10)
        print("jobs/7 held on", sorted(grant.tokens), "via", session.node)
except LocksError as e:
    if e.code == grpc.StatusCode.ABORTED:
        print("chosen as a deadlock's victim: start the transaction again")
    elif e.code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
        print("no answer in time:", e.message)
    else:
        raise
finally:
    client.close()
