"""``throttle=SECONDS``: at most one run of a key starts per window, on real prefork workers and a
real redis-server. The run holds the key (renewed); when it ends the key is kept as
``{task id}@throttled`` until the window, counted from the run's start, is over."""

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

from celery_redislock.contrib.testing import RedisServer

from .conftest import (
    WorkerProcess,
    lock_keys,
    open_gate,
    outcome,
    poll,
    registration_error,
    stats_of,
    wait_started,
)
from .mode_harness import ModeTask, skipped

NAME = "throttle.report"

REPORT = ModeTask(
    NAME,
    "tag",
    """
    coord.rpush("ran:" + tag, self.request.id)
    return hold(self, tag)
    """,
    {"retry_countdown": 0.2},
)


def task_of(window: float, timeout: float = 30, lock_on: str = "execute") -> ModeTask:
    return REPORT.with_options(throttle=window, lock_timeout=timeout, lock_on=lock_on)


def start(
    worker_process: Callable[..., WorkerProcess],
    urls: dict[str, str],
    window: float,
    timeout: float = 30,
    lock_on: str = "execute",
    node: str = "throttle@test",
) -> WorkerProcess:
    return task_of(window, timeout, lock_on).start(worker_process, urls, "-c", "2", "-n", node)


def sender(app: Celery, window: float, lock_on: str = "execute") -> Any:
    return task_of(window, lock_on=lock_on).sender(app)


def burst(task: Any, tag: str, count: int = 12, threads: int = 4) -> list[Any]:
    """``count`` calls of ``task(tag)`` sent at once from ``threads`` threads."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda _: task.delay(tag), range(count)))


def test_one_run_starts_per_window_and_the_window_outlives_the_run(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    node = f"throttle-{uuid.uuid4().hex[:8]}@test"
    proc = start(worker_process, urls, window=4, node=node)
    app = make_app()
    task = sender(app, 4)
    first = task.delay("a")
    [(_, first_id)] = wait_started(coord, "a")
    others = burst(task, "a")
    for result in others:  # while it runs: duplicates, skipped (the default on_duplicate)
        assert first.id in skipped(result).holder
    open_gate(coord, "a", times=1)
    assert first.get(timeout=15) == "done a"
    # The run is over, its window is not: the key stays, naming the run that opened it.
    [key] = lock_keys(locks)
    assert locks.get(key) == f"{first_id}@throttled".encode()
    assert 0 < locks.pttl(key) <= 4000
    late = task.delay("a")
    assert skipped(late).holder == f"{first_id}@throttled"
    assert f"Skipped duplicate {NAME}[{late.id}]" in proc.log()
    # Once the window is over, the next call runs.
    assert poll(lambda: not lock_keys(locks), 6)
    open_gate(coord, "a", times=1)
    after = task.delay("a")
    assert after.get(timeout=15) == "done a"
    assert coord.lrange("ran:a", 0, -1) == [first.id.encode(), after.id.encode()]
    stats = stats_of(app, node)
    assert stats is not None and stats["counters"]["throttled"] == len(others) + 1, stats


def test_a_run_longer_than_the_window_is_renewed_and_never_overlaps(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    start(worker_process, urls, window=0.5, timeout=1)
    task = sender(make_app(), 0.5)
    first = task.delay("b")
    wait_started(coord, "b")
    [key] = lock_keys(locks)
    # Three lock timeouts later (renewed meanwhile), a call is still refused: the run holds it.
    assert not poll(lambda: locks.get(key) is None, 3)
    assert first.id in skipped(task.delay("b")).holder
    open_gate(coord, "b", times=1)
    assert first.get(timeout=15) == "done b"
    # The window ended long ago: the key is released at once.
    assert poll(lambda: not lock_keys(locks), 2)
    assert coord.llen("ran:b") == 1


def test_a_child_killed_mid_run_does_not_hold_the_key_for_ever(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    proc = start(worker_process, urls, window=60)
    task = sender(make_app(), 60)
    task.delay("c")
    [(pid, _)] = wait_started(coord, "c")
    os.kill(pid, signal.SIGKILL)
    # The parent frees the dead child's lock (it never ran to its end, so opened no window).
    assert poll(lambda: not lock_keys(locks), 15), proc.log()
    assert poll(lambda: "its worker process died" in proc.log(), 5)
    # Two: Redis may hand one to the dead child's BLPOP before it sees its connection close.
    open_gate(coord, "c", times=2)
    assert task.delay("c").get(timeout=15) == "done c"


def test_lock_on_enqueue_refuses_at_send_with_the_run_s_result(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    task = sender(make_app(), 4, lock_on="enqueue")
    first = task.delay("d")
    assert {r.id for r in burst(task, "d")} == {first.id}  # queued: refused at send
    proc = start(worker_process, urls, window=4, lock_on="enqueue")
    open_gate(coord, "d", times=1)
    assert outcome(first, proc) == "done d"
    # The window: still refused at send, answered with the run that opened it.
    assert task.delay("d").id == first.id
    [key] = lock_keys(locks)
    assert locks.get(key) == f"{first.id}@throttled".encode()
    assert poll(lambda: not lock_keys(locks), 6)
    open_gate(coord, "d", times=1)
    second = task.delay("d")
    assert second.id != first.id
    assert outcome(second, proc) == "done d"


@pytest.mark.parametrize(
    ("options", "other"),
    [
        ({"throttle": 5, "max_concurrency": 2}, "max_concurrency"),
        ({"throttle": 5, "lock_on": "enqueue", "lock_until": "started"}, "lock_until"),
    ],
)
def test_throttle_clashes_are_refused_at_registration(
    options: dict[str, Any], other: str, make_app: Callable[..., Celery]
) -> None:
    error = registration_error(make_app(), "throttle.bad", **options)
    assert "option 'throttle'" in str(error) and other in str(error)


def test_a_redis_restart_loses_no_call_and_keeps_the_window(
    urls: dict[str, str],
    coord: redis.Redis,
    lock_server: RedisServer,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # lock_timeout 0.6: renewed every 0.2 s, so a run takes its key back that soon after a restart.
    proc = start(worker_process, {**urls, "locks": lock_server.url}, window=30, timeout=0.6)
    task = sender(make_app(redislock_url=lock_server.url), 30)
    locks = lock_server.client()
    lock_server.stop()
    first = task.delay("r")  # its worker cannot reach Redis: on_redis_error="retry"
    assert poll(lambda: f"Retrying {NAME}[{first.id}]" in proc.log(), 15), proc.log()
    assert coord.llen("ran:r") == 0  # not run unlocked
    lock_server.start()
    wait_started(coord, "r")  # the retry runs it
    [key] = lock_keys(locks)
    holder = locks.get(key)
    lock_server.restart()  # empty: the running call's key is gone
    # Its renewal takes the key back (before that, a restart without persistence lets a second
    # run start: docs/guarantees.md); from then on the key is the run's again.
    assert poll(lambda: locks.get(key) == holder, 5), proc.log()
    assert first.id in skipped(task.delay("r")).holder
    open_gate(coord, "r", times=1)
    assert first.get(timeout=15) == "done r"
    # The window outlives the restart and the run: the next call is still a duplicate.
    assert locks.get(key) == f"{first.id}@throttled".encode()
    assert skipped(task.delay("r")).holder == f"{first.id}@throttled"
    assert coord.lrange("ran:r", 0, -1) == [first.id.encode()]
    locks.close()
