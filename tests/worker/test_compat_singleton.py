"""``celery_redislock.compat.Singleton``: celery-singleton's README usage, unchanged but for the
import, through a real worker and a real redis-server; ``clear_locks``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import OptionError
from celery_redislock.compat import DuplicateTaskError, Singleton, clear_locks

from .conftest import lock_keys, poll


@pytest.fixture
def app(make_app: Callable[..., Celery]) -> Celery:
    """celery-singleton's default setup: its locks on the (Redis) result backend."""
    return make_app(redislock_url=None)


def test_readme_quick_start_and_how_it_works(app: Celery, worker: Any, locks: redis.Redis) -> None:
    gate = threading.Event()

    @app.task(base=Singleton, shared=False)
    def do_stuff(*args: Any, **kwargs: Any) -> str:
        assert gate.wait(10)
        return "I just woke up"

    async_result = do_stuff.delay(1, 2, 3, a="b")
    async_result2 = do_stuff.delay(1, 2, 3, a="b")
    assert async_result == async_result2  # These are the same, task is only queued once
    c = do_stuff.delay(4, 5, 6)
    assert async_result != c  # c has different arguments so it spawns a new task
    assert lock_keys(locks) == []  # not on redislock_url's db: on the result backend's
    with worker(app):
        gate.set()
        assert async_result.get(timeout=10) == "I just woke up"
        d = do_stuff.delay(1, 2, 3, a="b")  # Now we can spawn a duplicate of it
        assert async_result != d
        assert d.get(timeout=10) == "I just woke up"
        assert c.get(timeout=10) == "I just woke up"


def test_unique_on(app: Celery) -> None:
    @app.task(base=Singleton, shared=False, unique_on=["username"])
    def do_something(username: str, otherarg: Any = None) -> None: ...

    @app.task(base=Singleton, shared=False, unique_on=[])
    def only_one(username: str) -> None: ...

    task1 = do_something.delay(username="bob", otherarg=99)
    task2 = do_something.delay(username="bob", otherarg=100)  # this is a duplicate of task1
    assert task1 == task2
    assert do_something.delay("alice") != task1
    assert only_one.delay("bob") == only_one.delay("alice")  # the task name only


def test_raise_on_duplicate_on_the_task_and_in_the_app(app: Celery) -> None:
    @app.task(base=Singleton, shared=False, raise_on_duplicate=True)
    def do_something(username: str) -> None: ...

    task1 = do_something.delay("bob")
    with pytest.raises(DuplicateTaskError) as caught:
        do_something.delay("bob")
    assert caught.value.task_id == task1.id  # the original's, as in celery-singleton
    assert str(caught.value).startswith(f"Attempted to queue a duplicate of task ID {task1.id}")

    app.conf.singleton_raise_on_duplicate = True

    @app.task(base=Singleton, shared=False)
    def by_app(n: int) -> None: ...

    @app.task(base=Singleton, shared=False, raise_on_duplicate=False)
    def overridden(n: int) -> None: ...

    by_app.delay(1)
    with pytest.raises(DuplicateTaskError):
        by_app.delay(1)
    first = overridden.delay(1)
    assert overridden.delay(1) == first  # the task option supersedes the app's


def test_lock_expiry_bounds_the_queued_lock(app: Celery, make_app: Callable[..., Celery]) -> None:
    @app.task(base=Singleton, shared=False, lock_expiry=10)
    def runs_for_12_seconds() -> None: ...

    runs_for_12_seconds.delay()
    backend = redis.Redis.from_url(app.conf.result_backend)
    [key] = [k for k in backend.scan_iter("redislock:*")]
    assert 5_000 < backend.pttl(key) <= 10_000  # lock_expiry, with room for a stalled test
    backend.close()


def test_bad_options_fail_at_registration(app: Celery) -> None:
    with pytest.raises(OptionError, match=r"option 'lock_expiry' must be a number of seconds > 0"):

        @app.task(base=Singleton, shared=False, name="proj.bad", lock_expiry=0)
        def bad() -> None: ...

        assert bad.name
    app.conf.singleton_backend_class = "myproj.backends.Memcached"
    with pytest.raises(OptionError, match=r"'myproj.backends.Memcached' is not supported"):

        @app.task(base=Singleton, shared=False, name="proj.other")
        def other() -> None: ...

        assert other.name


def test_clear_locks_removes_queued_locks_and_old_ones_never_a_running_one(app: Celery, worker: Any) -> None:
    started, gate = threading.Event(), threading.Event()

    @app.task(base=Singleton, shared=False)
    def running(n: int) -> str:
        started.set()
        assert gate.wait(10)
        return "ran"

    @app.task(base=Singleton, shared=False)
    def queued(n: int) -> None: ...

    backend = redis.Redis.from_url(app.conf.result_backend)
    backend.set("SINGLETONLOCK_0123", "some-old-task-id")  # celery-singleton's, never expiring
    result = running.delay(1)
    with worker(app, concurrency=1):
        assert started.wait(10)
        queued.delay(1)
        assert len(list(backend.scan_iter("redislock:*"))) == 2
        assert clear_locks(app) == 2  # the queued lock and the old one
        assert not backend.exists("SINGLETONLOCK_0123")
        [key] = list(backend.scan_iter("redislock:*"))
        assert backend.get(key).startswith(f"{result.id}@".encode())  # the running one stays
        assert running.delay(1) == result  # and still refuses duplicates
        gate.set()
        assert result.get(timeout=10) == "ran"
        assert poll(lambda: not backend.exists(key))
    backend.close()


@pytest.mark.parametrize("task_id", ["report@alice", "100%", "a%40b@c"])
def test_a_task_id_with_at_or_percent_is_the_one_a_duplicate_names(
    app: Celery, worker: Any, task_id: str
) -> None:
    started, gate = threading.Event(), threading.Event()

    @app.task(base=Singleton, shared=False)
    def report(n: int) -> str:
        started.set()
        assert gate.wait(10)
        return "ran"

    @app.task(base=Singleton, shared=False, raise_on_duplicate=True)
    def strict(n: int) -> None: ...

    queued = strict.apply_async(args=(1,), task_id=task_id + "-queued")
    with pytest.raises(DuplicateTaskError) as caught:
        strict.delay(1)
    assert caught.value.task_id == queued.id
    assert clear_locks(app) == 1  # its queued lock: no execution holds it
    first = report.apply_async(args=(1,), task_id=task_id)
    with worker(app, concurrency=1):
        assert started.wait(10)
        duplicate = report.delay(1)  # the running original's AsyncResult
        assert duplicate.id == task_id
        gate.set()
        assert duplicate.get(timeout=10) == "ran"
    assert first.get(timeout=10) == "ran"
