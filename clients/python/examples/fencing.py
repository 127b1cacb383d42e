import os

from locks_client import Fence, LocksError, Tokens

fence = Fence()  # one per resource; keep fence.seen beside its data to survive restarts


def store(tokens: Tokens, value: str) -> None:
    """Stores ``value`` unless a newer holder of the lock has written already."""
    fence.check(tokens)  # raises LocksError (FAILED_PRECONDITION) for an older token
    print("stored", value, "seen", fence.seen)


store({"a": 1042, "b": 977}, "first")  # a Grant, its tokens, or locksctl's LOCKS_TOKENS
store(os.environ.get("LOCKS_TOKENS", "a@1043,b@977"), "second")
try:
    store({"a": 1041}, "late")  # a holder that lost the lock on node a without knowing
except LocksError as e:
    print("refused:", e.code.name, e.message)
