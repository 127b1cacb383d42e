"""The engine's promises kept for Python users, against real `node` processes: a lock call the
client gives up is withdrawn, a holder paused past the keepalive bound knows it lost the lock
(and its late write is fenced off), every wait is bounded, every refusal says why, and the
session options of real programs (several nodes, abort on deadlock, the locks surrendered)."""

import os
import signal
import socket
import threading
import time

import grpc
import pytest

from conftest import (
    BOUND,
    TOKEN,
    client_process,
    events_so_far,
    next_event_where,
    returns_within,
    wait_connected,
)
from fenced_db import fenced_write, read
from locks_client import Client, LocksError


def test_a_lock_given_up_on_the_clients_deadline_is_withdrawn_from_the_queue(nodes):
    a = nodes("a")
    client = Client(a.client_addr, token=TOKEN)
    with client.session() as holder, client.session() as quitter, client.session() as third:
        holder.lock("jobs/1")
        # No bound for the node: only the client's own gives up.
        quitter.timeout = 1
        with pytest.raises(LocksError) as e:
            quitter.lock("jobs/1")
        assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED, e.value
        quitter.timeout = BOUND
        # Queued after the quitter gave up: next in line once the holder lets go.
        third.lock_nowait("jobs/1")
        holder.unlock("jobs/1")
        next_event_where(third, lambda e: e.kind == "granted" and e.lock == "jobs/1")
        assert quitter.status() in ("waiting", "no_locks")
        assert not [e for e in events_so_far(quitter) if e.kind == "granted"]
        assert quitter.held() == {}
        table = client.table()
        (jobs,) = [l for l in table.nodes[0].locks if list(l.id) == ["jobs", "1"]]
        assert [e.agent for e in jobs.granted] == [third.agent]
        assert quitter.agent not in [e.agent for e in jobs.waiting]


PAUSED_HOLDER = """
import os, signal, sys, threading
from locks_client import Client
from fenced_db import fenced_write
session = Client(sys.argv[1], token=sys.argv[2]).session()
grant = session.lock("jobs/1")
print(grant.tokens["a"], flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
# Resumed: before anything else, is the lock still held? (The flag as the background threads
# left it is printed too: they may not have run yet.)
flag = threading.Event.is_set(session.lost)
print("lost", session.lost.is_set(), "valid", grant.valid(), "flag", flag, flush=True)
print("written", fenced_write(sys.argv[3], "jobs/1", grant.tokens, "paused holder"), flush=True)
"""


def test_a_holder_paused_past_the_bound_knows_it_lost_the_lock_and_its_write_is_fenced(
    nodes, tmp_path
):
    a = nodes("a")  # --client-keepalive-ms 1000
    db = tmp_path / "resource.sqlite"
    with client_process(PAUSED_HOLDER, a, db) as (holder, first):
        # The holder stops itself; the node drops its silent connection, and its lock.
        with Client(a.client_addr, token=TOKEN).session() as taker:
            grant = taker.lock("jobs/1", wait=BOUND)
            assert grant.tokens["a"] > first
            assert holder.poll() is None, "the paused holder is alive"
            assert fenced_write(db, "jobs/1", grant.tokens, "taker")
            os.kill(holder.pid, signal.SIGCONT)
            seen = holder.stdout.readline().split()
            print("the resumed holder says:", *seen)
            assert seen[:4] == ["lost", "True", "valid", "False"], seen
            assert holder.stdout.readline().split() == ["written", "False"]
            assert read(db, "jobs/1") == "taker"
            assert grant.valid()


def test_a_session_whose_node_stops_answering_is_lost_by_its_lease(nodes):
    a = nodes("a")
    client = Client(a.client_addr, token=TOKEN)
    session = client.session()
    try:
        grant = session.lock("db/x")
        assert session.keepalive == 1.0  # the node's bound, smaller than the client's
        a.stop()
        assert session.lost.wait(BOUND)
        assert not grant.valid()
        event, _ = next_event_where(session, lambda e: e.kind == "lost")
        assert event.cause == "lease-expired", event
        with pytest.raises(LocksError) as e:
            session.status()
        assert e.value.code == grpc.StatusCode.ABORTED
        assert "lease expired" in e.value.message
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
        session.close()


