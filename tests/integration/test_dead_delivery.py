"""A message delivered again after the child running it died (``reject_on_worker_lost``) takes
its key over from that dead delivery, whatever the key is: a lock, a semaphore's slot, a
keep_latest lock. One mechanism serves the three (``Execution.take_over_dead``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.engine.holders import holder_prefix
from celery_redislock.engine.redis_semaphore import take_slot
from celery_redislock.integration.acquisition import Execution, Holding
from celery_redislock.integration.liveness import process_alive
from celery_redislock.integration.runtime import Runtime, runtime_for

TASK_ID = "3f2c1a9e-dead-delivery"
NODE = "celery@dead-test"


@pytest.fixture
def app(redislock_url: str) -> Iterator[Celery]:
    app = Celery("dead_delivery", broker="memory://", set_as_current=False)
    app.conf.redislock_url = redislock_url
    yield app
    runtime_for(app).engine.client.close()


def dead_pid() -> int:
    """The pid of a process of this host that has ended and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    assert not process_alive(child.pid)
    return child.pid


def plant(runtime: Runtime, key: str, holder: str, options: dict[str, Any]) -> None:
    """Hold ``key`` as ``holder`` the way that holder's delivery took it."""
    if options.get("max_concurrency", 1) > 1:
        slot = take_slot(runtime.semaphores, key, holder, 2, 60_000, blocking=False, timeout=None)
        assert slot.acquired
    else:
        assert runtime.engine.take(key, holder, 60_000)


@pytest.mark.parametrize(
    "options",
    [{}, {"max_concurrency": 2}, {"keep_latest": True}],
    ids=["lock", "semaphore", "keep_latest"],
)
def test_a_redelivery_takes_the_key_over_from_its_dead_delivery(
    app: Celery, redislock_redis: redis.Redis, options: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(base=SingletonTask, shared=False, name="dead.task", lock_key=[], **options)
    def run() -> None:
        pass

    task = app.tasks[run.name]
    runtime = runtime_for(app)
    plan = runtime.plan(task, None)
    key = plan.key(task, (), {})
    dead = f"{holder_prefix(TASK_ID, NODE, dead_pid())}1"
    plant(runtime, key, dead, options)

    execution = Execution(runtime, plan.options, plan.mode, key, task.name, TASK_ID, NODE)
    with caplog.at_level("INFO", logger="celery_redislock.integration.acquisition"):
        outcome = plan.mode.acquire(task, execution)
    assert isinstance(outcome, Holding), outcome  # not refused as its own redelivered copy
    try:
        holders = (
            runtime.semaphores.holders(key)
            if plan.options.max_concurrency > 1
            else runtime.engine.holders(key)
        )
        assert holders == (execution.holder,)
        line = f"Released lock {key} of dead.task[{TASK_ID}]: its worker process died (holder {dead};"
        assert line in caplog.text
    finally:
        outcome.release()
