"""``keep_latest=True``: one running and one pending call per key, the latest arguments win, on
real prefork workers and a real redis-server."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from celery import Celery
from kombu.exceptions import OperationalError

from celery_redislock import DuplicateTaskError, SingletonTask
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.modes.keep_latest import latest_key
from celery_redislock.ops.stats import counters

from .conftest import (
    WorkerProcess,
    open_gate,
    poll,
    queued_count,
    registration_error,
    stats_of,
    take_messages,
    wait_started,
)
from .mode_harness import ModeTask

NAME = "latest.render"

RENDER = ModeTask(
    NAME,
    "doc, version",
    """
    coord.rpush("ran:" + str(doc), version)
    return hold(self, "doc" + str(doc))
    """,
    {"keep_latest": True, "lock_key": ["doc"]},
)


def start(
    worker_process: Callable[..., WorkerProcess], urls: dict[str, str], node: str, pool: str = "prefork"
) -> WorkerProcess:
    return RENDER.start(worker_process, urls, "-c", "2", "-n", node, pool=pool)


def sender(app: Celery) -> Any:
    return RENDER.sender(app)


def latest_of(locks: redis.Redis) -> str | None:
    keys = list(locks.scan_iter("{redislock:*}:latest"))
    assert len(keys) <= 1, keys
    value = locks.get(keys[0]) if keys else None
    return None if value is None else value.decode()


def test_a_burst_while_one_runs_leaves_one_pending_call_the_latest(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    node = f"latest-{uuid.uuid4().hex[:8]}@test"
    proc = start(worker_process, urls, node)
    app = make_app()
    task = sender(app)
    first = task.delay(1, 0)
    wait_started(coord, "doc1")
    with ThreadPoolExecutor(4) as pool:
        burst = list(pool.map(lambda v: task.delay(1, v), range(1, 13)))
    # Every call of the burst reached the worker: pending (the latest when taken), or replaced
    # already (a later call was recorded when sent).
    assert poll(
        lambda: all(
            f"Pending {NAME}[{r.id}]" in proc.log() or f"Skipped duplicate {NAME}[{r.id}]" in proc.log()
            for r in burst
        ),
        20,
    ), proc.log()
    latest = latest_of(locks)
    assert latest in {r.id for r in burst}
    open_gate(coord, "doc1", times=2)
    assert first.get(timeout=15) == "done doc1"
    ran = [r for r in burst if r.get(timeout=20, propagate=False) == "done doc1"]
    assert [r.id for r in ran] == [latest]  # exactly one more run: the latest call
    for result in burst:
        if result.id != latest:
            error = result.get(timeout=15, propagate=False)
            assert isinstance(error, DuplicateTaskError), error
            # Names the call that replaced it: the latest then (a call replaced when taken may
            # name one replaced later in turn), never itself.
            assert error.holder_task_id in {r.id for r in burst} - {result.id}
            assert f"Skipped duplicate {NAME}[{result.id}]" in proc.log()
    latest_version = next(v for v, r in enumerate(burst, 1) if r.id == latest)
    assert coord.lrange("ran:1", 0, -1) == [b"0", str(latest_version).encode()]
    stats = stats_of(app, node)
    assert stats is not None and stats["counters"]["replaced"] == len(burst) - 1, stats


def test_a_child_killed_mid_run_lets_the_pending_call_run(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    proc = start(worker_process, urls, f"latest-{uuid.uuid4().hex[:8]}@test")
    task = sender(make_app())
    task.delay(2, 0)
    [(pid, _)] = wait_started(coord, "doc2")
    pending = task.delay(2, 1)
    assert poll(lambda: f"Pending {NAME}[{pending.id}]" in proc.log(), 15), proc.log()
    os.kill(pid, signal.SIGKILL)
    assert poll(lambda: "its worker process died" in proc.log(), 15), proc.log()
    # Two: Redis may hand one to the dead child's BLPOP before it sees its connection close.
    open_gate(coord, "doc2", times=2)
    # The parent freed the dead child's lock: the pending call runs at its next check.
    assert poll(lambda: pending.ready(), 20), proc.log()
    assert pending.get(timeout=20) == "done doc2"
    assert coord.lrange("ran:2", 0, -1) == [b"0", b"1"]


def test_keep_latest_on_the_solo_pool(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # A solo worker runs one task at a time and reads nothing meanwhile: the calls made while
    # one runs are seen by another worker (the threads pool and the cluster: test_modes_pools.py).
    for n in range(2):
        start(worker_process, urls, f"latest-solo{n}-{uuid.uuid4().hex[:8]}@test", pool="solo")
    task = sender(make_app())
    first = task.delay(4, 0)
    wait_started(coord, "doc4")
    replaced = task.delay(4, 1)
    assert poll(lambda: latest_of(locks) == replaced.id, 15)  # it is the pending call
    last = task.delay(4, 2)
    error = replaced.get(timeout=15, propagate=False)
    assert isinstance(error, DuplicateTaskError), error
    assert error.holder_task_id == last.id
    open_gate(coord, "doc4", times=2)
    assert first.get(timeout=15) == "done doc4"
    assert last.get(timeout=15) == "done doc4"
    assert coord.lrange("ran:4", 0, -1) == [b"0", b"2"]


@pytest.mark.parametrize(
    ("options", "other"),
    [
        ({"keep_latest": True, "lock_on": "enqueue"}, "lock_on"),
        ({"keep_latest": True, "fencing": True}, "fencing"),
        ({"keep_latest": True, "throttle": 5}, "throttle"),
        ({"keep_latest": True, "max_concurrency": 2}, "max_concurrency"),
    ],
)
def test_keep_latest_clashes_are_refused_at_registration(
    options: dict[str, Any], other: str, make_app: Callable[..., Celery]
) -> None:
    error = registration_error(make_app(), "latest.bad", **options)
    assert "option 'keep_latest'" in str(error) and other in str(error)


def test_a_redis_restart_loses_no_pending_call(
    urls: dict[str, str],
    coord: redis.Redis,
    lock_server: RedisServer,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    own = {**urls, "locks": lock_server.url}
    proc = RENDER.with_options(retry_countdown=0.2).start(worker_process, own, "-c", "2")
    task = sender(make_app(redislock_url=lock_server.url))
    first = task.delay(3, 0)
    wait_started(coord, "doc3")
    pending = task.delay(3, 1)
    assert poll(lambda: f"Pending {NAME}[{pending.id}]" in proc.log(), 15), proc.log()
    lock_server.stop()  # the pending call's next check cannot reach Redis: on_redis_error="retry"
    assert poll(lambda: f"Retrying {NAME}[{pending.id}]" in proc.log(), 15), proc.log()
    lock_server.start()  # empty: the lock and the latest key are gone
    open_gate(coord, "doc3", times=2)
    assert first.get(timeout=15) == "done doc3"
    assert pending.get(timeout=20) == "done doc3"
    assert coord.lrange("ran:3", 0, -1) == [b"0", b"1"]


def test_a_call_that_could_not_be_published_is_not_left_as_the_latest(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    # The broker refuses the publish after the call was recorded as its key's latest: left
    # there, it would replace the calls queued before it by a call that never comes.
    app = make_app(broker_url="redis://127.0.0.1:1/0")

    @app.task(base=SingletonTask, shared=False, name="latest.unsent", keep_latest=True, lock_key=["doc"])
    def render(doc: int, version: int) -> None: ...

    real = app.tasks[render.name]
    key = runtime_for(app).plan(real, None).key(real, (7, 0), {})
    locks.set(latest_key(key), "an-earlier-call")
    with pytest.raises(OperationalError):
        render.apply_async((7, 1), retry=False)
    assert locks.get(latest_key(key)) is None  # forgotten: the earlier call runs when taken


def test_with_the_lock_redis_down_a_call_is_sent_unrecorded_and_nothing_is_lost(
    make_app: Callable[..., Celery], urls: dict[str, str], lock_server: RedisServer
) -> None:
    app = make_app(redislock_url=lock_server.url, task_default_queue="latest-down")

    @app.task(base=SingletonTask, shared=False, name="latest.down", keep_latest=True, lock_key=["doc"])
    def render(doc: int, version: int) -> None: ...

    lock_server.stop()
    errors = counters.snapshot()["redis_errors"]
    result = render.delay(7, 1)  # published all the same: its worker records it when taken
    assert counters.snapshot()["redis_errors"] == errors + 1
    assert poll(lambda: queued_count(app, "latest-down") == 1)
    messages = take_messages(app, "latest-down")
    assert [m.headers["id"] for m in messages] == [result.id]
    assert "redislock_pending" not in messages[0].headers  # not recorded: the worker records it
