"""The package's signals (task_duplicate, lock_lost, lock_retaken) and ``request.redislock``, on
real workers: in-process for the duplicate paths, prefork where a lock is lost in a child."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from celery import Celery
from celery.utils.dispatch import Signal

from celery_redislock import DuplicateTaskError, SingletonTask
from celery_redislock.signals import lock_lost, lock_retaken, task_duplicate

from .conftest import WorkerProcess, lock_keys, poll, wait_started, worker_module


@contextmanager
def receiving(signal: Signal, *, failing: bool = False) -> Iterator[list[dict[str, Any]]]:
    """The calls of ``signal`` while connected; ``failing``: a receiver that raises is
    connected first, so the recorded one also proves a failing receiver breaks nothing."""
    calls: list[dict[str, Any]] = []

    def record(sender: Any = None, **kwargs: Any) -> None:
        kwargs.pop("signal", None)
        calls.append({"sender": sender, **kwargs})

    def explode(**_: Any) -> None:
        raise RuntimeError("a receiver's bug")

    if failing:
        signal.connect(explode, weak=False)
    signal.connect(record, weak=False)
    try:
        yield calls
    finally:
        signal.disconnect(record)
        signal.disconnect(explode)


def test_a_duplicate_skipped_at_execution_sends_task_duplicate_and_a_failing_receiver_breaks_nothing(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    gate = threading.Event()
    started = threading.Event()

    @app.task(base=SingletonTask, shared=False, bind=True)
    def rebuild(self: Any, tenant: int) -> str:
        started.set()
        assert gate.wait(10)
        return "built"

    with receiving(task_duplicate, failing=True) as calls, worker(app, concurrency=2):
        first = rebuild.delay(1)
        assert started.wait(10)
        duplicate = rebuild.delay(1)
        with pytest.raises(DuplicateTaskError) as info:  # skipped as ever, receiver or not
            duplicate.get(timeout=10)
        gate.set()
        assert first.get(timeout=10) == "built"

    assert calls == [
        {
            "sender": app.tasks[rebuild.name],
            "task_id": duplicate.id,
            "key": info.value.key,
            "holder": info.value.holder,
            "strategy": "skip",
            "where": "execute",
        }
    ]
    assert info.value.holder.startswith(f"{first.id}@")
    assert lock_keys(locks) == []


def test_a_duplicate_refused_at_send_sends_task_duplicate_where_enqueue(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, lock_on="enqueue", on_duplicate="retry")
    def report(day: str) -> None: ...

    with receiving(task_duplicate, failing=True) as calls:
        first = report.delay("monday")
        again = report.delay("monday")  # refused: returns the queued one's result

    assert again.id == first.id
    assert len(calls) == 1
    call = calls[0]
    assert call["sender"] is app.tasks[report.name]
    assert call["where"] == "enqueue"
    assert call["strategy"] == "retry"
    assert call["holder"] == f"{first.id}@queued"
    assert call["task_id"] != first.id  # the refused call's own id, never published
    assert [k.decode() for k in lock_keys(locks)] == [call["key"]]


def test_request_redislock_describes_the_lock_the_body_holds(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    seen: dict[str, Any] = {}

    @app.task(base=SingletonTask, shared=False, bind=True)
    def body(self: Any) -> None:
        info = self.request.redislock
        seen.update(key=info.key, holder=info.holder, token=info.token, lost=info.lost)
        seen["in_redis"] = locks.get(info.key)
        seen["acquired_at"] = info.acquired_at
        seen["server_now"] = locks.time()

    with worker(app, concurrency=1):
        result = body.delay()
        result.get(timeout=10)

    assert seen["in_redis"].decode() == seen["holder"]
    assert seen["holder"].startswith(f"{result.id}@")
    assert seen["token"] is None and seen["lost"] is False
    seconds, micros = seen["server_now"]
    assert 0 <= seconds + micros / 1e6 - seen["acquired_at"] < 5


def test_request_redislock_is_none_while_a_body_runs_unlocked(
    make_app: Callable[..., Celery], worker: Any
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, bind=True, lock_on="enqueue", lock_until="started")
    def body(self: Any) -> bool:
        return self.request.redislock is None

    with worker(app, concurrency=1):
        assert body.delay().get(timeout=10) is True


LOST_TASKS = """
import json

from celery_redislock.signals import lock_lost, lock_retaken


def note(name):
    def receiver(sender=None, **kwargs):
        kwargs.pop("signal", None)
        coord.rpush(name, json.dumps({"sender": getattr(sender, "name", None), **kwargs}))
    return receiver


lock_lost.connect(note("lock_lost"), weak=False)
lock_retaken.connect(note("lock_retaken"), weak=False)


@app.task(base=SingletonTask, bind=True, name="observe.long", lock_timeout=1.5)
def long(self, tag):
    coord.rpush("started:" + tag, f"{os.getpid()} {self.request.id}")
    # A long body checking its lock before each step: it stops once the lock is lost.
    for _ in range(600):
        if self.request.redislock.lost:
            coord.rpush("body:" + tag, "stopped: lost")
            return "stopped"
        time.sleep(0.05)
    return "never lost"
"""


def test_a_lock_taken_away_mid_run_fires_lock_retaken_then_lock_lost_and_sets_lost(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    worker_process: Callable[..., WorkerProcess],
    make_app: Callable[..., Celery],
) -> None:
    worker_process(worker_module(urls, "observe", "import time\n" + LOST_TASKS), "-c", "1")
    result = make_app().send_task("observe.long", args=["t"])
    [(_, task_id)] = wait_started(coord, "t")
    assert poll(lambda: len(lock_keys(locks)) == 1)
    key = lock_keys(locks)[0].decode()
    holder = locks.get(key).decode()

    locks.delete(key)  # as if it expired, or Redis lost it: the renewal takes it back
    assert poll(lambda: coord.llen("lock_retaken") == 1, timeout=10)
    assert locks.get(key).decode() == holder
    locks.set(key, "thief", px=60_000)  # someone else has it now
    assert poll(lambda: coord.llen("lock_lost") == 1, timeout=10)

    assert result.get(timeout=15) == "stopped"
    assert coord.lrange("body:t", 0, -1) == [b"stopped: lost"]
    expected = {"sender": "observe.long", "key": key, "holder": holder, "task_id": task_id}
    assert json.loads(coord.lindex("lock_retaken", 0)) == {**expected, "new_holder": None}
    assert json.loads(coord.lindex("lock_lost", 0)) == {**expected, "new_holder": "thief"}
    assert locks.get(key) == b"thief"  # the lost lock was not released from under its holder


def test_a_redislock_outside_a_task_sends_lock_retaken_and_lock_lost_with_no_sender(
    locks: redis.Redis,
) -> None:
    from celery_redislock import RedisLock
    from celery_redislock.engine.renewal import get_renewer

    lock = RedisLock(locks, "observe:plain", timeout=30)
    assert lock.acquire()
    holder = lock.holder
    try:
        with receiving(lock_retaken, failing=True) as retaken, receiving(lock_lost, failing=True) as lost:
            locks.delete("observe:plain")
            get_renewer().renew_now()  # one cycle, now: the renewal thread's own would come later
            locks.set("observe:plain", "thief")
            get_renewer().renew_now()
    finally:
        locks.delete("observe:plain")
    common = {"sender": None, "key": "observe:plain", "holder": holder, "task_id": None}
    assert retaken == [{**common, "new_holder": None}]
    assert lost == [{**common, "new_holder": "thief"}]
