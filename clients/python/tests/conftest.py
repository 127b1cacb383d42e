"""Real `node` processes for the end-to-end tests: each started on ephemeral loopback ports,
its stdout read on a thread, and killed by pid when the test ends, whatever happened; Python
client processes run the same way; and bounded waits for what the tests expect.

The tests import ``locks_client`` as users get it: installed (``pip install clients/python``
or the wheel), never from the source tree; nothing here puts ``clients/python`` on the path,
and the client processes run in this directory, which holds no package."""

import asyncio
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_SOURCE = os.path.normpath(os.path.join(HERE, ".."))
REPO = os.path.normpath(os.path.join(PACKAGE_SOURCE, "..", ".."))

NODE_BIN = os.environ.get("LOCKS_NODE_BIN", os.path.join(REPO, "target", "debug", "node"))
BOUND = 30.0
TOKEN = "py-token"


class Node:
    """One node process and the lines it printed."""

    def __init__(self, name, peers=(), extra=()):
        self.name = name
        args = [
            NODE_BIN,
            "--name", name,
            "--listen", "127.0.0.1:0",
            "--cookie", "py",
            "--heartbeat-timeout-ms", "1000",
            "--start-delay-ms", "0",
            "--client-listen", "127.0.0.1:0",
            "--client-token", TOKEN,
            "--client-keepalive-ms", "1000",
            "--no-data-dir",
            "--exit-on-eof",
        ]
        for peer in peers:
            args += ["--peer", peer]
        args += list(extra)
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "RUST_LOG": "warn"},
        )
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.listen = self.expect("listening ").split()[1]
        self.client_addr = self.expect("client-listening ").split()[1]

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def expect(self, prefix):
        deadline = time.monotonic() + BOUND
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.name}: no line starting {prefix!r}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line.startswith(prefix):
                return line

    def stop(self):
        """Stops the process (SIGSTOP) and waits until every thread of it has stopped: the
        signal stops a process's threads one after the other, and until the last one stops
        it may still answer."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        tasks = f"/proc/{self.proc.pid}/task"
        deadline = time.monotonic() + BOUND
        while True:
            states = []
            for task in os.listdir(tasks):
                with open(os.path.join(tasks, task, "stat")) as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            if all(state in ("T", "t") for state in states):
                return
            assert time.monotonic() < deadline, f"{self.name} did not stop: {states}"
            time.sleep(0.001)

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=BOUND)


@pytest.fixture
def nodes():
    """A function that starts a node (peers: listen addresses; extra: more flags); every node
    is killed after."""
    started = []

    def start(name, peers=(), extra=()):
        node = Node(name, peers, extra)
        started.append(node)
        return node

    try:
        yield start
    finally:
        for node in started:
            node.kill()


@contextlib.contextmanager
def client_process(script, node, *extra):
    """Runs ``script`` in a Python process of its own against ``node`` (its arguments: the
    node's client address, the token, then ``extra``), in the tests' directory (so that it
    imports ``fenced_db``); yields the process and the number it prints first. The process is
    killed by pid at the end, whatever happened."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, node.client_addr, TOKEN] + [str(e) for e in extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE,
    )
    try:
        yield proc, int(proc.stdout.readline())
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=BOUND)


def run(main):
    """Runs the coroutine ``main`` on an event loop of its own; fails the test if it takes
    past 4 bounds."""
    return asyncio.run(asyncio.wait_for(main, 4 * BOUND))


def next_event_where(session, matches, bound=BOUND):
    """The first event of ``session`` that ``matches``, and the events before it; fails the
    test if none comes within ``bound`` seconds or the session closes first."""
    before = []
    deadline = time.monotonic() + bound
    while True:
        left = deadline - time.monotonic()
        event = session.next_event(timeout=max(left, 0))
        assert event is not None, f"no matching event within {bound} s; got {before}"
        if matches(event):
            return event, before
        assert event.kind != "closed", f"the session closed first: {before + [event]}"
        before.append(event)


def wait_connected(client, count=3, bound=BOUND):
    """Waits until the node ``client`` calls reaches ``count`` nodes, itself included (its
    ``info()``); fails the test if they have not connected within ``bound`` seconds."""
    deadline = time.monotonic() + bound
    while len(client.info()[1]) < count:
        assert time.monotonic() < deadline, "the nodes connect"
        time.sleep(0.02)


def events_so_far(session):
    """The events ``session`` has received and not handed out yet."""
    events = []
    while (event := session.next_event(timeout=0)) is not None:
        events.append(event)
    return events


def returns_within(bound, call):
    """Runs ``call()`` on a thread; fails the test if it has not returned within ``bound``
    seconds (the thread is left to finish); its result, or the exception it raised."""
    outcome = []

    def run():
        try:
            outcome.append(call())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound)
    assert not thread.is_alive(), f"the call did not return within {bound} s"
    return outcome[0]
