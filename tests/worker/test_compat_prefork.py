"""The drop-ins on real prefork workers: the peers' crash and retry faults fixed, and the switch
with the old library's tasks still queued (``redislock_compat_legacy_keys``), the old library
itself sending them."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock.compat import AlreadyQueued, QueueOnce, Singleton

from .conftest import WorkerProcess, lock_keys, open_gate, poll, wait_started, worker_module

TASKS = """
from celery_redislock.compat import QueueOnce, Singleton

app.conf.ONCE = {{"backend": "celery_once.backends.Redis", "settings": {{"url": {locks!r}}}}}
app.conf.redislock_compat_legacy_keys = True


@app.task(base=QueueOnce, bind=True, name="compat.once", lock_timeout=300)
def once(self, tag):
    return hold(self, tag)


@app.task(base=Singleton, bind=True, name="compat.single", lock_timeout=300)
def single(self, tag):
    return hold(self, tag)


@app.task(base=Singleton, bind=True, name="compat.retried")
def retried(self, tag):
    coord.rpush("ran:" + tag, self.request.retries)
    if self.request.retries == 0:
        raise self.retry(countdown=0.1)
    return "retried " + tag
"""


@pytest.fixture
def start(
    urls: dict[str, str], coord: redis.Redis, worker_process: Callable[..., WorkerProcess]
) -> Callable[[], WorkerProcess]:
    return lambda: worker_process(worker_module(urls, "compat", TASKS.format(locks=urls["locks"])), "-c", "2")


def senders(app: Celery, urls: dict[str, str]) -> dict[str, Any]:
    """The tasks as the sending side declares them (their apply_async takes the lock)."""
    app.conf.ONCE = {"backend": "celery_once.backends.Redis", "settings": {"url": urls["locks"]}}
    app.conf.redislock_compat_legacy_keys = True

    @app.task(base=QueueOnce, shared=False, name="compat.once")
    def once(tag: str) -> None: ...

    @app.task(base=Singleton, shared=False, name="compat.single")
    def single(tag: str) -> None: ...

    @app.task(base=Singleton, shared=False, name="compat.retried")
    def retried(tag: str) -> None: ...

    return {"once": once, "single": single, "retried": retried}


@pytest.mark.parametrize("kind", ["once", "single"])
def test_a_sigkilled_child_s_lock_is_freed_at_once(
    kind: str,
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    start: Callable[[], WorkerProcess],
) -> None:
    task = senders(make_app(), urls)[kind]
    proc = start()
    result = task.delay("k")
    [(pid, _)] = wait_started(coord, "k")
    [key] = lock_keys(locks)
    assert locks.get(key).startswith(f"{result.id}@".encode())  # taken over by the execution
    os.kill(pid, signal.SIGKILL)
    # celery-once kept it for default_timeout (an hour), celery-singleton for ever; the parent
    # frees it now (lock_timeout is 300 s here, so nothing else explains it going).
    assert poll(lambda: not locks.exists(key), 10), proc.log()
    again = task.delay("k")
    assert again.id != result.id
    open_gate(coord, "k")
    assert again.get(timeout=15) == "done k"


def test_a_retry_is_not_swallowed(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    start: Callable[[], WorkerProcess],
) -> None:
    task = senders(make_app(), urls)["retried"]
    start()
    result = task.delay("r")
    # celery-singleton's retry found its own lock held and sent nothing (celery-singleton #26).
    assert result.get(timeout=20) == "retried r"
    assert coord.lrange("ran:r", 0, -1) == [b"0", b"1"]
    assert lock_keys(locks) == []


def old_tasks(app: Celery, urls: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """The same tasks declared with the old libraries themselves: an old producer."""
    celery_once = pytest.importorskip("celery_once")
    celery_singleton = pytest.importorskip("celery_singleton")
    # Both cache their Redis client in a module global: another test's may point elsewhere.
    monkeypatch.setattr("celery_once.backends.redis.redis", None)
    monkeypatch.setattr("celery_singleton.backends._backend", None)
    app.conf.ONCE = {"backend": "celery_once.backends.Redis", "settings": {"url": urls["locks"]}}

    @app.task(base=celery_once.QueueOnce, shared=False, name="compat.once")
    def once(tag: str) -> None: ...

    @app.task(base=celery_singleton.Singleton, shared=False, name="compat.single")
    def single(tag: str) -> None: ...

    return once, single


def test_switching_with_old_tasks_still_queued(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    start: Callable[[], WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old_once, old_single = old_tasks(make_app(), urls, monkeypatch)
    new = senders(make_app(), urls)
    results = make_app().conf.result_backend
    backend = redis.Redis.from_url(results)  # where celery-singleton keeps its keys by default

    queued_once = old_once.delay("o")  # sent by the old library: its old-format keys
    queued_single = old_single.delay("s")
    assert locks.exists("qo_compat.once_tag-o")
    [old_single_key] = list(backend.scan_iter("SINGLETONLOCK_*"))

    # With the transition setting on, the new code sees the old keys: duplicates are refused.
    with pytest.raises(AlreadyQueued) as caught:
        new["once"].delay("o")
    assert 3590 < caught.value.countdown <= 3600 and caught.value.key == "qo_compat.once_tag-o"
    assert new["single"].delay("s") == queued_single  # the old one's AsyncResult
    assert lock_keys(locks) == []  # nothing sent, nothing locked

    start()  # the new worker runs the old messages and clears their old keys as the old did
    wait_started(coord, "o")
    wait_started(coord, "s")
    open_gate(coord, "o")
    open_gate(coord, "s")
    assert queued_once.get(timeout=15) == "done o"
    assert queued_single.get(timeout=15) == "done s"
    assert poll(lambda: not locks.exists("qo_compat.once_tag-o") and not backend.exists(old_single_key))
    assert new["once"].delay("o").id != queued_once.id  # free again
    backend.close()
