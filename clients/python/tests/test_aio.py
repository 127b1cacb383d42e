"""The asyncio client (locks_client.aio) against real `node` processes, the main scenarios of
the thread-based suites: grants with fencing tokens, a deadlock between two sessions that both
finish, a killed client that loses its lock, a cancelled task whose request is withdrawn (the
next waiter granted at once), a paused holder that knows it lost its lock, the lease of a
session whose node stops answering, and leader election with proclamations."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable

import grpc
import pytest

from conftest import BOUND, NODE_BIN, TOKEN, client_process, run
from fenced_db import fenced_write, read
from locks_client import Event, LocksError
from locks_client.aio import TLS, Client, Session

async def next_event_where(
    session: Session, matches: Callable[[Event], bool], bound: float = BOUND
) -> tuple[Event, list[Event]]:
    """The first event of ``session`` that ``matches``, and the events before it; fails the
    test if none comes within ``bound`` seconds or the session closes first."""
    before: list[Event] = []
    deadline = time.monotonic() + bound
    while True:
        event = await session.next_event(timeout=max(deadline - time.monotonic(), 0))
        assert event is not None, f"no matching event within {bound} s; got {before}"
        if matches(event):
            return event, before
        assert event.kind != "closed", f"the session closed first: {before + [event]}"
        before.append(event)


async def until_waiting(client: Client, session: Session, lock: list[str]) -> None:
    """Returns once ``session`` waits in the queue of ``lock`` (polling the lock table within
    a bound)."""
    deadline = time.monotonic() + BOUND
    while True:
        for queue in (await client.table()).nodes[0].locks:
            if list(queue.id) == lock and session.agent in [e.agent for e in queue.waiting]:
                return
        assert time.monotonic() < deadline, f"{session.agent} does not wait for {lock}"
        await asyncio.sleep(0.01)


def test_lock_and_unlock_with_fencing_tokens(nodes):
    a = nodes("a")

    async def main() -> None:
        async with Client(a.client_addr, token=TOKEN) as client:
            async with client.lock("db/x", mode="X") as grant:
                assert (grant.lock, grant.mode) == ("db/x", "X")
                assert grant.valid()
                first = grant.tokens["a"]
            assert not grant.valid()  # its session ended with the block
            async with client.session() as s:
                again = await s.lock("db/x", mode="write", wait=10)
                assert again.tokens["a"] > first
                assert (await s.tokens("db/x")).tokens == again.tokens
                assert await s.status() == "have_all_locks"
                await s.unlock("db/x")
                assert not again.valid() and s.held() == {}
            assert (await client.info())[0] == "a"

    run(main())


def test_bad_requests_are_refused_with_their_code(nodes):
    a = nodes("a")

    async def main() -> None:
        async with Client(a.client_addr, token=TOKEN) as client:
            async with client.session() as s:
                with pytest.raises(LocksError) as e:
                    await s.lock("db/x", mode="Q")
                assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
                with pytest.raises(LocksError) as e:
                    await s.lock("db/x", nodes=["nowhere"])
                assert e.value.code == grpc.StatusCode.NOT_FOUND
                await s.lock("db/x")  # the session goes on
        async with Client(a.client_addr, token="wrong") as client:
            with pytest.raises(LocksError) as e:
                await client.session()
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED

    run(main())


def test_two_sessions_in_a_deadlock_cycle_both_finish(nodes):
    a = nodes("a")

    async def main() -> None:
        async with Client(a.client_addr, token=TOKEN) as client:
            s1, s2 = await client.session(), await client.session()
            await s1.lock("a")
            await s2.lock("b")

            async def second(session: Session, lock: str) -> object:
                try:
                    return await session.lock(lock, wait=BOUND)
                except LocksError as e:
                    return e
                finally:
                    await session.end()  # whoever has both locks first lets the other finish

            results = await asyncio.gather(second(s1, "b"), second(s2, "a"))
            assert all(not isinstance(r, LocksError) for r in results), results
            told = []
            for s in (s1, s2):
                _, events = await next_event_where(s, lambda e: e.kind == "closed")
                surrendered = any(e.kind == "lost" and e.cause == "surrendered" for e in events)
                victim = any(
                    e.kind == "deadlock" and e.surrendered_by_this_session for e in events
                )
                assert surrendered == victim, events
                told.append(victim)
            assert sorted(told) == [False, True], told

    run(main())


HOLDER = """
import asyncio, sys
from locks_client.aio import Client

