"""The per-process renewal timer against a real redis-server."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine import Lease, LockEngine
from celery_redislock.engine.renewal import Renewer, get_renewer
from celery_redislock.ops.stats import counters

from .helpers import poll, script_calls


@pytest.fixture
def renewer() -> Iterator[Renewer]:
    renewer = Renewer()
    yield renewer
    renewer.stop()


@pytest.fixture
def engine(redislock_redis: redis.Redis) -> LockEngine:
    return LockEngine(redislock_redis)


def test_a_held_lock_outlives_its_ttl_while_renewed(
    renewer: Renewer, engine: LockEngine, redislock_redis: redis.Redis
) -> None:
    lease = Lease("lock:kept", "me", 300)
    assert engine.acquire(lease.key, lease.holder, lease.ttl_ms).acquired
    renewer.add(engine, lease, 0.1)
    evalsha = script_calls(redislock_redis)
    # Stay held for two TTLs: each check must find it, and renewals must have happened.
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:
        assert redislock_redis.get(lease.key) == b"me"
        time.sleep(0.05)
    assert script_calls(redislock_redis) - evalsha >= 2

    assert renewer.discard(engine, lease) is True
    assert poll(lambda: redislock_redis.exists(lease.key) == 0, timeout=2.0)  # expires once no longer renewed


def test_one_thread_renews_all_locks_in_one_round_trip_per_cycle(
    renewer: Renewer, engine: LockEngine, redislock_redis: redis.Redis
) -> None:
    for n in range(50):
        lease = Lease(f"lock:{n}", "me", 60_000)
        engine.acquire(lease.key, lease.holder, lease.ttl_ms)
        renewer.add(engine, lease, 30.0)  # the thread will not fire during the test
    before = script_calls(redislock_redis)
    report = renewer.renew_now()
    assert len(report.renewed) == 50
    assert script_calls(redislock_redis) - before == 1
    assert [t.name for t in threading.enumerate()].count("redislock-renewal") >= 1


def test_a_gone_lock_is_retaken_logged_and_counted(
    renewer: Renewer,
    engine: LockEngine,
    redislock_redis: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease = Lease("lock:gone", "me", 60_000)
    engine.acquire(lease.key, lease.holder, lease.ttl_ms)
    renewer.add(engine, lease, 30.0)
    redislock_redis.delete(lease.key)
    before = counters.snapshot()["retaken"]
    with caplog.at_level(logging.ERROR, logger="celery_redislock"):
        report = renewer.renew_now()
    assert report.retaken == [lease]
    assert redislock_redis.get(lease.key) == b"me"
    assert counters.snapshot()["retaken"] == before + 1
    assert any("lock:gone was gone" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


def test_a_stolen_lock_is_reported_counted_and_no_longer_renewed(
    renewer: Renewer,
    engine: LockEngine,
    redislock_redis: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease = Lease("lock:stolen", "me", 60_000)
    engine.acquire(lease.key, lease.holder, lease.ttl_ms)
    renewer.add(engine, lease, 30.0)
    redislock_redis.set(lease.key, "thief", px=60_000)
    before = counters.snapshot()["lost"]
    with caplog.at_level(logging.ERROR, logger="celery_redislock"):
        renewer.renew_now()
    assert counters.snapshot()["lost"] == before + 1
    assert any(
        r.levelno == logging.ERROR
        and r.getMessage() == "Lost lock lock:stolen held by me: it is now held by thief"
        for r in caplog.records
    )
    assert renewer.held() == []
    assert redislock_redis.get(lease.key) == b"thief"


def test_renewal_retakes_locks_after_a_redis_restart(
    redislock_server: RedisServer, renewer: Renewer, redislock_redis: redis.Redis
) -> None:
    client = redislock_server.client()
    engine = LockEngine(client)
    leases = [Lease(f"lock:restart:{n}", "me", 2_000) for n in range(3)]
    for lease in leases:
        engine.acquire(lease.key, lease.holder, lease.ttl_ms)
        renewer.add(engine, lease, 0.1)
    redislock_server.restart()
    # The timer itself brings them back: no call from the test.
    assert poll(lambda: all(redislock_redis.get(lease.key) == b"me" for lease in leases), timeout=5.0)
    client.close()


def test_renewal_survives_an_outage_and_counts_it(
    redislock_server: RedisServer, renewer: Renewer, redislock_redis: redis.Redis
) -> None:
    client = redislock_server.client(socket_connect_timeout=0.2, socket_timeout=0.2)
    engine = LockEngine(client)
    lease = Lease("lock:outage", "me", 60_000)
    engine.acquire(lease.key, lease.holder, lease.ttl_ms)
    renewer.add(engine, lease, 30.0)
    before = counters.snapshot()["redis_errors"]
    redislock_server.stop()
    report = renewer.renew_now()
    assert report.renewed == [] and report.retaken == []
    assert counters.snapshot()["redis_errors"] == before + 1
    redislock_server.start()
    assert renewer.renew_now().retaken == [lease]  # nothing persisted: taken back on the next cycle
    client.close()


def test_discard_before_release_means_no_cycle_brings_the_lock_back(
    renewer: Renewer, engine: LockEngine, redislock_redis: redis.Redis
) -> None:
    leases = [Lease(f"lock:race:{n}", "me", 5_000) for n in range(20)]
    for lease in leases:
        engine.acquire(lease.key, lease.holder, lease.ttl_ms)
        renewer.add(engine, lease, 0.001)  # renewing as fast as it can, racing the releases
    for lease in leases:
        renewer.discard(engine, lease)
        assert engine.release(lease.key, lease.holder)
    renewer.renew_now()
    assert redislock_redis.exists(*[lease.key for lease in leases]) == 0


def test_stop_ends_the_thread(engine: LockEngine) -> None:
    renewer = Renewer()
    renewer.add(engine, Lease("lock:s", "me", 10_000), 0.05)
    thread = renewer._thread
    assert thread is not None and thread.is_alive()
    renewer.stop()
    assert not thread.is_alive()
    assert get_renewer() is not renewer


def test_a_forked_child_gets_its_own_renewer(in_forked_child: Callable[[Callable[[], bool]], bool]) -> None:
    parent = get_renewer()
    assert in_forked_child(lambda: get_renewer() is not parent and get_renewer().pid == os.getpid())


def test_a_shorter_interval_wakes_a_thread_kept_waiting_on_a_longer_one(
    renewer: Renewer, engine: LockEngine, redislock_redis: redis.Redis
) -> None:
    # With nothing held the thread keeps waiting on the last interval (so a worker's next task
    # does not wake it); a lease that needs renewing sooner must still wake it.
    slow = Lease("lock:slow", "me", 60_000)
    renewer.add(engine, slow, 60.0)
    assert poll(lambda: renewer._waiting == 60.0)  # the thread is waiting on it
    assert renewer.discard(engine, slow) is True
    fast = Lease("lock:fast", "me", 300)
    assert engine.acquire(fast.key, fast.holder, fast.ttl_ms).acquired
    renewer.add(engine, fast, 0.1)
    deadline = time.monotonic() + 0.6  # two TTLs: gone unless renewed every 0.1 s
    while time.monotonic() < deadline:
        assert redislock_redis.get(fast.key) == b"me"
        time.sleep(0.05)
