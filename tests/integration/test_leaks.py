"""What a lock leaves behind once its client is closed and dropped, against a real redis-server:
no server connection (every connection the engine talks on is its client's pool's, so
``close()`` reaches it), no client, no engine; nor a dropped Celery app's runtime and client.
A pool of one connection is enough for every call of a lock."""

from __future__ import annotations

import gc
import time
import uuid
import weakref
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import RedisLock, RedisSemaphore, SingletonTask
from celery_redislock.contrib.testing import RedisServer, poll
from celery_redislock.engine.redis_lock import lock_engine_for
from celery_redislock.engine.redis_semaphore import semaphore_engine_for
from celery_redislock.integration.runtime import runtime_for

CLIENTS = 20


def connections_named(admin: redis.Redis, name: str) -> int:
    """How many connections the server has open under the client name ``name``."""
    return sum(1 for client in admin.client_list() if client.get("name") == name)


def all_closed(admin: redis.Redis, name: str, deadline: float = 10.0) -> bool:
    """Whether the server has no connection named ``name`` left, once it has seen the closed
    ones go (it learns of a close when it next polls the socket)."""
    until = time.monotonic() + deadline
    while connections_named(admin, name):
        if time.monotonic() > until:
            return False
        time.sleep(0.01)
    return True


def freed(refs: list[weakref.ref[Any]], timeout: float = 10.0) -> bool:
    """Whether every object of ``refs`` is collected within ``timeout``: a thread of an earlier
    test (a renewal or a holds read in its pass) may hold one for a moment, never for seconds."""
    return poll(lambda: gc.collect() >= 0 and all(ref() is None for ref in refs), timeout)


def referrers(refs: list[weakref.ref[Any]]) -> list[str]:
    """What still refers to the first object left (a failure's clue): its referrers, in short."""
    left = next((ref() for ref in refs if ref() is not None), None)
    if left is None:
        return []
    return [f"{type(each).__name__}: {repr(each)[:160]}" for each in gc.get_referrers(left)][:12]


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_closed_client_leaves_no_connection_client_or_engine_behind(
    redislock_server: RedisServer, redislock_redis: redis.Redis, kind: str
) -> None:
    name = f"leak-{uuid.uuid4().hex[:8]}"
    clients: list[weakref.ref[redis.Redis]] = []
    engines: list[weakref.ref[Any]] = []
    for n in range(CLIENTS):
        client = redislock_server.client(client_name=name)
        held = (
            RedisLock(client, f"leak:{n}", timeout=10)
            if kind == "lock"
            else RedisSemaphore(client, f"leak:{n}", 2, timeout=10)
        )
        with held:
            assert held.locked() is (kind == "lock")
            assert held.owned()
        engine = lock_engine_for(client) if kind == "lock" else semaphore_engine_for(client)
        clients.append(weakref.ref(client))
        engines.append(weakref.ref(engine))
        client.close()
        # Closed: its every connection is gone from the server at once, before any collection.
        assert all_closed(redislock_redis, name)
        del client, held, engine

    assert freed(clients), referrers(clients)
    assert freed(engines), referrers(engines)


def test_a_pool_of_one_connection_serves_every_call_of_a_lock(redislock_server: RedisServer) -> None:
    client = redislock_server.client(max_connections=1)
    try:
        lock = RedisLock(client, "leak:one", timeout=10, renew=False)
        assert lock.acquire()
        assert lock.locked() and lock.owned()
        lock.extend(20)
        assert not RedisLock(client, "leak:one", blocking=False).acquire()
        lock.release()
        assert not lock.locked()
        semaphore = RedisSemaphore(client, "leak:sem", 1, timeout=10, renew=False)
        with semaphore:
            assert semaphore.locked() and semaphore.owned()
    finally:
        client.close()


def test_a_dropped_apps_runtime_and_its_client_are_freed(
    redislock_url: str, redislock_redis: redis.Redis
) -> None:
    name = f"leak-app-{uuid.uuid4().hex[:8]}"
    app = Celery("leaks", broker="memory://", set_as_current=False)
    app.conf.redislock_url = f"{redislock_url}?client_name={name}"

    @app.task(base=SingletonTask, shared=False)
    def task() -> None:
        pass

    runtime = runtime_for(app)
    engine = runtime.engine
    assert engine.acquire("leak:app", "me", 10_000).acquired
    assert engine.release("leak:app", "me")
    assert connections_named(redislock_redis, name) == 1
    refs = [weakref.ref(app), weakref.ref(runtime), weakref.ref(engine), weakref.ref(engine.client)]
    del app, task, runtime, engine

    assert freed(refs), referrers(refs)
    assert all_closed(redislock_redis, name)
