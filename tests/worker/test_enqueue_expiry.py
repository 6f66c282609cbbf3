"""A lock taken at enqueue never outlives its message's expiry (plus EXPIRY_MARGIN_MS), whatever
the broker does with an expired message: RabbitMQ drops it in the queue, where no worker sees it."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis

from celery_redislock import SingletonTask
from celery_redislock.compat.once import QueueOnce
from celery_redislock.integration.sending import EXPIRY_MARGIN_MS

from .conftest import lock_keys, poll


def queued_ttl(locks: redis.Redis, task_id: str) -> int:
    """The PTTL of the lock ``task_id`` holds while queued."""
    [key] = [k for k in lock_keys(locks) if locks.get(k) == f"{task_id}@queued".encode()]
    return int(locks.pttl(key))


def test_an_enqueue_lock_expires_with_its_message_dropped_by_rabbitmq(
    make_app: Any, worker: Any, locks: redis.Redis, rabbitmq_url: str
) -> None:
    # One busy worker process: the expiring message waits in RabbitMQ's queue (acks_late and a
    # prefetch of one keep it there, not in the worker), which drops it when it expires.
    app = make_app(broker_url=rabbitmq_url, worker_prefetch_multiplier=1)
    gate = threading.Event()
    busy_started = threading.Event()

    @app.task(shared=False, acks_late=True)
    def busy() -> str:
        busy_started.set()
        assert gate.wait(60)
        return "busy"

    @app.task(base=SingletonTask, shared=False, lock_on="enqueue")
    def report(user: int) -> int:
        return user

    with worker(app, concurrency=1):
        try:
            blocker = busy.delay()
            assert busy_started.wait(30)
            expired = report.apply_async((7,), expires=1)
            assert report.delay(7).id == expired.id  # queued: a duplicate
            # Gone soon after the expiry, not queued_timeout (an hour) later.
            assert poll(lambda: not lock_keys(locks), timeout=30), lock_keys(locks)
            again = report.delay(7)
            assert again.id != expired.id
        finally:
            gate.set()
        assert blocker.get(timeout=30) == "busy"
        assert again.get(timeout=30) == 7
    assert expired.state == "PENDING"  # RabbitMQ dropped it: it never reached the worker
    assert lock_keys(locks) == []


@pytest.mark.parametrize(
    "expires",
    [
        pytest.param(5, id="seconds"),
        pytest.param(5.0, id="float seconds"),
        pytest.param("aware datetime", id="aware datetime"),
        pytest.param("naive datetime", id="naive UTC datetime"),
    ],
)
def test_the_enqueue_lock_lives_until_the_expiry_given_at_send(
    make_app: Any, locks: redis.Redis, expires: Any
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, lock_on="enqueue", queued_timeout=600)
    def report(user: int) -> int:
        return user

    now = datetime.now(timezone.utc)
    if expires == "aware datetime":
        expires = now + timedelta(seconds=5)
    elif expires == "naive datetime":
        expires = (now + timedelta(seconds=5)).replace(tzinfo=None)
    result = report.apply_async((1,), expires=expires)
    assert 0 < queued_ttl(locks, result.id) <= 5000 + EXPIRY_MARGIN_MS


def test_the_task_default_expires_bounds_the_enqueue_lock_unless_the_send_clears_it(
    make_app: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, lock_on="enqueue", queued_timeout=600, expires=5)
    def report(user: int) -> int:
        return user

    assert 0 < queued_ttl(locks, report.delay(1).id) <= 5000 + EXPIRY_MARGIN_MS
    # expires=None: no expiry, as Celery reads it (the task's default is cleared).
    assert queued_ttl(locks, report.apply_async((2,), expires=None).id) > 590_000
    # An expiry past queued_timeout does not lengthen the lock.
    assert queued_ttl(locks, report.apply_async((3,), expires=3600).id) <= 600_000


def test_a_countdown_does_not_stretch_the_lock_past_the_expiry(make_app: Any, locks: redis.Redis) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, lock_on="enqueue", queued_timeout=600)
    def report(user: int) -> int:
        return user

    # The expiry counts from the send, as the broker's TTL does, not from the countdown.
    result = report.apply_async((1,), countdown=30, expires=5)
    assert 0 < queued_ttl(locks, result.id) <= 5000 + EXPIRY_MARGIN_MS


def test_a_celery_once_timeout_does_not_outlive_the_expiry(make_app: Any, locks: redis.Redis) -> None:
    app = make_app()

    @app.task(base=QueueOnce, shared=False)
    def report(user: int) -> int:
        return user

    result = report.apply_async((1,), once={"timeout": 600}, expires=5)
    assert 0 < queued_ttl(locks, result.id) <= 5000 + EXPIRY_MARGIN_MS


def test_a_retry_queued_again_keeps_its_expiry(make_app: Any, worker: Any, locks: redis.Redis) -> None:
    app = make_app()
    ttls: list[int] = []
    retried = threading.Event()

    @app.task(base=SingletonTask, shared=False, bind=True, lock_on="enqueue", queued_timeout=600)
    def report(self: Any, user: int) -> int:
        if self.request.retries == 0:
            try:
                # The retry's message would run in 30 s, but the call expires in 5.
                self.retry(countdown=30, expires=5)
            finally:
                ttls.append(queued_ttl(locks, self.request.id))
                retried.set()
        return user

    with worker(app, concurrency=1):
        report.delay(1)
        assert retried.wait(30)
    assert 0 < ttls[0] <= 5000 + EXPIRY_MARGIN_MS