async def main():
    session = await Client(sys.argv[1], token=sys.argv[2]).session()
    grant = await session.lock("jobs/1")
    print(grant.tokens["a"], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


def test_an_async_client_killed_with_sigkill_loses_its_lock(nodes):
    a = nodes("a")
    with client_process(HOLDER, a) as (holder, first):

        async def main() -> None:
            async with Client(a.client_addr, token=TOKEN) as client:
                async with client.session() as waiting:
                    await waiting.lock_nowait("jobs/1")
                    assert await waiting.status() == "waiting"
                    os.kill(holder.pid, signal.SIGKILL)
                    grant = await waiting.lock("jobs/1", wait=BOUND)
                    assert grant.tokens["a"] > first

        run(main())


@pytest.mark.parametrize("how", ["task.cancel()", "asyncio.wait_for"])
def test_a_cancelled_lock_task_withdraws_its_request_and_the_next_waiter_is_granted(nodes, how):
    a = nodes("a")

    async def main() -> None:
        async with Client(a.client_addr, token=TOKEN) as client:
            holder, quitter, third = [await client.session() for _ in range(3)]
            await holder.lock("jobs/1")
            if how == "task.cancel()":
                task = asyncio.ensure_future(quitter.lock("jobs/1"))
                await until_waiting(client, quitter, ["jobs", "1"])
                edges = [(e.waiter, e.blocker) for e in (await client.graph()).edges]
                assert (quitter.agent, holder.agent) in edges, edges
                # The next in line, behind the quitter.
                await third.lock_nowait("jobs/1")
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:
                await third.lock_nowait("jobs/1")  # first in line: the quitter comes after
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(quitter.lock("jobs/1"), 1)
            # Withdrawn when the cancellation is over: the queue has no trace of it.
            table = await client.table()
            (jobs,) = [q for q in table.nodes[0].locks if list(q.id) == ["jobs", "1"]]
            assert quitter.agent not in [e.agent for e in jobs.waiting]
            await holder.unlock("jobs/1")
            await next_event_where(third, lambda e: e.kind == "granted" and e.lock == "jobs/1")
            assert await quitter.status() == "no_locks" and quitter.held() == {}
            assert quitter.ended is None, "the session goes on"
            for s in (holder, quitter, third):
                await s.end()

    run(main())


PAUSED_HOLDER = """
import asyncio, os, signal, sys
from locks_client.aio import Client
from fenced_db import fenced_write

async def main():
    session = await Client(sys.argv[1], token=sys.argv[2]).session()
    grant = await session.lock("jobs/1")
    print(grant.tokens["a"], flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    # Resumed, and no task of the loop has run since: is the lock still held?
    print("lost", session.lost.is_set(), "valid", grant.valid(), flush=True)
    print("written", fenced_write(sys.argv[3], "jobs/1", grant.tokens, "paused"), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


def test_a_paused_async_holder_knows_it_lost_the_lock_and_its_write_is_fenced(nodes, tmp_path):
    a = nodes("a")  # --client-keepalive-ms 1000
    db = tmp_path / "resource.sqlite"
    with client_process(PAUSED_HOLDER, a, db) as (holder, first):

        async def main() -> None:
            async with Client(a.client_addr, token=TOKEN) as client:
                async with client.session() as taker:
                    # The holder stops itself; the node drops its silent connection and lock.
                    grant = await taker.lock("jobs/1", wait=BOUND)
                    assert grant.tokens["a"] > first
                    assert holder.poll() is None, "the paused holder is alive"
                    assert fenced_write(db, "jobs/1", grant.tokens, "taker")
                    os.kill(holder.pid, signal.SIGCONT)
                    seen = holder.stdout.readline().split()
                    assert seen == ["lost", "True", "valid", "False"], seen
                    assert holder.stdout.readline().split() == ["written", "False"]
                    assert read(db, "jobs/1") == "taker"
                    assert grant.valid()

        run(main())


def test_an_async_session_whose_node_stops_answering_is_lost_by_its_lease(nodes):
    a = nodes("a")

    async def main() -> None:
        async with Client(a.client_addr, token=TOKEN) as client:
            session = await client.session()
            try:
                grant = await session.lock("db/x")
                assert session.keepalive == 1.0  # the node's bound, smaller than the client's
                a.stop()
                assert await session.lost.wait(BOUND)
                assert not grant.valid()
                event, _ = await next_event_where(session, lambda e: e.kind == "lost")
                assert event.cause == "lease-expired", event
                with pytest.raises(LocksError) as e:
                    await session.status()
                assert e.value.code == grpc.StatusCode.ABORTED
            finally:
                os.kill(a.proc.pid, signal.SIGCONT)
                session.close()

    run(main())


def test_wait_leading_returns_within_its_timeout_while_another_campaign_leads(nodes):
    a = nodes("a")

    async def main() -> None:
        async with Client(a.client_addr, token=TOKEN) as client:
            async with client.campaign("jobs") as first:
                leading = await first.wait_leading(timeout=BOUND)
                async with client.campaign("jobs") as second:
                    started = time.monotonic()
                    with pytest.raises(LocksError) as e:
                        await second.wait_leading(timeout=2)
                    assert time.monotonic() - started < 20
                    assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
                    assert leading.leader in e.value.message
                    assert first.leader is not None and first.leader.is_me
                    assert second.leader is not None and not second.leader.is_me

    run(main())


def test_a_leader_proclaims_a_new_value_and_observers_see_it(nodes):
    a = nodes("a")

    async def main() -> None:
        async with Client(a.client_addr, token=TOKEN) as client:
            async with client.campaign("svc", value=b"10.0.0.1:80") as campaign:
                leading = await campaign.wait_leading(timeout=BOUND)
                assert leading.value == b"10.0.0.1:80"
                async with client.observe("svc") as observer:
                    changes = observer.__aiter__()
                    seen = await changes.__anext__()
                    while not seen.value:
                        seen = await changes.__anext__()
                    assert (seen.leader, seen.value) == (leading.leader, b"10.0.0.1:80")
                    await client.proclaim("svc", leading, b"10.0.0.1:81")
                    seen = await changes.__anext__()
                    assert (seen.leader, seen.term) == (leading.leader, leading.term)
                    assert seen.value == b"10.0.0.1:81"
                stale = dataclasses.replace(leading, term=leading.term + 1)
                with pytest.raises(LocksError) as e:
                    await client.proclaim("svc", stale, b"x")
                assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
                # The leader as anybody sees it, without the campaign's secret, may not proclaim.
                public = type(leading)(True, leading.leader, leading.node, leading.term, False)
                with pytest.raises(LocksError) as e:
                    await client.proclaim("svc", public, b"x")
                assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
            # Resigned: an iteration over its changes ends once it has read what came before.
            async for _ in campaign:
                pass

    run(main())


def test_a_client_of_several_nodes_opens_its_session_on_one_that_answers(nodes):
    a = nodes("a")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed

    async def main() -> None:
        async with Client([dead, a.client_addr], token=TOKEN) as client:
            async with client.session() as session:
                assert session.node == "a"
                assert (await session.lock("db/x")).tokens["a"] > 0
        async with Client(f"{dead},{dead}", token=TOKEN) as client:
            with pytest.raises(LocksError) as e:
                await client.session(timeout=5)
            assert e.value.code == grpc.StatusCode.UNAVAILABLE and dead in e.value.message

    run(main())


def test_over_tls_an_async_client_with_a_certificate_of_the_ca_gets_in(nodes, tmp_path):
    made = subprocess.run(
        [NODE_BIN, "--gen-certs", str(tmp_path), "--names", "a,client"],
        capture_output=True,
        timeout=BOUND,
    )
    assert made.returncode == 0, made
    pem = {name: str(tmp_path / name) for name in ("a.pem", "a.key", "ca.pem", "client.pem")}
    a = nodes(
        "a",
        extra=[
            "--client-tls-cert", pem["a.pem"],
            "--client-tls-key", pem["a.key"],
            "--client-tls-ca", pem["ca.pem"],
        ],
    )
    tls = TLS(ca=pem["ca.pem"], cert=pem["client.pem"], key=str(tmp_path / "client.key"))

    async def main() -> None:
        async with Client(a.client_addr, token=TOKEN, tls=tls) as client:
            async with client.lock("db/x") as grant:
                assert grant.tokens["a"] > 0
        # Without a client certificate the handshake fails: no session.
        async with Client(a.client_addr, token=TOKEN, tls=TLS(ca=pem["ca.pem"])) as client:
            with pytest.raises(LocksError) as e:
                await client.session(timeout=5)
            assert e.value.code == grpc.StatusCode.UNAVAILABLE

    run(main())
