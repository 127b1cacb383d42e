"""The job runner example (clients/python/examples/job_runner.py) against three real nodes: it
finishes by itself with every job done exactly once."""

import os
import signal
import sqlite3
import subprocess
import sys

from conftest import BOUND, HERE, TOKEN

EXAMPLE = os.path.join(HERE, "..", "examples", "job_runner.py")


def test_the_job_runner_example_runs_every_job_once_on_three_nodes(nodes, tmp_path):
    a = nodes("a")
    b = nodes("b", [a.listen])
    c = nodes("c", [a.listen, b.listen])
    db = tmp_path / "jobs.sqlite"
    addresses = ",".join(n.client_addr for n in (a, b, c))
    proc = subprocess.Popen(
        [sys.executable, EXAMPLE, "--nodes", addresses, "--token", TOKEN, "--jobs", "20",
         "--workers", "3", "--db", str(db), "--deadline", str(3 * BOUND)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=4 * BOUND)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=BOUND)
    print(out)
    assert proc.returncode == 0, out
    assert "20 jobs done by 3 workers" in out
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT state, runs, tokens FROM jobs").fetchall()
    assert len(rows) == 20
    for state, runs, tokens in rows:
        assert (state, runs) == ("done", 1)
        assert len(tokens.split(",")) >= 2, tokens  # granted by a majority of a, b, c
