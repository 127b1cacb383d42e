"""The asyncio session's own logic, without a node: a lock call whose task is cancelled (or
whose bound runs out) on each of the node's possible answers to its cancel, and the lease read
against the clock at the check, on a fake stream whose clock the test moves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

import locks_client.lease
from locks_client import LocksError
from locks_client._proto import locks_pb2 as pb
from locks_client.aio import Session
from conftest import run


class _FakeCall:
    """A ``grpc.aio`` session stream that starts the session with ``keepalive_ms`` and answers
    at once while ``answering`` is set; a ``lock`` as ``policy["lock"]`` says (``grant`` or
    ``wait``), and a ``cancel`` of a waiting lock as ``policy["cancel"]`` says (``grant`` the
    lock first, withdraw it: ``cancelled``, or ``ignore`` the cancel). Cancelled, it ends as a
    ``grpc.aio`` call does: its reader gets ``CancelledError``."""

    def __init__(self, requests: AsyncIterator[pb.SessionRequest], keepalive_ms: int,
                 policy: dict[str, str]) -> None:
        self.events: asyncio.Queue[pb.SessionEvent | None] = asyncio.Queue()
        self.answering = True
        self.policy = policy
        self.waiting: dict[int, pb.Lock] = {}
        started = pb.Started(agent="agent-1", node="fake", keepalive_ms=keepalive_ms)
        self.events.put_nowait(pb.SessionEvent(started=started))
        self.server = asyncio.ensure_future(self._serve(requests))

    def _answer(self, request_id: int, **kind: Any) -> None:
        self.events.put_nowait(pb.SessionEvent(request_id=request_id, **kind))

    @staticmethod
    def _locked(lock: pb.Lock) -> pb.Locked:
        token = pb.Token(node="fake", version=7)
        return pb.Locked(grant=pb.Grant(id=lock.id, mode="X", tokens=[token]))

    async def _serve(self, requests: AsyncIterator[pb.SessionRequest]) -> None:
        async for request in requests:
            if not self.answering:
                continue
            kind = request.WhichOneof("kind")
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
                if lock is not None and action == "grant":
                    self._answer(target, locked=self._locked(lock))
                elif lock is not None:
                    error = pb.Error(code=grpc.StatusCode.CANCELLED.value[0], message="withdrawn")
                    self._answer(target, error=error)
            self._answer(request.request_id, accepted=pb.Accepted())

    def __aiter__(self) -> _FakeCall:
        return self

    async def __anext__(self) -> pb.SessionEvent:
        event = await self.events.get()
        if event is None:
            raise asyncio.CancelledError()
        return event

    def cancel(self) -> bool:
        self.server.cancel()
        self.events.put_nowait(None)
        return True


class _FakeStub:
    def __init__(self, keepalive_ms: int = 10_000, **policy: str) -> None:
        self.keepalive_ms = keepalive_ms
        self.policy = policy
        self.call: _FakeCall | None = None

    def Session(self, requests: Any, metadata: Any = ()) -> _FakeCall:  # noqa: N802 - gRPC's
        self.call = _FakeCall(requests, self.keepalive_ms, self.policy)
        return self.call


async def _open(stub: _FakeStub, keepalive: float = 10.0) -> Session:
    return await Session._open(
        stub,  # type: ignore[arg-type]
        (),
        open_timeout=5,
        keepalive=keepalive,
        address="fake",
        abort_on_deadlock=False,
    )


async def _queued(stub: _FakeStub) -> None:
    """Returns once the fake node holds a waiting lock request (a bounded loop)."""
    for _ in range(10_000):
        if stub.call is not None and stub.call.waiting:
            return
        await asyncio.sleep(0)
    raise AssertionError("the lock request never reached the fake node")


@pytest.mark.parametrize("cancel", ["grant", "cancelled"])
def test_a_cancelled_task_leaves_only_a_grant_that_beat_the_cancel(cancel):
    async def main() -> None:
        stub = _FakeStub(lock="wait", cancel=cancel)
        session = await _open(stub)
        task = asyncio.ensure_future(session.lock("db/x"))
        await _queued(stub)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        if cancel == "grant":
            (grant,) = session.held().values()
            assert grant.tokens == {"fake": 7} and grant.valid()
        else:
            assert session.held() == {}
        assert session.ended is None, "the session goes on"
        assert await session.status() is not None
        session.close()

    run(main())


def test_a_lock_whose_bound_runs_out_returns_a_grant_that_beat_the_cancel():
    async def main() -> None:
        session = await _open(_FakeStub(lock="wait", cancel="grant"))
        session.timeout = 0.2
        grant = await session.lock("db/x")
        assert grant.tokens == {"fake": 7} and session.held() == {"db/x": grant}
        session.close()

    run(main())


def test_a_cancel_left_unanswered_closes_the_session():
    async def main() -> None:
        stub = _FakeStub(lock="wait", cancel="ignore")
        session = await _open(stub)
        session.cancel_timeout = 0.3
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(session.lock("db/x"), 0.2)
        assert session.ended is not None and session.lost.is_set()
        closed = await session.next_event(timeout=5)
        assert closed is not None
        assert (closed.kind, closed.code) == ("closed", grpc.StatusCode.DEADLINE_EXCEEDED)

    run(main())


def test_the_lease_is_read_against_the_clock_at_the_check(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(locks_client.lease, "now", lambda: clock[0])

    async def main() -> None:
        stub = _FakeStub(keepalive_ms=10_000)
        session = await _open(stub, keepalive=30.0)
        assert session.keepalive == 10.0
        grant = await session.lock("db/x")
        assert grant.valid() and not session.lost.is_set()
        assert stub.call is not None
        stub.call.answering = False
        clock[0] += 8.9  # not past the bound less the margin (1 s)
        assert grant.valid() and not session.lost.is_set()
        clock[0] += 0.2  # past it; no task has run: only the check can tell
        assert session.lost.is_set()
        assert not grant.valid()
        lost = await session.next_event(timeout=5)
        assert lost is not None and (lost.kind, lost.cause) == ("lost", "lease-expired")
        with pytest.raises(LocksError) as e:
            await session.status()
        assert e.value.code == grpc.StatusCode.ABORTED

    run(main())
