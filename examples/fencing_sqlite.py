"""Fencing tokens: a holder paused past its lock's TTL has its late write refused by the database.

    python examples/fencing_sqlite.py [REDIS_URL]

A lock with a TTL cannot stop a paused holder (a GC pause, a stopped VM, SIGSTOP) from waking
up after its lock expired and another holder took it. A fencing token can: each acquisition
gets a larger one, the write carries it, and the store refuses a token smaller than the last
it applied. Here the store is SQLite and the check one conditional UPDATE. In a task:
``@app.task(base=SingletonTask, bind=True, fencing=True)`` and ``self.request.redislock.token``.

Without a URL it starts a throwaway redis-server (the ``test`` extra brings one).
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import redis

from celery_redislock import RedisLock
from celery_redislock.contrib.testing import RedisServer


def fenced_write(db: str, value: str, token: int) -> bool:
    """Write ``value`` unless a write with a token at least ``token`` was applied: True if written."""
    con = sqlite3.connect(db)
    with con:
        applied = con.execute(
            "UPDATE doc SET value = :value, fence = :token WHERE id = 1 AND fence < :token",
            {"value": value, "token": token},
        ).rowcount
    con.close()
    return applied == 1


def main(url: str, db: str) -> None:
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE IF NOT EXISTS doc (id INTEGER PRIMARY KEY, value TEXT, fence INTEGER)")
        con.execute("INSERT OR REPLACE INTO doc VALUES (1, 'initial', 0)")
    r = redis.Redis.from_url(url)

    # renew=False stands in for a pause: nothing keeps the lock alive while its holder sleeps.
    slow = RedisLock(r, "example:doc", timeout=0.5, renew=False, fencing=True)
    slow.acquire()
    slow_token = slow.token
    assert slow_token is not None
    print(f"slow holder took the lock, token {slow_token}; now it pauses")
    while r.exists("example:doc"):  # the pause outlasts the TTL: the lock expires
        time.sleep(0.05)

    with RedisLock(r, "example:doc", timeout=10, fencing=True) as fast:
        assert fast.token is not None
        written = fenced_write(db, "written by the next holder", fast.token)
        print(f"next holder took the lock, token {fast.token}; its write applied: {written}")

    late = fenced_write(db, "written by the paused holder", slow_token)
    print(f"paused holder woke up and wrote with token {slow_token}; applied: {late}")
    with sqlite3.connect(db) as con:
        print("the row now:", con.execute("SELECT value, fence FROM doc").fetchone())


if __name__ == "__main__":
    with ExitStack() as stack:
        url = sys.argv[1] if len(sys.argv) > 1 else stack.enter_context(RedisServer()).url
        main(url, str(Path(stack.enter_context(tempfile.TemporaryDirectory())) / "fencing.sqlite"))
