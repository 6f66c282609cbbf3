"""``lock_until="started"``: unique while queued only, on real prefork workers and a real redis-server.

The sending side takes the enqueue lock (``lock_on="enqueue"``); the worker that starts the task
releases that task's own ``{task id}@queued`` lock and runs the body unlocked, so one more
identical call can be queued while it runs.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from billiard.exceptions import WorkerLostError
from celery import Celery

from celery_redislock import LockUnavailableError, OptionError, SingletonTask
from celery_redislock.contrib.testing import RedisServer

from .conftest import WorkerProcess, lock_keys, open_gate, poll, wait_started
from .mode_harness import ModeTask

NAME = "until.started"

STARTED = ModeTask(
    NAME,
    "tag",
    """
    # What the lock database holds when the body begins (the test reads it after the run).
    try:
        held = len(list(locks.scan_iter("redislock:*")))
    except redis.RedisError:  # on_redis_error="run": the lock Redis is down
        held = -1
    coord.rpush("locks-at-start:" + tag, held)
    coord.rpush("ran:" + tag, self.request.id)
    return hold(self, tag)
    """,
    {"lock_on": "enqueue", "lock_until": "started", "retry_countdown": 0.2},
)


def sender(app: Celery, policy: str = "retry") -> Any:
    """The task as the caller declares it: its apply_async takes the enqueue lock."""
    return STARTED.with_options(on_redis_error=policy).sender(app)


def start(
    worker_process: Callable[..., WorkerProcess], urls: dict[str, str], policy: str = "retry", *args: str
) -> WorkerProcess:
    task = STARTED.with_options(on_redis_error=policy)
    locks = f"locks = redis.Redis.from_url({urls['locks']!r})"
    return task.start(worker_process, urls, "-c", "1", *args, module=locks)


def test_a_second_call_is_refused_while_queued_and_accepted_once_the_first_started(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    task = sender(make_app())
    first = task.delay("a")
    assert task.delay("a").id == first.id  # queued: refused, the caller gets the original
    [key] = lock_keys(locks)
    assert locks.get(key) == f"{first.id}@queued".encode()

    proc = start(worker_process, urls)
    wait_started(coord, "a")
    # The body runs without a lock: the queued lock was released as the worker started it.
    assert coord.lrange("locks-at-start:a", 0, -1) == [b"0"]
    assert lock_keys(locks) == []
    second = task.delay("a")  # accepted while the first runs
    assert second.id != first.id
    assert task.delay("a").id == second.id  # and that one is unique while queued in turn
    assert locks.get(key) == f"{second.id}@queued".encode()

    open_gate(coord, "a")
    assert first.get(timeout=15) == "done a"
    assert second.get(timeout=15) == "done a"
    assert coord.lrange("ran:a", 0, -1) == [first.id.encode(), second.id.encode()]
    assert lock_keys(locks) == []
    assert "Not sending duplicate" not in proc.log()


def test_only_the_task_s_own_queued_lock_is_released(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    task = sender(make_app())
    first = task.delay("b")
    [key] = lock_keys(locks)
    # The first's queued lock expired and another call's lock took the key meanwhile.
    locks.set(key, "other-task@queued", px=60_000)
    start(worker_process, urls)
    wait_started(coord, "b")
    assert locks.get(key) == b"other-task@queued"  # compare-and-delete: not ours, left alone
    open_gate(coord, "b")
    assert first.get(timeout=15) == "done b"
    assert locks.get(key) == b"other-task@queued"


@pytest.mark.parametrize("policy", ["retry", "run", "fail"])
def test_redis_unreachable_at_start_follows_on_redis_error(
    policy: str,
    urls: dict[str, str],
    coord: redis.Redis,
    lock_server: RedisServer,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    own = {**urls, "locks": lock_server.url}
    task = sender(make_app(redislock_url=lock_server.url), policy)
    result = task.delay("c")
    lock_server.stop()  # the queued lock is taken; the worker cannot reach Redis to release it
    proc = start(worker_process, own, policy)
    tag = "c"
    if policy == "fail":
        with pytest.raises(LockUnavailableError):
            result.get(timeout=15)
        assert coord.lrange("ran:" + tag, 0, -1) == []
        return
    if policy == "retry":
        assert poll(lambda: f"Retrying {NAME}[{result.id}]" in proc.log(), 15), proc.log()
        assert coord.lrange("ran:" + tag, 0, -1) == []  # not run while Redis is down
        lock_server.start()
    open_gate(coord, tag)
    assert result.get(timeout=30) == "done c"
    assert coord.lrange("ran:" + tag, 0, -1) == [result.id.encode()]  # once
    if policy == "run":
        assert f"Running {NAME}[{result.id}] without its lock" in proc.log()


def test_a_redis_restart_loses_no_call_and_locks_at_enqueue_again(
    urls: dict[str, str],
    coord: redis.Redis,
    lock_server: RedisServer,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
    caplog: pytest.LogCaptureFixture,
) -> None:
    task = sender(make_app(redislock_url=lock_server.url))
    locks = lock_server.client()
    lock_server.stop()
    unlocked = task.delay("r")  # Redis unreachable at send: sent without a lock, not lost
    assert f"Sending {NAME}[{unlocked.id}] without an enqueue lock" in caplog.text
    lock_server.start()
    first = task.delay("r")
    lock_server.restart()  # empty: the first call's queued lock is gone
    # So one more is queued beside it (the window a restart without persistence opens), and
    # that one is unique while queued again.
    second = task.delay("r")
    assert second.id != first.id
    assert task.delay("r").id == second.id
    [key] = lock_keys(locks)
    start(worker_process, {**urls, "locks": lock_server.url})
    open_gate(coord, "r", times=3)
    calls = (unlocked, first, second)
    assert [r.get(timeout=15) for r in calls] == ["done r"] * 3
    assert coord.lrange("ran:r", 0, -1) == [r.id.encode() for r in calls]  # each once, in order
    # The two before it left the second's queued lock alone (compare-and-delete); it freed it.
    assert coord.lrange("locks-at-start:r", 0, -1) == [b"1", b"1", b"0"]
    assert locks.get(key) is None
    locks.close()


def test_a_child_killed_mid_run_leaves_the_next_call_s_queued_lock_alone(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    node = f"until-{uuid.uuid4().hex[:8]}@test"
    proc = start(worker_process, urls, "retry", "-n", node)
    app = make_app()
    task = sender(app)
    first = task.delay("k")
    [(pid, _)] = wait_started(coord, "k")
    # Queued on a queue the worker does not consume yet: it stays queued while the test looks.
    second = task.apply_async(("k",), queue="later")
    assert second.id != first.id
    [key] = lock_keys(locks)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerLostError):
        first.get(timeout=15)
    # The parent logs this after its task_failure handlers (the release of a dead child's lock) ran.
    assert poll(lambda: "Task handler raised error: WorkerLostError" in proc.log(), 15), proc.log()
    # It freed only what the dead child held (nothing: its body ran unlocked).
    assert locks.get(key) == f"{second.id}@queued".encode()
    assert task.delay("k").id == second.id  # still unique while queued
    assert f"Released lock {key} of {NAME}[{first.id}]" not in proc.log()
    app.control.add_consumer("later", destination=[node], reply=True, timeout=5)
    # Three: Redis may hand one to the dead child's BLPOP before it sees its connection close.
    open_gate(coord, "k", times=3)
    assert second.get(timeout=15) == "done k"
    assert lock_keys(locks) == []
    third = task.delay("k")  # nothing stuck: the next call is queued and runs
    assert third.id != second.id
    assert third.get(timeout=15) == "done k"
    assert coord.lrange("ran:k", 0, -1) == [first.id.encode(), second.id.encode(), third.id.encode()]


def test_lock_until_started_needs_lock_on_enqueue(make_app: Callable[..., Celery]) -> None:
    app = make_app()
    with pytest.raises(OptionError) as caught:

        @app.task(base=SingletonTask, shared=False, name="until.bad", lock_on="execute", lock_until="started")
        def bad() -> None: ...

        assert bad.name  # a task of an app not finalized yet is bound when first used

    assert str(caught.value).startswith("task 'until.bad': option 'lock_until' 'started' cannot be used with")
    assert "lock_on='execute'" in str(caught.value)
