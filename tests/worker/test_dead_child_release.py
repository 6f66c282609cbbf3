"""The parent frees a dead child's lock, never the lock of a live delivery of the same task id.

Two deliveries of one message can both run on one prefork worker: child A stalls (SIGSTOP here;
a swapped-out or frozen process in production), its lock lapses, and a second delivery of the
same task id takes the lock in child B. When A dies, the parent answers for A's request (the
child-exit hook, ``WorkerLostError``, the hard time limit): it must free A's holder only, as B's
holder names the same task id on the same worker. Each test pauses A, waits for B to run, ends
A, then checks B's lock server-side, sends a duplicate (skipped), and lets B finish: B never
logs "Lost lock".
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis
from celery import Celery

from celery_redislock import DuplicateTaskError
from celery_redislock.integration.liveness import process_alive

from .conftest import WorkerProcess, lock_keys, open_gate, poll, restore_visible, wait_started, worker_module

#: The Redis transport gives an unacknowledged message out again after this many seconds.
VISIBILITY_TIMEOUT = 2

TASKS = f"""
app.conf.broker_transport_options = {{"visibility_timeout": {VISIBILITY_TIMEOUT}}}


@app.task(base=SingletonTask, bind=True, name="dead.paused", acks_late=True, lock_timeout=4.5)
def paused(self, tag):
    return hold(self, tag)


@app.task(base=SingletonTask, bind=True, name="dead.limited", lock_timeout=1.5)
def limited(self, tag):
    return hold(self, tag)
