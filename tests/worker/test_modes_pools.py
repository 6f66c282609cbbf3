"""Each dedup mode (docs/user-guide/modes.md) on the threads and solo pools with one Redis, and on
the threads pool with a Redis Cluster as the lock store: in-process workers, real servers. The
prefork pool runs every mode in the mode's own module (test_throttle.py, test_keep_latest.py,
test_debounce.py, test_lock_until.py); keep_latest also with two solo worker processes
(test_keep_latest.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.modes.keep_latest import latest_key

from .conftest import poll
from .mode_harness import key_for
from .mode_harness import skipped as duplicate

#: (pool, lock store): every mode on each pool with one Redis, and on a cluster, with the
#: default prefix and with one carrying a hash tag (a tenant kept on one shard).
SETTINGS = [("threads", "single"), ("solo", "single"), ("threads", "cluster"), ("threads", "cluster-tagged")]
THREADS = [s for s in SETTINGS if s[0] == "threads"]


def ids(settings: list[tuple[str, str]]) -> list[str]:
    return ["-".join(s) for s in settings]


@pytest.fixture(params=SETTINGS, ids=ids(SETTINGS))
def setting(
    request: pytest.FixtureRequest, make_app: Callable[..., Celery], redislock_url: str
) -> tuple[Celery, str]:
    """A test app whose lock store is the setting's, and the pool to run it on."""
    pool, store = request.param
    if store == "cluster":
        return make_app(redislock_url=request.getfixturevalue("cluster").url), pool
    if store == "cluster-tagged":
        url = request.getfixturevalue("cluster").url
        return make_app(redislock_url=url, redislock_key_prefix=TAGGED), pool
    return make_app(), pool


@contextmanager
def workers(
    worker: Callable[..., Any], app: Celery, pool: str, concurrency: int, gate: threading.Event | None = None
) -> Iterator[None]:
    """A worker of ``pool``: ``concurrency`` threads, or one solo process's single task at a time.
    ``gate`` (what a body waits on) is opened on the way out, so a failed test does not leave a
    body blocking the worker's shutdown."""
    with worker(app, pool=pool, concurrency=concurrency if pool == "threads" else 1):
        try:
            yield
        finally:
            if gate is not None:
                gate.set()


def lock_client(app: Celery) -> redis.Redis:
    """The app's own lock client: a RedisCluster on the cluster."""
    client: redis.Redis = runtime_for(app).engine.client
    return client


#: A prefix with a hash tag: every key of every lock, mode key included, in its one slot.
TAGGED = "{tenant1}"


def test_throttle_one_run_starts_per_window(setting: tuple[Celery, str], worker: Callable[..., Any]) -> None:
    app, pool = setting
    ran: list[int] = []

    @app.task(base=SingletonTask, shared=False, name="pools.throttle", throttle=30, lock_key=["n"])
    def ping(n: int, version: int) -> int:
        ran.append(version)
        return version

    with workers(worker, app, pool, concurrency=2):
        first = ping.delay(1, 0)
        assert first.get(timeout=15) == 0
        # Finished, yet its window of 30 s refuses the next calls of the key, naming it.
        for result in [ping.delay(1, v) for v in range(1, 5)]:
            assert duplicate(result).holder == f"{first.id}@throttled"
        assert ping.delay(2, 9).get(timeout=15) == 9  # another key
    assert ran == [0, 9]
    assert lock_client(app).get(key_for(app, ping, 1, 0)) == f"{first.id}@throttled".encode()


def test_keep_latest_runs_the_latest_call_after_the_running_one(
    setting: tuple[Celery, str], worker: Callable[..., Any]
) -> None:
    app, pool = setting
    gate = threading.Event()
    ran: list[int] = []

    @app.task(base=SingletonTask, shared=False, name="pools.latest", keep_latest=True, lock_key=["doc"])
    def render(doc: int, version: int) -> int:
        ran.append(version)
        if version == 0:
            assert gate.wait(30)
        return version

    latest = latest_key(key_for(app, render, 1, 0))
    with workers(worker, app, pool, concurrency=3, gate=gate):
        first = render.delay(1, 0)
        assert poll(lambda: ran == [0], 15)
        # Recorded as the latest when sent: on solo no process is free to take it meanwhile.
        replaced = render.delay(1, 1)
        assert lock_client(app).get(latest) == replaced.id.encode()
        last = render.delay(1, 2)
        assert lock_client(app).get(latest) == last.id.encode()
        gate.set()
        assert first.get(timeout=15) == 0
        assert duplicate(replaced).holder == f"{last.id}@latest"  # replaced, naming the latest
        assert last.get(timeout=15) == 2
    assert ran == [0, 2]


def test_debounce_runs_a_burst_once_with_the_last_call_s_arguments(
    setting: tuple[Celery, str], worker: Callable[..., Any]
) -> None:
    app, pool = setting
    ran: list[int] = []

    @app.task(base=SingletonTask, shared=False, name="pools.debounce", debounce=1, lock_key=["doc"])
    def index(doc: int, version: int) -> int:
        ran.append(version)
        return version

    with workers(worker, app, pool, concurrency=2):
        calls = [index.delay(1, v) for v in range(5)]
        assert calls[-1].get(timeout=15) == 4
        for call in calls[:-1]:
            assert duplicate(call).holder == f"{calls[-1].id}@debounced"
    assert ran == [4]


def test_lock_until_started_refuses_while_queued_and_accepts_once_started(
    setting: tuple[Celery, str], worker: Callable[..., Any]
) -> None:
    app, pool = setting
    gate = threading.Event()
    ran: list[str] = []

    @app.task(
        base=SingletonTask,
        shared=False,
        bind=True,
        name="pools.until",
        lock_on="enqueue",
        lock_until="started",
    )
    def refresh(self: Any, feed: int) -> int:
        ran.append(self.request.id)
        assert gate.wait(30)
        return feed

    first = refresh.delay(7)
    assert refresh.delay(7).id == first.id  # queued: refused, answered with the queued call
    # One thread: the second call stays queued while the first runs.
    with workers(worker, app, pool, concurrency=1, gate=gate):
        assert poll(lambda: ran == [first.id], 15)
        second = refresh.delay(7)  # the first started: one more may be queued
        assert second.id != first.id
        assert refresh.delay(7).id == second.id  # and it is unique while queued in turn
        gate.set()
        assert first.get(timeout=15) == 7
        assert second.get(timeout=15) == 7
    assert ran == [first.id, second.id]
    assert lock_client(app).get(key_for(app, refresh, 7)) is None
