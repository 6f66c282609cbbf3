"""Where the compat bases could differ from the peers, decided: eager calls, a caller's own
``task_id=``, retries, and ``AlreadyQueued.countdown`` (docs/migration.md says why for each).
Real worker, real redis-server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery, states

from celery_redislock.compat import AlreadyQueued, DuplicateTaskError, QueueOnce, Singleton

from .conftest import lock_keys, poll

# -- eager mode: locked at send, as the peers locked it -----------------------------------------


def test_eager_nested_duplicate_raises_already_queued_at_the_nested_call(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    app = make_app(task_always_eager=True)

    @app.task(base=QueueOnce, shared=False)
    def job(n: int, nested: bool = True) -> str:
        if not nested:
            return "ran"
        try:
            job.delay(n, nested=True)  # the same call while this one runs
        except AlreadyQueued:
            return "refused"
        return job.delay(n + 1, nested=False).get()  # another call is not a duplicate

    result = job.delay(1)
    assert result.state == states.SUCCESS and result.get() == "refused"
    assert lock_keys(locks) == []  # released when the eager run ended
    assert job.delay(1).get() == "refused"  # and sendable again


def test_eager_singleton_nested_duplicate_gets_the_running_call(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    app = make_app(task_always_eager=True)

    @app.task(base=Singleton, shared=False, bind=True)
    def job(self: Any, n: int) -> bool:
        return bool(job.delay(n).id == self.request.id)

    assert job.delay(1).get() is True
    assert lock_keys(locks) == []


def test_eager_call_while_the_same_call_is_queued_is_refused(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=QueueOnce, shared=False)
    def job(n: int) -> int:
        return n

    queued = job.delay(1)  # for real: no worker, so it stays queued
    app.conf.task_always_eager = True
    with pytest.raises(AlreadyQueued) as caught:
        job.delay(1)
    assert caught.value.task_id == queued.id
    assert job.delay(2).get() == 2  # another call runs inline
    assert [k.decode() for k in lock_keys(locks)] == [job.get_key(args=(1,))]


# -- the caller's own task id -----------------------------------------------------------------


def test_a_duplicate_under_the_callers_own_task_id_is_refused(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=QueueOnce, shared=False)
    def job(n: int) -> int:
        return n

    mine = job.apply_async((1,), task_id="my-own-id")  # free: published under that id
    assert mine.id == "my-own-id"
    [key] = lock_keys(locks)
    assert locks.get(key) == b"my-own-id@queued"
    with pytest.raises(AlreadyQueued) as caught:
        job.apply_async((1,), task_id="my-other-id")
    assert caught.value.task_id == "my-own-id"
    refused = job.apply_async((1,), task_id="my-third-id", once={"graceful": True})
    assert refused.state == states.REJECTED
    assert locks.get(key) == b"my-own-id@queued"  # the refused sends took nothing
    with worker(app):
        assert mine.get(timeout=10) == 1
        assert poll(lambda: lock_keys(locks) == [])


def test_singleton_duplicate_under_the_callers_own_task_id_gets_the_original(
    make_app: Callable[..., Celery],
) -> None:
    app = make_app()

    @app.task(base=Singleton, shared=False)
    def job(n: int) -> int:
        return n

    @app.task(base=Singleton, shared=False, raise_on_duplicate=True)
    def strict(n: int) -> int:
        return n

    first = job.delay(1)
    assert job.apply_async((1,), task_id="given").id == first.id
    original = strict.delay(1)
    with pytest.raises(DuplicateTaskError) as caught:
        strict.apply_async((1,), task_id="given")
    assert caught.value.task_id == original.id


def test_a_retry_keeps_its_task_id_and_is_sent(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    tries: list[int] = []

    @app.task(base=QueueOnce, shared=False, bind=True, max_retries=2)
    def job(self: Any, n: int) -> int:
        tries.append(self.request.retries)
        if self.request.retries < 2:
            raise self.retry(countdown=0)
        return n

    with worker(app):
        result = job.delay(4)
        assert result.get(timeout=10) == 4
    assert tries == [0, 1, 2]
    assert poll(lambda: lock_keys(locks) == [])


# -- AlreadyQueued.countdown ------------------------------------------------------------------


def test_countdown_is_the_ttl_left_queued_then_the_renewed_ttl_while_running(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    gate, started = threading.Event(), threading.Event()

    @app.task(base=QueueOnce, shared=False, once={"timeout": 3600}, lock_timeout=20)
    def job() -> None:
        started.set()
        assert gate.wait(10)

    first = job.delay()
    with pytest.raises(AlreadyQueued) as queued:
        job.delay()
    assert 3590 < queued.value.countdown <= 3600  # queued: what once's timeout left
    with worker(app):
        assert started.wait(10)
        with pytest.raises(AlreadyQueued) as running:
            job.delay()
        assert 0 < running.value.countdown <= 20  # running: the renewed lock's TTL (lock_timeout)
        gate.set()
        first.get(timeout=10)
