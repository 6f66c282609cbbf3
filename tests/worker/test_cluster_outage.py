"""A Redis Cluster that goes away under a running app: redis-py's cluster client then raises
``RedisClusterException`` ("Redis Cluster cannot be connected"), which is not a
``redis.RedisError``; it must meet ``on_redis_error`` as any other Redis failure does, at the
worker and at send (``lock_on="enqueue"``). A cluster of its own: the session's stays up."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import Celery

from celery_redislock import LockUnavailableError, SingletonTask
from celery_redislock.contrib.testing import ClusterSet
from celery_redislock.integration.runtime import runtime_for


@pytest.fixture
def cluster_app(make_app: Callable[..., Celery]) -> Iterator[tuple[Celery, Callable[[Celery], None]]]:
    cluster = ClusterSet(primaries=1, replicas=0).start()
    try:
        app = make_app(redislock_url=cluster.url, redislock_key_prefix="{tenant1}")

        def take_away() -> None:
            runtime_for(app).engine.client.ping()  # the client is made, its slot map read
            for node in cluster.nodes:
                node.stop()

        yield app, take_away
    finally:
        cluster.close()


@pytest.mark.parametrize("policy", ["fail", "run"])
def test_an_unreachable_cluster_at_the_worker_follows_on_redis_error(
    cluster_app: tuple[Celery, Callable[[], None]], worker: Callable[..., Any], policy: str
) -> None:
    app, take_away = cluster_app

    @app.task(base=SingletonTask, shared=False, name="outage.work", on_redis_error=policy)
    def work(n: int) -> int:
        return n

    take_away()
    with worker(app, pool="threads", concurrency=1):
        outcome = work.delay(7).get(timeout=30, propagate=False)
    if policy == "run":
        assert outcome == 7  # run unlocked, as the policy says
    else:
        assert isinstance(outcome, LockUnavailableError), outcome
        assert "RedisClusterException" in str(outcome)


def test_an_unreachable_cluster_at_send_follows_on_redis_error(
    cluster_app: tuple[Celery, Callable[[], None]],
) -> None:
    app, take_away = cluster_app

    @app.task(base=SingletonTask, shared=False, name="outage.send", lock_on="enqueue", on_redis_error="fail")
    def send(n: int) -> int:
        return n

    take_away()
    with pytest.raises(LockUnavailableError, match="RedisClusterException"):
        send.delay(1)