def test_wait_leading_returns_within_its_timeout_while_another_campaign_leads(nodes):
    a = nodes("a")
    client = Client(a.client_addr, token=TOKEN)
    with client.campaign("jobs") as first:
        leading = first.wait_leading(timeout=BOUND)
        with client.campaign("jobs") as second:
            # No leader change comes: the wait must end by its own timeout.
            outcome = returns_within(20, lambda: second.wait_leading(timeout=2))
            assert isinstance(outcome, LocksError), outcome
            assert outcome.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert leading.leader in outcome.message
            assert first.leader.is_me and not second.leader.is_me


def test_a_lone_campaign_over_three_nodes_leads_with_no_member_on_the_others(nodes):
    a = nodes("a")
    b = nodes("b", [a.listen])
    c = nodes("c", [a.listen, b.listen])
    client = Client(a.client_addr, token=TOKEN)
    wait_connected(client)
    # Only this campaign runs: the election lock on a majority of a, b, c decides.
    with client.campaign("jobs", nodes=["a", "b", "c"]) as campaign:
        leading = campaign.wait_leading(timeout=BOUND)
        assert leading.is_me and leading.node == "a", leading
        assert leading.term > 0


def test_a_request_over_the_size_limit_is_refused_and_the_session_goes_on(nodes):
    a = nodes("a")
    with Client(a.client_addr, token=TOKEN).session() as s:
        with pytest.raises(LocksError) as e:
            s.lock(["big", "x" * (1 << 20)])
        assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
        assert "65536" in e.value.message, e.value  # the limit is named
        assert s.lock("db/y").lock == "db/y"


def test_a_stream_the_node_ends_says_why_to_every_waiting_call_and_in_closed(nodes):
    a = nodes("a")
    client = Client(a.client_addr, token=TOKEN)
    with client.session() as holder, client.session() as s:
        holder.lock("db/x")
        outcome = []

        def wait_for_x():
            try:
                outcome.append(s.lock("db/x"))
            except LocksError as e:
                outcome.append(e)

        waiter = threading.Thread(target=wait_for_x)
        waiter.start()
        deadline = time.monotonic() + BOUND
        while (s.agent, holder.agent) not in [(e.waiter, e.blocker) for e in client.graph().edges]:
            assert time.monotonic() < deadline, "the lock call waits"
            time.sleep(0.01)
        # Past the node's hard frame limit (4 MiB): the node ends the stream.
        with pytest.raises(LocksError) as e:
            s.lock(["big", "x" * (5 << 20)])
        waiter.join(BOUND)
        assert not waiter.is_alive(), "the waiting call returned"
        for error in (e.value, outcome[0]):
            assert isinstance(error, LocksError), error
            assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED, error
            assert "4194304" in error.message, error
        closed, _ = next_event_where(s, lambda e: e.kind == "closed")
        assert closed.code == grpc.StatusCode.RESOURCE_EXHAUSTED, closed
        assert "4194304" in closed.message, closed


def test_tokens_reads_a_held_locks_current_tokens(nodes):
    a = nodes("a")
    with Client(a.client_addr, token=TOKEN).session() as s:
        grant = s.lock("db/x")
        now = s.tokens("db/x")
        assert (now.lock, now.tokens) == ("db/x", grant.tokens)
        assert now.valid()
        with pytest.raises(LocksError) as e:
            s.tokens("db/y")
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        s.unlock("db/x")
        assert not grant.valid() and not now.valid()


INTERRUPTED = """
import os, signal, sys, threading, time
from locks_client import Client
client = Client(sys.argv[1], token=sys.argv[2])
session = client.session()

def interrupt():
    # Ctrl-C once this session's request waits in the lock's queue.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for lock in client.table().nodes[0].locks:
            if session.agent in [e.agent for e in lock.waiting]:
                os.kill(os.getpid(), signal.SIGINT)
                return
        time.sleep(0.01)

print(0, flush=True)
threading.Thread(target=interrupt, daemon=True).start()
try:
    session.lock("jobs/1")
    print("granted", flush=True)
except KeyboardInterrupt:
    print("interrupted", session.agent, session.status(), len(session.held()), flush=True)
sys.stdin.read()
"""


