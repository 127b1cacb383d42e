"""A job runner on a locks cluster: a leader hands out jobs, workers run them, and every write
to the shared SQLite database goes through a Fence.

    python3 clients/python/examples/job_runner.py \\
        --nodes 127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103 [--token T] [--jobs 20] \\
        [--workers 3] [--db FILE]

Each worker (a thread here, a process or a machine in real life) has a client of its own,
trying a different node first, and campaigns for the leadership of the group ``job-runner``:

- the leader hands out jobs, a batch at a time, by adding them to the ``jobs`` table; each
  batch is fenced by its term (a deposed leader that wakes up late cannot add a batch);
- every worker takes a queued job by locking ``jobs/<id>`` on a majority of the nodes, checks
  that its grant is still valid, runs the job, and writes the result with the lock's tokens
  through the job's Fence, which the database keeps beside the job (a worker that lost its lock
  without knowing it cannot overwrite its successor's result).

It ends when every job is done, printing one line per job, and exits 0; 1 if a job was not
done exactly once or the run did not finish within ``--deadline`` seconds. The database is a
new file in a temporary directory unless ``--db`` names one.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from locks_client import Client, Fence, Grant, LocksError, Tokens

GROUP = "job-runner"


class Store:
    """The shared database: the jobs and, per fenced resource, the largest tokens seen."""

    def __init__(self, path: str) -> None:
        self.path = path
        with self._open() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, state TEXT, "
                "result TEXT, worker TEXT, tokens TEXT, runs INTEGER)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS fence (resource TEXT, node TEXT, version INTEGER, "
                "PRIMARY KEY (resource, node))"
            )

    def _open(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def fenced(
        self, resource: str, tokens: Tokens, write: Callable[[sqlite3.Connection], None]
    ) -> bool:
        """Runs ``write(db)`` in one transaction if ``tokens`` pass the Fence of ``resource``
        (kept in the same database, updated in the same transaction); whether it ran."""
        db = self._open()
        try:
            db.execute("BEGIN IMMEDIATE")
            seen = db.execute(
                "SELECT node, version FROM fence WHERE resource = ?", (resource,)
            ).fetchall()
            fence = Fence(dict(seen))
            if not fence.admit(tokens):
                db.execute("ROLLBACK")
                return False
            db.executemany(
                "INSERT OR REPLACE INTO fence VALUES (?, ?, ?)",
                [(resource, node, version) for node, version in fence.seen.items()],
            )
            write(db)
            db.execute("COMMIT")
            return True
        finally:
            db.close()

    def query(self, sql: str, *args: Any) -> list[Any]:
        db = self._open()
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()


def hand_out(store: Store, term: int, total: int, batch: int) -> None:
    """As the leader of ``term``: queues the next jobs when few are left to take."""
    (count, queued), = store.query(
        "SELECT count(*), coalesce(sum(state = 'queued'), 0) FROM jobs"
    )
    if count >= total or queued >= batch:
        return

    def add(db: sqlite3.Connection) -> None:
        first = db.execute("SELECT coalesce(max(id), 0) + 1 FROM jobs").fetchone()[0]
        for job in range(first, min(first + batch, total + 1)):
            db.execute("INSERT INTO jobs VALUES (?, 'queued', NULL, NULL, NULL, 0)", (job,))

    store.fenced("leader", {"term": term}, add)


def run(job: int) -> str:
    """The job itself: a little work that takes a little time."""
    time.sleep(random.uniform(0.005, 0.03))
    return str(sum(i * i for i in range(job * 1000)))


def worker(
    name: str,
    addresses: list[str],
    token: str | None,
    store: Store,
    total: int,
    batch: int,
    deadline: float,
    done: threading.Event,
    failures: list[str],
) -> None:
    """One worker: campaigns, hands out jobs while it leads, runs queued jobs until all are
    done; what stopped it otherwise goes to ``failures``."""
    try:
        _work(name, addresses, token, store, total, batch, deadline, done)
    except Exception as e:  # noqa: BLE001 - reported by main
        failures.append(f"{name}: {e!r}")


def _work(
    name: str,
    addresses: list[str],
    token: str | None,
    store: Store,
    total: int,
    batch: int,
    deadline: float,
    done: threading.Event,
) -> None:
    client = Client(addresses, token=token)
    campaign = client.campaign(GROUP, value=name.encode())
    nodes = sorted(client.info()[1])
    session = client.session()
    try:
        while not done.is_set() and time.monotonic() < deadline:
            leader = campaign.leader
            if leader is not None and leader.is_me:
                hand_out(store, leader.term, total, batch)
            queued = store.query("SELECT id FROM jobs WHERE state = 'queued'")
            if not queued:
                (finished,), = store.query("SELECT count(*) FROM jobs WHERE state = 'done'")
                if finished >= total:
                    done.set()
                else:
                    campaign.next_change(timeout=0.05)  # a short pause, or a new leader
                continue
            job = random.choice(queued)[0]
            lock = f"jobs/{job}"
            try:
                grant = session.lock(lock, nodes=nodes, requirement="majority", wait=5)
            except LocksError as e:
                if session.ended is not None:
                    print(f"{name}: session ended ({e}); opening another", flush=True)
                    session = client.session()
                continue
            try:
                # Taken by another worker meanwhile? Then there is nothing to run.
                (state,), = store.query("SELECT state FROM jobs WHERE id = ?", job)
                if state != "queued" or not grant.valid():
                    continue
                result = run(job)

                def record(
                    db: sqlite3.Connection,
                    job: int = job,
                    result: str = result,
                    grant: Grant = grant,
                ) -> None:
                    db.execute(
                        "UPDATE jobs SET state = 'done', result = ?, worker = ?, tokens = ?, "
                        "runs = runs + 1 WHERE id = ? AND state = 'queued'",
                        (result, name, grant.token_text, job),
                    )

                if not store.fenced(lock, grant.tokens, record):
                    print(f"{name}: job {job} fenced off (tokens {grant.token_text})", flush=True)
            finally:
                try:
                    session.unlock(lock)
                except LocksError:
                    pass  # the session has ended: the lock with it
    finally:
        session.end()
        campaign.resign()
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", required=True, help="the nodes' client addresses, a,b,c")
    parser.add_argument("--token", default=os.environ.get("LOCKS_TOKEN"))
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--db", help="the SQLite file (default: a new temporary one)")
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds")
    args = parser.parse_args()
    addresses = [a for a in args.nodes.split(",") if a]
    deadline = time.monotonic() + args.deadline

    # Wait until the nodes see each other: the locks are taken on a majority of them.
    client = Client(addresses, token=args.token)
    while len(client.info()[1]) < len(addresses):
        if time.monotonic() > deadline:
            sys.exit(f"the nodes did not connect to each other: {client.info()[1]}")
        time.sleep(0.05)
    client.close()

    db = args.db or os.path.join(tempfile.mkdtemp(prefix="job-runner-"), "jobs.sqlite")
    store = Store(db)
    done = threading.Event()
    failures: list[str] = []
    threads = []
    for i in range(args.workers):
        # Each worker first tries another node.
        mine = addresses[i % len(addresses):] + addresses[: i % len(addresses)]
        thread = threading.Thread(
            target=worker,
            args=(f"worker-{i}", mine, args.token, store, args.jobs, args.workers * 2, deadline,
                  done, failures),
        )
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()

    rows = store.query("SELECT id, worker, tokens, runs FROM jobs ORDER BY id")
    for job, name, tokens, runs in rows:
        print(f"job {job}: done by {name} with tokens {tokens}" + ("" if runs == 1 else
              f" ({runs} runs!)"))
    wrong = [job for job, _, _, runs in rows if runs != 1]
    for failure in failures:
        print(failure, file=sys.stderr)
    if len(rows) != args.jobs or wrong:
        sys.exit(f"{len(rows)} of {args.jobs} jobs handed out; not done exactly once: {wrong}")
    print(f"{args.jobs} jobs done by {args.workers} workers, in {db}")


if __name__ == "__main__":
    main()
