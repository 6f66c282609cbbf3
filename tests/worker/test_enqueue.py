"""lock_on="enqueue": apply_async takes the lock, the worker takes it over (real broker, real workers)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from kombu.exceptions import OperationalError

from celery_redislock import DuplicateTaskError, SingletonTask
from celery_redislock.integration.runtime import reset_runtime
from tests.harness import free_port

from .conftest import lock_keys, poll, queued_count


def test_a_second_call_while_queued_sends_nothing_and_returns_the_original(
    make_app: Any, worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    ran: list[int] = []

    @app.task(base=SingletonTask, shared=False, lock_on="enqueue", queued_timeout=60)
    def rebuild(tenant: int) -> int:
        ran.append(tenant)
        return tenant

    first = rebuild.delay(1)
    second = rebuild.delay(1)
    other = rebuild.delay(2)
    assert second.id == first.id
    assert other.id != first.id
    assert poll(lambda: queued_count(app) == 2), queued_count(
        app
    )  # one message for tenant 1, one for tenant 2
    [key] = [k for k in lock_keys(locks) if locks.get(k) == f"{first.id}@queued".encode()]
    assert 55_000 < locks.pttl(key) <= 60_000

    with worker(app):
        assert first.get(timeout=10) == 1
        assert second.get(timeout=10) == 1
        assert other.get(timeout=10) == 2
    assert sorted(ran) == [1, 2]
    assert lock_keys(locks) == []


def test_the_worker_takes_the_enqueue_lock_over(make_app: Any, worker: Any, locks: redis.Redis) -> None:
    app = make_app()
    gate = threading.Event()
    seen: list[tuple[bytes, int]] = []

    @app.task(base=SingletonTask, shared=False, lock_on="enqueue", lock_timeout=20, queued_timeout=600)
    def report(user: int) -> str:
        [key] = lock_keys(locks)
        seen.append((locks.get(key), locks.pttl(key)))
        assert gate.wait(10)
        return "ok"

    result = report.delay(9)
    with worker(app):
        assert poll(lambda: seen)
        assert report.delay(9).id == result.id  # running: still the original's id
        gate.set()
        assert result.get(timeout=10) == "ok"
    holder, ttl = seen[0]
    assert holder.startswith(f"{result.id}@".encode()) and not holder.endswith(b"@queued")
    assert 15_000 < ttl <= 20_000  # switched to lock_timeout
    assert lock_keys(locks) == []


def test_a_failed_publish_leaves_no_lock(make_app: Any, locks: redis.Redis, urls: dict[str, str]) -> None:
    app = make_app(broker_url=f"redis://127.0.0.1:{free_port()}/0", broker_connection_timeout=0.5)

    @app.task(base=SingletonTask, shared=False, lock_on="enqueue")
    def charge(card: str) -> None: ...

    with pytest.raises(OperationalError):
        charge.apply_async(("c1",), retry=False)
    assert lock_keys(locks) == []


def test_a_message_whose_lock_expired_while_queued_still_runs_once(
    make_app: Any, worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    gate = threading.Event()
    ran: list[str] = []

    @app.task(base=SingletonTask, shared=False, bind=True, lock_on="enqueue", queued_timeout=0.2)
    def sync(self: Any, account: int) -> str:
        ran.append(self.request.id)
        assert gate.wait(10)
        return "synced"

    first = sync.delay(5)
    assert poll(lambda: lock_keys(locks) == [], timeout=5)  # the queued lock expired
    slipped = sync.delay(5)  # so a second message slips in
    assert slipped.id != first.id
    assert poll(lambda: queued_count(app) == 2), queued_count(app)
    with worker(app, concurrency=2):
        assert poll(lambda: ran)
        outcomes: list[str] = []
        for result in (first, slipped):
            if result.id == ran[0]:
                continue
            with pytest.raises(DuplicateTaskError):
                result.get(timeout=10)
            outcomes.append("skipped")
        gate.set()
        assert {first.id: first, slipped.id: slipped}[ran[0]].get(timeout=10) == "synced"
    assert len(ran) == 1 and outcomes == ["skipped"]
    assert lock_keys(locks) == []


def test_sending_a_task_that_locks_at_execution_needs_no_lock_settings(make_app: Any) -> None:
    # A producer-only app: an in-memory broker and no Redis URL anywhere.
    app = make_app(broker_url="memory://", result_backend=None, redislock_url=None)

    @app.task(base=SingletonTask, shared=False)
    def rebuild(tenant: int) -> None: ...

    assert rebuild.delay(1).id


def test_how_a_task_is_sent_is_read_from_the_settings_once_as_the_worker_reads_them(
    make_app: Any, locks: redis.Redis
) -> None:
    # Asked of Celery's settings at every send, the route cost a send 7 lookups (about 35 µs).
    app = make_app()

    @app.task(base=SingletonTask, shared=False)
    def rebuild(tenant: int) -> None: ...

    rebuild.delay(1)
    assert lock_keys(locks) == []  # locks at execution: nothing taken at send
    app.conf.redislock_options = {"lock_on": "enqueue"}
    rebuild.delay(1)
    assert lock_keys(locks) == []  # the settings as first read, like the worker's plans
    reset_runtime(app)  # forgets them: the next send reads them again
    third = rebuild.delay(1)
    assert [locks.get(key) for key in lock_keys(locks)] == [f"{third.id}@queued".encode()]
    assert poll(lambda: queued_count(app) == 3), queued_count(app)