def test_a_lock_call_interrupted_by_ctrl_c_is_withdrawn(nodes):
    a = nodes("a")
    client = Client(a.client_addr, token=TOKEN)
    with client.session() as holder, client.session() as third:
        holder.lock("jobs/1")
        with client_process(INTERRUPTED, a) as (interrupted, _):
            said = interrupted.stdout.readline().split()
            assert said[:1] == ["interrupted"], said
            assert said[2:] == ["no_locks", "0"], said
            # Its request is gone: the next one in line is granted when the holder lets go.
            third.lock_nowait("jobs/1")
            holder.unlock("jobs/1")
            next_event_where(third, lambda e: e.kind == "granted" and e.lock == "jobs/1")
            assert interrupted.poll() is None, "the interrupted client is alive, its session open"


def test_every_call_on_a_stopped_node_returns_within_its_timeout(nodes):
    a = nodes("a")
    a.stop()  # accepts connections, never answers
    try:
        client = Client(a.client_addr, token=TOKEN)
        calls = {
            "session": lambda: client.session(timeout=2),
            "info": lambda: client.info(timeout=2),
            "table": lambda: client.table(timeout=2),
            "graph": lambda: client.graph(timeout=2),
            "campaign": lambda: client.campaign("jobs", timeout=2),
            "observe": lambda: client.observe("jobs", timeout=2),
        }
        for name, call in calls.items():
            outcome = returns_within(15, call)
            assert isinstance(outcome, LocksError), (name, outcome)
            assert outcome.code in (
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.UNAVAILABLE,
            ), (name, outcome)
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)


def _dead_address():
    """A loopback address nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_a_client_of_several_nodes_opens_its_session_on_one_that_answers(nodes):
    a = nodes("a")
    dead = _dead_address()
    client = Client([dead, a.client_addr], token=TOKEN)
    with client.session() as s:
        assert s.node == "a"
        assert s.lock("db/x").tokens["a"] > 0
    assert Client(f"{dead},{a.client_addr}", token=TOKEN).info()[0] == "a"
    with pytest.raises(LocksError) as e:
        Client([dead, _dead_address()], token=TOKEN).session(timeout=5)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert dead in e.value.message


def _deadlock(s1, s2, end=True):
    """Makes ``s1`` and ``s2`` wait for each other (each holds one lock and asks for the
    other's); with ``end``, each session ends as soon as its call returns. Their outcomes: a
    Grant or a LocksError, by session."""
    s1.lock("a")
    s2.lock("b")
    results = {}

    def second(session, lock):
        try:
            results[session] = session.lock(lock, wait=BOUND)
        except LocksError as e:
            results[session] = e
        finally:
            if end:
                session.end()

    threads = [
        threading.Thread(target=second, args=(s1, "b")),
        threading.Thread(target=second, args=(s2, "a")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=BOUND)
        assert not t.is_alive(), "a client is stuck in the deadlock"
    return results


def test_with_abort_on_deadlock_the_victim_aborts_and_the_other_goes_on(nodes):
    a = nodes("a")
    client = Client(a.client_addr, token=TOKEN)
    s1 = client.session(abort_on_deadlock=True)
    s2 = client.session(abort_on_deadlock=True)
    assert s1.abort_on_deadlock and s2.abort_on_deadlock
    try:
        results = _deadlock(s1, s2, end=False)
        aborted = [s for s, r in results.items() if isinstance(r, LocksError)]
        assert len(aborted) == 1, results
        (victim,) = aborted
        assert results[victim].code == grpc.StatusCode.ABORTED, results
        (other,) = [r for s, r in results.items() if s is not victim]
        assert other.surrendered == [], other
        # The victim's transaction is over: every request fails, and it holds nothing.
        with pytest.raises(LocksError) as e:
            victim.lock("c")
        assert e.value.code == grpc.StatusCode.ABORTED
        assert victim.held() == {}
    finally:
        s1.end()
        s2.end()


def test_the_grant_names_the_locks_surrendered_exactly_for_the_deadlocks_victim(nodes):
    a = nodes("a")
    client = Client(a.client_addr, token=TOKEN)
    s1, s2 = client.session(), client.session()
    results = _deadlock(s1, s2)
    assert all(not isinstance(r, LocksError) for r in results.values()), results
    victims = 0
    for s, grant in results.items():
        event, events = next_event_where(s, lambda e: e.kind == "closed")
        lost = [e.lock for e in events if e.kind == "lost" and e.cause == "surrendered"]
        victim = any(e.kind == "deadlock" and e.surrendered_by_this_session for e in events)
        assert bool(lost) == victim, events
        assert grant.surrendered == lost, (grant, events)
        victims += victim
    assert victims == 1, results
