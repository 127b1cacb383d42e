"""Real `node` processes for the end-to-end tests: each started on ephemeral loopback ports,
its stdout read on a thread, and killed by pid when the test ends, whatever happened."""

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..")))

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
