"""The Python client against real `node` processes: grants with fencing tokens, a deadlock
between two clients that both finish, a client killed with SIGKILL that loses its lock, a
majority lock over three nodes, and bad input refused with its gRPC code."""

import os
import signal
import threading

import grpc
import pytest

from conftest import BOUND, TOKEN, client_process, wait_connected
from locks_client import Client, LocksError


def test_lock_and_unlock_with_fencing_tokens(nodes):
    a = nodes("a")
    client = Client(a.client_addr, token=TOKEN)
    with client.lock("db/x", mode="X") as grant:
        assert grant.lock == "db/x"
        assert grant.mode == "X"
        first = grant.tokens["a"]
    with client.session() as s:
        again = s.lock("db/x", mode="write", wait=10)
        assert again.tokens["a"] > first
        assert s.status() == "have_all_locks"
        s.unlock("db/x")
    assert client.info()[0] == "a"


def test_bad_requests_are_refused_with_their_code(nodes):
    a = nodes("a")
    with Client(a.client_addr, token=TOKEN).session() as s:
        with pytest.raises(LocksError) as e:
            s.lock("db/x", mode="Q")
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "unknown mode" in e.value.message
        with pytest.raises(LocksError) as e:
            s.lock("db/x", nodes=["nowhere"])
        assert e.value.code == grpc.StatusCode.NOT_FOUND
        s.lock("db/x")  # the session goes on
    with pytest.raises(LocksError) as e:
        Client(a.client_addr, token="wrong").session()
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_two_clients_in_a_deadlock_cycle_both_finish(nodes):
    a = nodes("a")
    client = Client(a.client_addr, token=TOKEN)
    s1, s2 = client.session(), client.session()
    s1.lock("a")
    s2.lock("b")
    results = {}

    def second(name, session, lock):
        try:
            results[name] = session.lock(lock, wait=BOUND)
        except LocksError as e:
            results[name] = e
        finally:
            # Whoever has both locks first lets the other finish.
            session.end()

    threads = [
        threading.Thread(target=second, args=("s1", s1, "b")),
        threading.Thread(target=second, args=("s2", s2, "a")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=BOUND)
        assert not t.is_alive(), "a client is stuck in the deadlock"
    assert all(not isinstance(r, LocksError) for r in results.values()), results
    # Exactly one of them was told it surrendered a lock to resolve the deadlock.
    told = []
    for s in (s1, s2):
        events = []
        while True:
            event = s.next_event(timeout=BOUND)
            assert event is not None, "the session's events end with `closed`"
            if event.kind == "closed":
                break
            events.append(event)
        surrendered = any(e.kind == "lost" and e.cause == "surrendered" for e in events)
        victim = any(e.kind == "deadlock" and e.surrendered_by_this_session for e in events)
        assert surrendered == victim, events
        told.append(victim)
    assert sorted(told) == [False, True], told


HOLDER = """
import sys
from locks_client import Client
client = Client(sys.argv[1], token=sys.argv[2])
session = client.session()
grant = session.lock("jobs/1")
print(grant.tokens["a"], flush=True)
sys.stdin.read()
"""


def test_a_client_killed_with_sigkill_loses_its_lock(nodes):
    a = nodes("a")
    with client_process(HOLDER, a) as (holder, first):
        client = Client(a.client_addr, token=TOKEN)
        with client.session() as waiting:
            waiting.lock_nowait("jobs/1")
            assert waiting.status() == "waiting"
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(timeout=BOUND)
            grant = waiting.lock("jobs/1", wait=BOUND)
            assert grant.tokens["a"] > first


def test_a_majority_lock_over_three_nodes(nodes):
    a = nodes("a")
    b = nodes("b", [a.listen])
    c = nodes("c", [a.listen, b.listen])
    client = Client(c.client_addr, token=TOKEN)
    wait_connected(client)
    with client.lock("db/x", nodes=["a", "b", "c"], requirement="majority", wait=10) as grant:
        assert len(grant.tokens) >= 2, grant
        assert set(grant.tokens) <= {"a", "b", "c"}


def test_a_paused_client_loses_its_lock_within_the_keepalive_bound(nodes):
    a = nodes("a")  # --client-keepalive-ms 1000
    with client_process(HOLDER, a) as (holder, first):
        os.kill(holder.pid, signal.SIGSTOP)
        with Client(a.client_addr, token=TOKEN).session() as waiting:
            # The paused client answers no ping: the node drops its connection and its lock.
            grant = waiting.lock("jobs/1", wait=BOUND)
            assert grant.tokens["a"] > first


CAMPAIGNER = """
import sys
from locks_client import Client
campaign = Client(sys.argv[1], token=sys.argv[2]).campaign("jobs")
print(campaign.wait_leading(timeout=30).term, flush=True)
sys.stdin.read()
"""


def test_two_campaigners_elect_one_leader_and_fail_over_when_it_dies(nodes):
    a = nodes("a")
    with client_process(CAMPAIGNER, a) as (first, term):
        client = Client(a.client_addr, token=TOKEN)
        with client.campaign("jobs") as second:
            # A new member may report "no leader yet" before it hears of the leader.
            changes = iter(second)
            now = next(changes)
            for _ in range(10):
                if now.has_leader:
                    break
                now = next(changes)
            assert now.has_leader and not now.is_me and now.term == term, now
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=BOUND)
            leading = second.wait_leading(timeout=BOUND)
            assert leading.term > term
