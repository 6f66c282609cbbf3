"""First light: a SingletonTask runs under its lock on a real in-process worker."""

from __future__ import annotations

from typing import Any

import redis

from celery_redislock import SingletonTask

from .conftest import lock_keys


def test_a_task_runs_and_releases(make_app: Any, worker: Any, locks: redis.Redis) -> None:
    app = make_app()
    seen: list[list[bytes]] = []

    @app.task(base=SingletonTask, shared=False)
    def add(x: int, y: int) -> int:
        seen.append(lock_keys(locks))
        return x + y

    with worker(app):
        assert add.delay(2, 3).get(timeout=10) == 5
    assert len(seen[0]) == 1 and seen[0][0].startswith(b"redislock:")
    assert lock_keys(locks) == []
