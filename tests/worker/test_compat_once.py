"""``celery_redislock.compat.QueueOnce``: celery-once's README usage, unchanged but for the import,
through a real worker and a real redis-server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery, states

from celery_redislock import OptionError
from celery_redislock.compat import AlreadyQueued, QueueOnce

from .conftest import lock_keys, poll


@pytest.fixture
def once_app(make_app: Callable[..., Celery], urls: dict[str, str]) -> Celery:
    """celery-once's README configuration; no redislock_url: the locks go to ONCE's url."""
    app = make_app(redislock_url=None)
    app.conf.ONCE = {
        "backend": "celery_once.backends.Redis",
        "settings": {"url": urls["locks"], "default_timeout": 60 * 60},
    }
    return app


def test_readme_usage_a_second_delay_raises_already_queued(
    once_app: Celery, worker: Any, locks: redis.Redis
) -> None:
    gate = threading.Event()

    @once_app.task(base=QueueOnce, shared=False)
    def slow_task() -> str:
        assert gate.wait(10)
        return "Done!"

    first = slow_task.delay()
    with pytest.raises(AlreadyQueued) as caught:
        slow_task.delay()
    assert 3590 < caught.value.countdown <= 3600  # the lock's TTL left: default_timeout
    assert caught.value.message == f"Expires in {caught.value.countdown} seconds"
    assert caught.value.task_id == first.id
    [key] = lock_keys(locks)  # in the Redis ONCE names
    with worker(once_app):
        assert poll(lambda: locks.get(key) != f"{first.id}@queued".encode())  # taken over
        with pytest.raises(AlreadyQueued):  # running: still refused
            slow_task.apply_async()
        gate.set()
        assert first.get(timeout=10) == "Done!"
        assert lock_keys(locks) == []  # released when it finished
        again = slow_task.delay()  # so it can be sent again
        assert again.get(timeout=10) == "Done!"


def test_graceful_on_the_task_and_per_call(once_app: Celery, locks: redis.Redis) -> None:
    @once_app.task(base=QueueOnce, shared=False, once={"graceful": True})
    def graceful(n: int) -> int:
        return n

    @once_app.task(base=QueueOnce, shared=False)
    def strict(n: int) -> int:
        return n

    graceful.delay(10)
    refused = graceful.delay(10)  # what celery-once returns: no task id, REJECTED
    assert refused.id is None and refused.state == states.REJECTED and refused.result is None
    strict.apply_async(args=(10,))
    refused = strict.apply_async(args=(10,), once={"graceful": True})
    assert refused.state == states.REJECTED
    with pytest.raises(AlreadyQueued):
        strict.apply_async(args=(10,))
    with pytest.raises(OptionError, match=r"once.*unknown key\(s\) \['keys'\]"):
        strict.apply_async(args=(11,), once={"keys": []})  # celery-once ignored it silently


def test_keys_a_subset_and_none(once_app: Celery) -> None:
    @once_app.task(base=QueueOnce, shared=False, once={"keys": ["a"]})
    def slow_add(a: int, b: int) -> int:
        return a + b

    @once_app.task(base=QueueOnce, shared=False, once={"keys": []})
    def only_one(a: int, b: int) -> int:
        return a + b

    slow_add.delay(1, 1)
    with pytest.raises(AlreadyQueued):
        slow_add.delay(1, 2)  # a=1 is queued
    slow_add.delay(2, 2)
    only_one.delay(1, 1)
    with pytest.raises(AlreadyQueued):
        only_one.delay(2, 2)  # one at a time, whatever the arguments


def test_str_does_not_collide_1_and_one(once_app: Celery) -> None:
    @once_app.task(base=QueueOnce, shared=False)
    def tag(value: Any) -> Any:
        return value

    tag.delay(1)
    tag.delay("1")  # celery-once locked both under qo_..._value-1
    with pytest.raises(AlreadyQueued):
        tag.delay(1)


def test_timeout_on_the_task_and_per_call(once_app: Celery, locks: redis.Redis) -> None:
    @once_app.task(base=QueueOnce, shared=False, once={"timeout": 60 * 60 * 10})
    def long_running_task() -> None: ...

    @once_app.task(base=QueueOnce, shared=False)
    def per_call(n: int) -> None: ...

    long_running_task.delay()
    [key] = lock_keys(locks)
    assert 35_990_000 < locks.pttl(key) <= 36_000_000
    locks.delete(key)
    per_call.apply_async(args=(1,), once={"timeout": 20})
    [key] = lock_keys(locks)
    assert 15_000 < locks.pttl(key) <= 20_000


def test_unlock_before_run_accepts_one_more_while_it_runs(
    once_app: Celery, worker: Any, locks: redis.Redis
) -> None:
    gate = threading.Event()
    started = threading.Event()

    @once_app.task(base=QueueOnce, shared=False, once={"unlock_before_run": True})
    def slow_task() -> str:
        started.set()
        assert gate.wait(10)
        return "Done!"

    first = slow_task.delay()
    with pytest.raises(AlreadyQueued):
        slow_task.delay()
    with worker(once_app, concurrency=1):
        assert started.wait(10)
        assert lock_keys(locks) == []  # removed just before the body ran
        second = slow_task.delay()
        with pytest.raises(AlreadyQueued):
            slow_task.delay()  # and that one is queued once in turn
        gate.set()
        assert first.get(timeout=10) == "Done!"
        assert second.get(timeout=10) == "Done!"


def test_blocking_waits_for_the_holder(
    make_app: Callable[..., Celery], worker: Any, urls: dict[str, str]
) -> None:
    app = make_app()
    app.conf.ONCE = {
        "backend": "celery_once.backends.Redis",
        "settings": {"url": urls["locks"], "blocking": True, "blocking_timeout": 30},
    }
    gate = threading.Event()

    @app.task(base=QueueOnce, shared=False)
    def slow_task() -> str:
        assert gate.wait(10)
        return "Done!"

    first = slow_task.delay()
    with worker(app, concurrency=1):
        threading.Timer(0.5, gate.set).start()
        second = slow_task.delay()  # blocks until the first released its lock
        assert first.ready() and second.id != first.id
        assert second.get(timeout=10) == "Done!"


@pytest.mark.parametrize(
    ("once", "match"),
    [
        ({"keys": ["c"]}, r"lock_key.*names unknown argument 'c'"),
        ({"graceful": "yes"}, r"once\['graceful'\]\" must be True or False"),
        ({"timeout": -1}, r"once\['timeout'\]\" must be a number of seconds > 0"),
        ({"unlock_befor_run": True}, r"unknown key\(s\) \['unlock_befor_run'\]"),
    ],
)
def test_bad_once_options_fail_at_registration(once_app: Celery, once: dict[str, Any], match: str) -> None:
    with pytest.raises(OptionError, match=match):

        @once_app.task(base=QueueOnce, shared=False, name="proj.bad", once=once)
        def bad(a: int) -> None: ...

        assert bad.name


def test_another_backend_is_an_error(make_app: Callable[..., Celery]) -> None:
    app = make_app()
    app.conf.ONCE = {"backend": "celery_once.backends.File", "settings": {"location": "/tmp/once"}}
    with pytest.raises(OptionError, match=r"backend 'celery_once.backends.File' is not supported"):

        @app.task(base=QueueOnce, shared=False)
        def task() -> None: ...

        assert task.name


@pytest.mark.parametrize("task_id", ["mail@example.com", "100%", "a%40b"])
def test_a_task_id_with_at_or_percent_keeps_its_per_call_timeout_and_is_named(
    once_app: Celery, locks: redis.Redis, task_id: str
) -> None:
    # The queued lock's holder id escapes the task id: the per-call timeout must find it so.
    @once_app.task(base=QueueOnce, shared=False)
    def mail(n: int) -> None: ...

    first = mail.apply_async(args=(1,), task_id=task_id, once={"timeout": 5})
    assert first.id == task_id
    [key] = lock_keys(locks)
    assert 0 < locks.pttl(key) <= 5_000  # not default_timeout's hour
    with pytest.raises(AlreadyQueued) as caught:
        mail.delay(1)
    assert caught.value.task_id == task_id
    assert caught.value.holder_task_id == task_id
