"""A resource for the tests: one value per key in a SQLite file, written only through a
:class:`Fence` kept in the same file, so that processes share it."""

import sqlite3

from locks_client import Fence


def _open(path):
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS fence (key TEXT, node TEXT, version INTEGER)")
    db.execute("CREATE TABLE IF NOT EXISTS data (key TEXT PRIMARY KEY, value TEXT)")
    return db


def fenced_write(path, key, tokens, value):
    """Writes ``value`` under ``key`` if ``tokens`` are not older than any seen for ``key``;
    whether it was written."""
    db = _open(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        seen = db.execute("SELECT node, version FROM fence WHERE key = ?", (key,)).fetchall()
        fence = Fence(dict(seen))
        if not fence.admit(tokens):
            db.execute("ROLLBACK")
            return False
        db.execute("DELETE FROM fence WHERE key = ?", (key,))
        db.executemany(
            "INSERT INTO fence VALUES (?, ?, ?)", [(key, n, v) for n, v in fence.seen.items()]
        )
        db.execute("INSERT OR REPLACE INTO data VALUES (?, ?)", (key, value))
        db.execute("COMMIT")
        return True
    finally:
        db.close()


def read(path, key):
    """The value under ``key`` (``None`` if none was written)."""
    db = _open(path)
    try:
        row = db.execute("SELECT value FROM data WHERE key = ?", (key,)).fetchone()
        return row and row[0]
    finally:
        db.close()
