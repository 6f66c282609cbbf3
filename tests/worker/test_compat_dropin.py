"""What real celery-once and celery-singleton code does beyond the READMEs, on the compat bases:
both spellings of celery-once's Redis backend, sends past the base, and the peers' by-hand lock
methods, through a real worker and a real redis-server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import OptionError
from celery_redislock.compat import AlreadyQueued, DuplicateTaskError, QueueOnce, Singleton

from .conftest import lock_keys, poll


def once_conf(url: str, backend: str = "celery_once.backends.Redis", **settings: Any) -> dict[str, Any]:
    return {"backend": backend, "settings": {"url": url, "default_timeout": 3600, **settings}}


@pytest.mark.parametrize("backend", ["celery_once.backends.Redis", "celery_once.backends.redis.Redis"])
def test_both_paths_of_the_redis_backend_are_accepted(
    make_app: Callable[..., Celery], urls: dict[str, str], locks: redis.Redis, backend: str
) -> None:
    app = make_app(redislock_url=None, ONCE=once_conf(urls["locks"], backend))

    @app.task(base=QueueOnce, shared=False)
    def job(n: int) -> int:
        return n

    job.delay(1)
    assert len(lock_keys(locks)) == 1  # in the Redis ONCE names
    with pytest.raises(AlreadyQueued):
        job.delay(1)


def test_another_backend_is_refused_naming_the_supported_one(
    make_app: Callable[..., Celery], urls: dict[str, str]
) -> None:
    app = make_app(ONCE=once_conf(urls["locks"], "celery_once.backends.File"))
    with pytest.raises(OptionError, match=r"'celery_once\.backends\.File' is not supported.*Redis"):

        @app.task(base=QueueOnce, shared=False)
        def job() -> None: ...

        assert job.name  # a shared=False task is bound (and checked) when first used


def test_unknown_settings_keys_are_warned_about_by_name_not_refused(
    make_app: Callable[..., Celery], urls: dict[str, str]
) -> None:
    # celery-once's own test configuration has "timeout" in its settings: it ignored it.
    app = make_app(ONCE=once_conf(urls["locks"], timeout=1800, colour="blue"))

    @app.task(base=QueueOnce, shared=False)
    def job(n: int) -> int:
        return n

    with pytest.warns(UserWarning, match=r"\['colour', 'timeout'\].*ignores"):
        job.delay(1)  # works
    with pytest.raises(AlreadyQueued):
        job.delay(1)


def test_an_unknown_task_option_is_still_an_error(make_app: Callable[..., Celery]) -> None:
    app = make_app()
    with pytest.raises(OptionError, match=r"once.*unknown key\(s\) \['timout'\]"):

        @app.task(base=QueueOnce, shared=False, once={"timout": 60})
        def job() -> None: ...

        assert job.name


# -- a send past the base ---------------------------------------------------------------------


class NautobotLikeTask(QueueOnce):
    """Real code's pattern: some calls go past QueueOnce, unlocked, as celery-once sent them."""

    abstract = True

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        if options.pop("unlocked", False):
            return super(QueueOnce, self).apply_async(args, kwargs, **options)
        return super().apply_async(args, kwargs, **options)


class PastSingleton(Singleton):
    abstract = True

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        if options.pop("unlocked", False):
            return super(Singleton, self).apply_async(args, kwargs, **options)
        return super().apply_async(args, kwargs, **options)


@pytest.mark.parametrize("base", [NautobotLikeTask, PastSingleton])
def test_a_send_past_the_base_publishes_unlocked_and_its_worker_runs_it(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis, base: type
) -> None:
    app = make_app()

    @app.task(base=base, shared=False)
    def job(n: int) -> int:
        return n * 2

    first = job.apply_async((1,))  # through the base: locked
    [key] = lock_keys(locks)
    second = job.apply_async((1,), unlocked=True)  # past it: sent, no exception, no lock taken
    third = job.apply_async((1,), unlocked=True)
    assert len({first.id, second.id, third.id}) == 3
    assert locks.get(key) == f"{first.id}@queued".encode()
    with worker(app, concurrency=1):  # one at a time: each runs under the lock at execution
        assert [r.get(timeout=10) for r in (first, second, third)] == [2, 2, 2]
        assert poll(lambda: lock_keys(locks) == [])


