from locks_client import Client, Fence

client = Client(["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"])
fence = Fence()
with client.lock("db/x", nodes=["a", "b", "c"], requirement="majority") as grant:
    if grant.valid() and fence.admit(grant.tokens):  # still held; no newer holder wrote
        print("writing with", grant.token_text)      # a@1042,c@977
