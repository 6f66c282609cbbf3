"""Testing your own SingletonTasks: a real redis-server, an in-process worker, no sleeps."""

from __future__ import annotations

import threading

import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker

from celery_redislock import DuplicateTaskError, SingletonTask


def test_a_second_call_while_the_first_runs_is_skipped(app: Celery, redislock_redis: redis.Redis) -> None:
    started, finish = threading.Event(), threading.Event()

    @app.task(base=SingletonTask, shared=False)
    def rebuild_index(tenant_id: int) -> str:
        started.set()
        finish.wait(10)  # the test decides when the first call ends
        return f"rebuilt {tenant_id}"

    with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False):
        first = rebuild_index.delay(1)
        assert started.wait(10)
        second = rebuild_index.delay(1)
        with pytest.raises(DuplicateTaskError) as duplicate:
            second.get(timeout=10)
        assert duplicate.value.holder_task_id == first.id
        finish.set()
        assert first.get(timeout=10) == "rebuilt 1"

    assert list(redislock_redis.scan_iter("redislock:*")) == []  # released


def test_eager_mode_locks_too(app: Celery) -> None:
    app.conf.task_always_eager = True

    @app.task(base=SingletonTask, shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    assert add.delay(2, 3).get() == 5
