"""The client's own logic, without a node: the lease read against the clock at the check (a
session on a fake stream whose clock is moved by the test, its background threads asleep), a
lock call given up on each of the node's possible answers to its cancel, and the Fence's
per-node comparison."""

import queue
import threading

import grpc
import pytest

import locks_client.lease
from locks_client import Fence, LocksError
from locks_client._proto import locks_pb2 as pb
from locks_client.session import Session


class _Ended(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.CANCELLED

    def details(self):
        return "cancelled by the client"


class _FakeStream:
    """A session stream that starts the session with ``keepalive_ms`` and answers every
    request at once while ``answering`` is set; a ``lock`` as ``policy["lock"]`` says
    (``grant`` it, ``wait``, or ``drop`` it unseen), and a ``cancel`` of a waiting lock as
    ``policy["cancel"]`` says (``grant`` the lock first, withdraw it: ``cancelled``, ``ignore``
    the cancel, or ``refuse`` it as a node without cancel does). It ends when cancelled."""

    def __init__(self, requests, keepalive_ms, policy):
        self.events = queue.Queue()
        self.answering = threading.Event()
        self.answering.set()
        self.policy = policy
        self.waiting = {}
        started = pb.Started(agent="agent-1", node="fake", keepalive_ms=keepalive_ms)
        self.events.put(pb.SessionEvent(started=started))
        threading.Thread(target=self._serve, args=(requests,), daemon=True).start()

    def _answer(self, request_id, **kind):
        self.events.put(pb.SessionEvent(request_id=request_id, **kind))

    @staticmethod
    def _locked(lock):
        token = pb.Token(node="fake", version=7)
        return pb.Locked(grant=pb.Grant(id=lock.id, mode="X", tokens=[token]))

    def _serve(self, requests):
        for request in requests:
            if not self.answering.is_set():
                continue
            kind = request.WhichOneof("kind")
            if kind == "lock" and self.policy.get("lock") == "drop":
                continue
            if kind == "lock" and self.policy.get("lock", "grant") == "wait":
                self.waiting[request.request_id] = request.lock
                continue
            if kind == "lock":
                self._answer(request.request_id, locked=self._locked(request.lock))
                continue
            if kind == "cancel":
                target = request.cancel.request_id
                lock = self.waiting.pop(target, None)
                action = self.policy.get("cancel", "cancelled")
                if lock is not None and action == "ignore":
                    continue
                if action == "refuse":
                    error = pb.Error(code=grpc.StatusCode.INVALID_ARGUMENT.value[0], message="?")
                    self._answer(request.request_id, error=error)
                    continue
                if lock is not None and action == "grant":
                    self._answer(target, locked=self._locked(lock))
                elif lock is not None:
                    error = pb.Error(code=grpc.StatusCode.CANCELLED.value[0], message="withdrawn")
                    self._answer(target, error=error)
            self._answer(request.request_id, accepted=pb.Accepted())

    def __iter__(self):
        return self

    def __next__(self):
        event = self.events.get()
        if event is None:
            raise _Ended()
        return event

    def cancel(self):
        self.events.put(None)


class _FakeStub:
    def __init__(self, keepalive_ms, **policy):
        self.keepalive_ms = keepalive_ms
        self.policy = policy
        self.stream = None

    def Session(self, requests, metadata=()):  # noqa: N802 - the gRPC method's name
        self.stream = _FakeStream(requests, self.keepalive_ms, self.policy)
        return self.stream


@pytest.fixture
def clock(monkeypatch):
    """The lease's clock, moved only by the test."""
    now = [1000.0]
    monkeypatch.setattr(locks_client.lease, "now", lambda: now[0])
    return now


def test_the_lease_is_read_against_the_clock_at_the_check(clock):
    stub = _FakeStub(keepalive_ms=10_000)
    session = Session(stub, [], keepalive=30.0, address="fake")
    try:
        assert session.keepalive == 10.0
        grant = session.lock("db/x")
        assert grant.valid() and not session.lost.is_set()
        # The node stops answering; time passes, but not past the bound less the margin (1 s).
        stub.stream.answering.clear()
        clock[0] += 8.9
        assert grant.valid() and not session.lost.is_set()
        # Past it. The background threads sleep on the real clock: only the check can tell.
        clock[0] += 0.2
        assert not threading.Event.is_set(session.lost)
        assert session.lost.is_set()
        assert not grant.valid()
        lost = session.next_event(timeout=5)
        assert (lost.kind, lost.cause, lost.lock) == ("lost", "lease-expired", "")
        closed = session.next_event(timeout=5)
        assert (closed.kind, closed.code) == ("closed", grpc.StatusCode.ABORTED)
        with pytest.raises(LocksError) as e:
            session.status()
        assert e.value.code == grpc.StatusCode.ABORTED
        assert "lease expired" in e.value.message
    finally:
        session.close()


def test_an_answer_renews_the_lease_from_its_requests_send_time(clock):
    stub = _FakeStub(keepalive_ms=10_000)
    session = Session(stub, [], keepalive=10.0, address="fake")
    try:
        clock[0] += 8.0
        session.lock("db/x")  # sent, and answered, at +8 s
        clock[0] += 8.0
        assert not session.lost.is_set()
        clock[0] += 1.5
        assert session.lost.is_set()
    finally:
        session.close()


def test_the_clients_keepalive_bounds_the_lease_when_smaller(clock):
    session = Session(_FakeStub(keepalive_ms=10_000), [], keepalive=2.0, address="fake")
    try:
        assert session.keepalive == 2.0
        clock[0] += 1.9  # past 2 s less the margin of 0.2 s
        assert session.lost.is_set()
    finally:
        session.close()


def _given_up(cancel, lock="wait"):
    """A session whose ``lock`` is handled as ``lock`` says and whose client bound (0.2 s) runs
    out, on a node that answers the cancel as ``cancel`` says; the session and what its lock
    call did."""
    session = Session(_FakeStub(10_000, lock=lock, cancel=cancel), [], address="fake")
    session.timeout = 0.2
    session.cancel_timeout = 0.5
    try:
        return session, session.lock("db/x")
    except LocksError as e:
        return session, e


def test_a_grant_that_beats_the_cancel_is_returned():
    session, grant = _given_up("grant")
    try:
        assert grant.tokens == {"fake": 7}, grant
        assert grant.valid() and session.held() == {"db/x": grant}
    finally:
        session.close()


def test_a_withdrawn_lock_call_raises_deadline_exceeded_and_the_session_goes_on():
    session, error = _given_up("cancelled")
    try:
        assert error.code == grpc.StatusCode.DEADLINE_EXCEEDED, error
        assert "withdrawn" in error.message
        assert session.held() == {} and session.ended is None
        assert session.status() is not None
    finally:
        session.close()


def test_a_cancel_of_a_call_the_node_never_had_raises_at_once_and_the_session_goes_on():
    session, error = _given_up("cancelled", lock="drop")
    try:
        assert error.code == grpc.StatusCode.DEADLINE_EXCEEDED, error
        assert "withdrawn" in error.message
        assert session.ended is None
    finally:
        session.close()


def test_a_node_that_cannot_cancel_gets_the_session_closed_at_once():
    session, error = _given_up("refuse")
    assert error.code == grpc.StatusCode.DEADLINE_EXCEEDED, error
    assert "cannot withdraw it (INVALID_ARGUMENT" in error.message, error
    assert session.ended is not None


def test_a_cancel_left_unanswered_closes_the_session():
    session, error = _given_up("ignore")
    assert error.code == grpc.StatusCode.DEADLINE_EXCEEDED, error
    assert "the session was closed" in error.message
    assert session.lost.is_set() and session.ended is not None
    closed = session.next_event(timeout=5)
    assert (closed.kind, closed.code) == ("closed", grpc.StatusCode.DEADLINE_EXCEEDED)


def test_a_fence_compares_tokens_per_node():
    fence = Fence()
    assert fence.admit({"a": 5, "b": 3})
    assert fence.admit({"a": 5, "b": 3})  # the same holder writes again
    assert not fence.admit({"a": 4, "c": 100})  # older on a
    assert fence.seen == {"a": 5, "b": 3}  # a refused write records nothing
    assert fence.admit({"b": 4, "c": 1})  # a majority elsewhere; c never seen
    assert not fence.admit("a@6,b@3")  # older on b, as locksctl's LOCKS_TOKENS
    assert fence.seen == {"a": 5, "b": 4, "c": 1}
    with pytest.raises(LocksError) as e:
        fence.check({"b": 2})
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "b@2 < b@4" in e.value.message
    with pytest.raises(ValueError):
        fence.admit({})
    assert Fence(fence.seen).admit({"a": 5}) and not Fence(fence.seen).admit({"a": 4})


def test_a_fence_keeps_the_largest_token_under_threads():
    fence = Fence()
    admitted = []

    def write(version):
        if fence.admit({"a": version}):
            admitted.append(version)

    threads = [threading.Thread(target=write, args=(v,)) for v in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fence.seen == {"a": 199}
    assert 199 in admitted