def test_no_private_exception_type_reaches_a_compat_caller() -> None:
    """Every exception class the compat bases define is public (in ``compat.__all__``), and
    their code raises nothing under a private name (a refused send travels as a value)."""
    import importlib
    import inspect
    import pkgutil
    from pathlib import Path

    from celery_redislock import compat

    public = {getattr(compat, name) for name in compat.__all__}
    found = []
    for info in pkgutil.walk_packages(compat.__path__, "celery_redislock.compat."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == info.name and issubclass(obj, BaseException):
                found.append(obj)
                assert obj in public, f"{obj.__module__}.{obj.__qualname__} is not in compat.__all__"
        source = Path(str(module.__file__)).read_text()
        assert "raise _" not in source and "except _" not in source, info.name
    assert set(found) == {AlreadyQueued, DuplicateTaskError}


# -- celery-once's by-hand methods ------------------------------------------------------------


def test_raise_or_lock_by_hand_refuses_sends_until_clear_lock(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=QueueOnce, shared=False)
    def job(n: int, m: int = 0) -> int:
        return n + m

    key = job.get_key(kwargs={"n": 1, "m": 2})
    assert key == job.get_key(args=(1, 2))  # by name or by position: one call
    assert key != job.get_key(args=(1, 3))
    job.once_backend.raise_or_lock(key, timeout=60)  # e.g. from a web view
    assert 50_000 < locks.pttl(key) <= 60_000
    with pytest.raises(AlreadyQueued) as caught:
        job.delay(1, m=2)  # an identical send is refused by the lock taken by hand
    assert 59 < caught.value.countdown <= 60
    with pytest.raises(AlreadyQueued):
        job.once_backend.raise_or_lock(key, timeout=60)
    assert job.once_backend.clear_lock(key) == 1
    assert job.once_backend.clear_lock(key) == 0
    with worker(app):
        assert job.delay(1, m=2).get(timeout=10) == 3
        assert poll(lambda: lock_keys(locks) == [])


def test_raise_or_lock_waits_with_blocking_as_celery_once(
    make_app: Callable[..., Celery], urls: dict[str, str], locks: redis.Redis
) -> None:
    app = make_app(redislock_url=None, ONCE=once_conf(urls["locks"], blocking=True, blocking_timeout=10))

    @app.task(base=QueueOnce, shared=False)
    def job(n: int) -> int:
        return n

    key = job.get_key(args=(1,))
    job.once_backend.raise_or_lock(key, timeout=0.5)  # expires while the next call waits
    job.once_backend.raise_or_lock(key, timeout=60)  # waits for it, then takes it
    assert locks.pttl(key) > 50_000
    app.conf.ONCE = once_conf(urls["locks"], blocking=True, blocking_timeout=0.2)
    with pytest.raises(AlreadyQueued):  # held for a minute: the wait ends first
        job.once_backend.raise_or_lock(key, timeout=60)


def test_clear_lock_of_a_lock_this_process_did_not_take_deletes_it_as_celery_once(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=QueueOnce, shared=False)
    def job(n: int) -> int:
        return n

    queued = job.delay(5)  # queued, no worker: its lock is held by the queued message
    key = job.get_key(args=(5,))
    assert locks.get(key) == f"{queued.id}@queued".encode()
    assert job.once_backend.clear_lock(key) == 1
    assert job.delay(5).id != queued.id  # sendable again


def no_lost_lock(caplog: pytest.LogCaptureFixture) -> bool:
    """No "no longer held at release" error: the run knew its lock was released early."""
    return not [r for r in caplog.records if "no longer held" in r.getMessage()]


def test_clear_lock_within_the_run_frees_the_key_through_its_own_release(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    gate, cleared = threading.Event(), threading.Event()

    @app.task(base=QueueOnce, shared=False, bind=True)
    def job(self: Any, n: int) -> int:
        assert self.once_backend.clear_lock(self.get_key(args=(n,))) == 1
        cleared.set()
        assert gate.wait(10)
        return n

    with worker(app):
        first = job.delay(1)
        assert cleared.wait(10)
        assert lock_keys(locks) == []
        second = job.delay(1)  # sendable while the first still runs, as after celery-once's clear
        gate.set()
        assert (first.get(timeout=10), second.get(timeout=10)) == (1, 1)
        assert poll(lambda: lock_keys(locks) == [])
    assert no_lost_lock(caplog)


# -- celery-singleton's by-hand methods -------------------------------------------------------


def test_singleton_backend_lock_get_and_a_send_that_takes_it_over(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=PastSingleton, shared=False)
    def job(*args: Any) -> list[Any]:
        return list(args)

    lock = job.generate_lock(job.name, task_args=[1, 2])
    assert lock == job.generate_lock(job.name, [1, 2]) != job.generate_lock(job.name, [1, 3])
    backend = job.singleton_backend
    assert backend.get(lock) is None
    assert backend.lock(lock, "mine", expiry=60) is True
    assert backend.lock(lock, "other") is False
    assert backend.get(lock) == "mine" == job.get_existing_task_id(lock)
    assert job.delay(1, 2).id == "mine"  # a duplicate of the lock's task id
    # celery-singleton's own send: lock by hand, then publish past the base with that id.
    sent = job.apply_async(args=[1, 2], task_id="mine", unlocked=True)
    with worker(app):
        assert sent.get(timeout=10) == [1, 2]
        assert poll(lambda: backend.get(lock) is None)  # taken over and released by its run


def test_release_lock_unlock_and_clear(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=Singleton, shared=False)
    def job(a: int, b: int = 0) -> int:
        return a + b

    first = job.delay(1, b=2)
    assert job.delay(1, b=2) == first
    job.release_lock(task_args=[1], task_kwargs={"b": 2})  # outside its run: deleted, as there
    second = job.delay(1, b=2)
    assert second != first
    job.unlock(job.generate_lock(job.name, [1], {"b": 2}))
    third = job.delay(1, b=2)
    assert third not in (first, second)
    with worker(app, concurrency=1):  # all three were sent, and run
        assert [r.get(timeout=10) for r in (first, second, third)] == [3, 3, 3]
        assert poll(lambda: lock_keys(locks) == [])
    job.delay(7)
    locks.set("unrelated", "x")
    prefix = job.generate_lock(job.name, [7]).rsplit(":", 1)[0]
    job.singleton_backend.clear(prefix)  # every key of that prefix, as celery-singleton's clear
    assert lock_keys(locks) == []
    assert locks.get("unrelated") == b"x"
    # celery-singleton hashed whatever name it was given: the key of these arguments under it.
    other = job.generate_lock("no.such.task", [1])
    assert other.split(":")[-2] == "no.such.task" and other != job.generate_lock(job.name, [1])


def test_release_lock_within_the_run(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    gate, released = threading.Event(), threading.Event()

    @app.task(base=Singleton, shared=False, bind=True)
    def job(self: Any, n: int) -> int:
        self.release_lock(task_args=[n])
        released.set()
        assert gate.wait(10)
        return n

    with worker(app):
        first = job.delay(3)
        assert released.wait(10)
        assert lock_keys(locks) == []
        second = job.delay(3)
        assert second != first  # sent anew, as after celery-singleton's release_lock
        gate.set()
        assert (first.get(timeout=10), second.get(timeout=10)) == (3, 3)
        assert poll(lambda: lock_keys(locks) == [])
    assert no_lost_lock(caplog)
