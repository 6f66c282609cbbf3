"""Every pool (prefork, threads, solo, gevent) and every topology (single Redis, Sentinel,
Cluster) on real worker subprocesses: a duplicate is skipped, the lock outlives its TTL while
renewed and is released at the end; a failover mid-task keeps the lock (or renewal takes it
back) and a duplicate sent after it is still skipped."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import DuplicateTaskError
from celery_redislock.contrib.testing import ClusterSet, SentinelSet
from celery_redislock.engine import LockEngine
from celery_redislock.integration.runtime import runtime_for

from .conftest import open_gate, poll, wait_started, worker_module

LOCK_TIMEOUT = 1.0
#: How long a held lock is watched: twice its TTL, so it lives only if renewed (the renewal's
#: schedule itself is tests/unit/test_renewal_logic.py's).
WATCHED = 2 * LOCK_TIMEOUT

# The worker side: `hold` (from the preamble) blocks the body until the test opens its gate.
TASKS = """
# A busy worker must not reserve the duplicate (solo runs one task at a time).
app.conf.worker_prefetch_multiplier = 1
app.conf.task_acks_late = True
app.conf.redislock_transport_options = {transport!r}


@app.task(base=SingletonTask, bind=True, name="scale.hold", lock_timeout={timeout!r})
def held(self, tag):
    return hold(self, tag)


@app.task(name="scale.renewal_in_this_os_thread")
def renewal_in_this_os_thread():
    # Under gevent the renewal "thread" is a greenlet of the hub's OS thread: it yields to the
    # hub on every socket wait instead of blocking it.
    import threading

    renewal = next(t for t in threading.enumerate() if t.name == "redislock-renewal")
    return renewal.native_id == threading.get_native_id()
"""


def start_workers(
    worker_process: Callable[..., Any],
    urls: dict[str, str],
    pool: str,
    transport: dict[str, Any] | None = None,
) -> None:
    source = worker_module(urls, "scale", TASKS.format(transport=transport, timeout=LOCK_TIMEOUT))
    # solo runs one task at a time: a second worker takes the duplicate.
    for index in range(2 if pool == "solo" else 1):
        concurrency = "1" if pool == "solo" else "2"
        worker_process(source, "-c", concurrency, "-n", f"w{index}@%h", pool=pool)


def the_lock(engine: LockEngine) -> tuple[str, str]:
    """The one held lock: (key, holder id)."""
    keys = poll(lambda: [k for k in engine.scan("redislock:*", 100) if b":released" not in bytes(k)])
    assert len(keys) == 1, keys
    info = engine.inspect(keys)[0]
    assert info.holder is not None
    return info.key, info.holder


def held_throughout(engine: LockEngine, key: str, holder: str, seconds: float) -> None:
    """The lock stays with ``holder`` for ``seconds`` (sampled; the TTL is shorter)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert engine.inspect([key])[0].holder == holder
        time.sleep(0.05)  # sampling a state over a period, not waiting for an event


def skip_hold_release(
    app: Celery, coord: redis.Redis, tag: str, after_start: Callable[[str, str], None]
) -> str:
    """The core behaviour for one execution of ``scale.hold(tag)``; ``after_start(key, holder)``
    runs while the body holds its lock. Returns the key."""
    engine = runtime_for(app).engine
    first = app.send_task("scale.hold", args=[tag])
    wait_started(coord, tag, timeout=30)
    key, holder = the_lock(engine)
    assert holder.startswith(f"{first.id}@")
    after_start(key, holder)
    duplicate = app.send_task("scale.hold", args=[tag])
    with pytest.raises(DuplicateTaskError) as info:
        duplicate.get(timeout=30)
    assert info.value.key == key
    assert info.value.holder.startswith(f"{first.id}@")
    open_gate(coord, tag)
    assert first.get(timeout=30) == f"done {tag}"
    assert poll(lambda: engine.inspect([key])[0].holder is None, timeout=10), "not released"
    return key


def renewed_past_ttl(app: Celery) -> Callable[[str, str], None]:
    engine = runtime_for(app).engine
    return lambda key, holder: held_throughout(engine, key, holder, WATCHED)


# -- pools ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["prefork", "threads", "solo", "gevent"])
def test_core_behaviour_on_every_pool(
    pool: str, make_app: Any, worker_process: Any, urls: dict[str, str], coord: redis.Redis
) -> None:
    start_workers(worker_process, urls, pool)
    app = make_app()

    def check(key: str, holder: str) -> None:
        held_throughout(runtime_for(app).engine, key, holder, WATCHED)
        if pool in ("threads", "gevent"):  # the probe runs in the process holding the lock
            same_os_thread = app.send_task("scale.renewal_in_this_os_thread").get(timeout=30)
            assert same_os_thread is (pool == "gevent")

    skip_hold_release(app, coord, f"pool-{pool}", check)


# -- Sentinel ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_sentinel_core_behaviour_and_a_failover_mid_task(
    sentinels: SentinelSet, make_app: Any, worker_process: Any, urls: dict[str, str], coord: redis.Redis
) -> None:
    lock_urls = {**urls, "locks": sentinels.url}
    start_workers(worker_process, lock_urls, "prefork", sentinels.transport_options)
    app = make_app(redislock_url=sentinels.url, redislock_transport_options=sentinels.transport_options)
    engine = runtime_for(app).engine

    skip_hold_release(app, coord, "sentinel", renewed_past_ttl(app))

    def fail_over(key: str, holder: str) -> None:
        _, new = sentinels.failover()
        with next(s for s in sentinels.servers if s.port == new).client() as master:
            # Replicated before the switch, or gone (the old master took writes until the
            # Sentinels converted it) and taken back by the holder's next renewal.
            assert poll(lambda: master.get(key) == holder.encode(), timeout=15)
        held_throughout(engine, key, holder, WATCHED)  # renewal reaches the new master

    skip_hold_release(app, coord, "sentinel-failover", fail_over)


# -- Cluster ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_cluster_core_behaviour_and_a_failover_mid_task(
    cluster: ClusterSet, make_app: Any, worker_process: Any, urls: dict[str, str], coord: redis.Redis
) -> None:
    start_workers(worker_process, {**urls, "locks": cluster.url}, "prefork")
    app = make_app(redislock_url=cluster.url)
    engine = runtime_for(app).engine

    skip_hold_release(app, coord, "cluster", renewed_past_ttl(app))

    def fail_over(key: str, holder: str) -> None:
        old = cluster.node_for(key)
        new = cluster.failover(old)
        assert cluster.node_for(key).port == new.port
        with new.client() as primary:
            assert poll(lambda: primary.get(key) == holder.encode(), timeout=10)
        held_throughout(engine, key, holder, WATCHED)  # renewal reaches the new primary

    skip_hold_release(app, coord, "cluster-failover", fail_over)