"""

PAUSED = "dead.paused"
LIMITED = "dead.limited"


@pytest.fixture
def proc(urls: dict[str, str], worker_process: Callable[..., WorkerProcess]) -> WorkerProcess:
    return worker_process(worker_module(urls, "dead", TASKS), "-c", "2")


@pytest.fixture
def client(make_app: Callable[..., Celery]) -> Celery:
    return make_app(broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT})


@contextmanager
def paused_child(coord: redis.Redis, tag: str) -> Iterator[tuple[int, str]]:
    """``(pid, task id)`` of the first delivery of ``tag``, its child stopped (SIGSTOP) so its
    lock lapses; SIGKILLed at the end whatever happens, so no stopped process outlives a test."""
    [(child, task_id)] = wait_started(coord, tag)
    os.kill(child, signal.SIGSTOP)
    try:
        yield child, task_id
    finally:
        if process_alive(child):
            os.kill(child, signal.SIGKILL)


def second_delivery(coord: redis.Redis, tag: str, redeliver: Callable[[], None]) -> int:
    """The pid of the child running the second delivery of ``tag``, once it started."""

    def started() -> bool:
        redeliver()
        return len(coord.lrange(f"started:{tag}", 0, -1)) >= 2

    assert poll(started, 30, interval=0.2), "the second delivery never ran"
    return wait_started(coord, tag, count=2)[1][0]


def once(send: Callable[[str], object]) -> Callable[[str], None]:
    """``send(task_id)`` the first time it is called, nothing after."""
    sent: list[object] = []

    def send_once(task_id: str) -> None:
        if not sent:
            sent.append(send(task_id))

    return send_once


def held_by(locks: redis.Redis, task_id: str, pid: int) -> tuple[bytes, bytes]:
    """``(key, holder)`` of the one lock, held by the delivery of ``task_id`` in process ``pid``."""
    [key] = lock_keys(locks)
    holder = locks.get(key)
    assert holder is not None and holder.decode().startswith(f"{task_id}@"), holder
    assert f":{pid}:" in holder.decode(), (holder, pid)
    return key, holder


def assert_b_keeps_its_lock(
    proc: WorkerProcess,
    client: Celery,
    coord: redis.Redis,
    locks: redis.Redis,
    name: str,
    tag: str,
    task_id: str,
    lock: tuple[bytes, bytes],
) -> None:
    """After the parent answered for A: B still holds its lock, a duplicate is skipped, and B
    runs to its end without losing the lock."""
    key, holder = lock
    # A's own lock had lapsed before B took it: the parent had nothing of A's to free. (B's
    # renewal would take back a lock freed under it within a renew interval: the log says so.)
    assert f"Released lock {key.decode()}" not in proc.log(), proc.log()
    assert locks.get(key) == holder, f"the parent freed the live delivery's lock:\n{proc.log()}"
    duplicate = client.send_task(name, args=[tag])
    with pytest.raises(DuplicateTaskError) as caught:
        duplicate.get(timeout=15)
    assert caught.value.holder == holder.decode()
    assert locks.get(key) == holder
    open_gate(coord, tag)
    done = f"Task {name}[{task_id}] succeeded"
    assert poll(lambda: done in proc.log(), 15), proc.log()
    assert poll(lambda: lock_keys(locks) == [], 5), lock_keys(locks)
    assert "Lost lock" not in proc.log() and "taken back" not in proc.log(), proc.log()
    assert len(coord.lrange(f"started:{tag}", 0, -1)) == 2, "the duplicate ran"


def sigkill_a_while_b_runs(
    proc: WorkerProcess,
    client: Celery,
    coord: redis.Redis,
    locks: redis.Redis,
    redeliver: Callable[[str], None],
) -> None:
    """A paused, B running the second delivery of the same message, then A SIGKILLed: both the
    child-exit hook and WorkerLostError answer for A."""
    client.send_task(PAUSED, args=["p"])
    with paused_child(coord, "p") as (a, task_id):
        b = second_delivery(coord, "p", lambda: redeliver(task_id))
        assert b != a
        lock = held_by(locks, task_id, b)
        os.kill(a, signal.SIGKILL)
        # Celery answers for A's request at the pool's next maintenance pass: after that, the
        # parent has had every chance to free what it should not.
        lost = "Task handler raised error: WorkerLostError"
        assert poll(lambda: lost in proc.log(), 20), proc.log()
    assert_b_keeps_its_lock(proc, client, coord, locks, PAUSED, "p", task_id, lock)


@pytest.mark.redis_broker(
    "redelivery of an unacknowledged message after the Redis transport's visibility_timeout"
)
def test_a_dead_childs_release_spares_the_copy_redelivered_after_the_visibility_timeout(
    proc: WorkerProcess, client: Celery, coord: redis.Redis, locks: redis.Redis
) -> None:
    sigkill_a_while_b_runs(proc, client, coord, locks, lambda _: restore_visible(client))


def test_a_dead_childs_release_spares_a_second_message_of_the_same_task_id(
    proc: WorkerProcess, client: Celery, coord: redis.Redis, locks: redis.Redis
) -> None:
    # Any broker: the same message published twice (a producer's retry with its own task id).
    sigkill_a_while_b_runs(
        proc,
        client,
        coord,
        locks,
        once(lambda task_id: client.send_task(PAUSED, args=["p"], task_id=task_id)),
    )


def test_a_child_killed_at_its_hard_time_limit_spares_the_live_delivery_of_its_task_id(
    proc: WorkerProcess, client: Celery, coord: redis.Redis, locks: redis.Redis
) -> None:
    # A's hard time limit falls while B runs the same message's second delivery (which has a
    # limit far away): the parent frees A's holder only.
    client.send_task(LIMITED, args=["t"], time_limit=8)
    with paused_child(coord, "t") as (a, task_id):
        send = once(lambda _: client.send_task(LIMITED, args=["t"], task_id=task_id, time_limit=120))
        b = second_delivery(coord, "t", lambda: send(task_id))
        assert b != a
        lock = held_by(locks, task_id, b)
        assert "Hard time limit" not in proc.log(), "B started too late for the test to say anything"
        limit = "Hard time limit (8"
        assert poll(lambda: limit in proc.log() and not process_alive(a), 20), proc.log()
    assert_b_keeps_its_lock(proc, client, coord, locks, LIMITED, "t", task_id, lock)
