"""Fencing tokens through a real prefork worker: a holder paused (SIGSTOP) past lock_timeout loses
its lock to another execution, and its late write, once resumed, is refused by the token check."""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from celery_redislock import SingletonTask

from .conftest import WorkerProcess, lock_keys, open_gate, poll, wait_started, worker_module

TASKS = """
import sqlite3


@app.task(base=SingletonTask, bind=True, name="fence.write", lock_timeout=1, fencing=True, lock_key=["db"])
def write(self, db, tag, value):
    token = self.request.redislock.token
    hold(self, tag)  # started:<tag>, then blocks until the test opens gate:<tag>
    con = sqlite3.connect(db)
    with con:  # the side effect, fenced: applied only with a token above every one seen
        applied = con.execute(
            "UPDATE doc SET value = ?, fence = ? WHERE id = 1 AND fence < ?", (value, token, token)
        ).rowcount
    con.close()
    return {"token": token, "applied": applied == 1, "lost": self.request.redislock.lost}
"""


def test_a_holder_paused_past_its_lock_timeout_has_its_late_write_refused_by_the_token(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    worker_process: Callable[..., WorkerProcess],
    make_app: Callable[..., Celery],
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "fenced.sqlite")
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE doc (id INTEGER PRIMARY KEY, value TEXT, fence INTEGER)")
        con.execute("INSERT INTO doc VALUES (1, 'initial', 0)")
    worker_process(worker_module(urls, "fence", TASKS), "-c", "2")
    client = make_app()

    paused = client.send_task("fence.write", args=[db, "paused", "from the paused holder"])
    [(pid, _)] = wait_started(coord, "paused")
    [key] = lock_keys(locks)
    os.kill(pid, signal.SIGSTOP)  # its renewal thread stops too: the lock expires
    try:
        assert poll(lambda: not locks.exists(key), timeout=10)
        open_gate(coord, "next", times=1)
        after = client.send_task("fence.write", args=[db, "next", "from the next holder"])
        second = after.get(timeout=15)
    finally:
        os.kill(pid, signal.SIGCONT)
    open_gate(coord, "paused", times=1)
    first = paused.get(timeout=15)

    assert second["applied"] is True and second["token"] > first["token"]
    assert first["applied"] is False  # the late write carried a smaller token: refused
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT value, fence FROM doc").fetchall() == [
            ("from the next holder", second["token"])
        ]


def test_each_execution_of_a_fenced_task_gets_a_larger_token_locked_at_execution_or_enqueue(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    seen: list[tuple[int, float]] = []

    def note(request: Any) -> None:
        info = request.redislock
        assert info.token is not None and not info.lost
        seen.append((info.token, info.acquired_at))

    @app.task(base=SingletonTask, shared=False, bind=True, fencing=True)
    def at_execution(self: Any) -> None:
        note(self.request)

    @app.task(base=SingletonTask, shared=False, bind=True, fencing=True, lock_on="enqueue")
    def at_enqueue(self: Any) -> None:  # taken over from its @queued lock: a token then
        note(self.request)

    with worker(app, concurrency=1):
        for task in (at_execution, at_enqueue, at_execution, at_enqueue):
            task.delay().get(timeout=10)

    tokens = [token for token, _ in seen]
    assert tokens == sorted(tokens) and len(set(tokens)) == 4
    # The script's own clock: the token was issued from it, in microseconds.
    assert all(abs(token / 1e6 - acquired_at) < 0.001 for token, acquired_at in seen)
    assert lock_keys(locks) == []
