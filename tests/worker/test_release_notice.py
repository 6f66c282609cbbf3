"""A release PUBLISHes its notice only where an execution may be waiting for the key: a task
with ``on_duplicate="wait"`` in any layer of its configuration. Counted on a lock Redis of the
test's own (the broker and result backend PUBLISH too)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.contrib.testing import RedisServer, poll
from celery_redislock.engine.keys import release_channel
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.ops.stats import counters


def publishes(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_publish")
    return int(stats["calls"]) if stats else 0


def releases(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_del")  # the release script's DEL
    return int(stats["calls"]) if stats else 0


def run_three(make_app: Callable[..., Celery], worker: Callable[..., Any], url: str, **conf: Any) -> None:
    app = make_app(redislock_url=url, **conf)

    @app.task(base=SingletonTask, shared=False, name="notice.report")
    def report(n: int) -> int:
        return n

    with worker(app, pool="threads", concurrency=1):
        assert [report.delay(n).get(timeout=20) for n in range(3)] == [0, 1, 2]


def test_a_task_nobody_waits_for_releases_without_a_notice(
    make_app: Callable[..., Celery], worker: Callable[..., Any], lock_server: RedisServer
) -> None:
    run_three(make_app, worker, lock_server.url)
    with lock_server.client() as client:
        assert (releases(client), publishes(client)) == (3, 0)


def test_wait_in_any_queue_layer_makes_every_release_publish(
    make_app: Callable[..., Celery], worker: Callable[..., Any], lock_server: RedisServer
) -> None:
    # Consumed from the default queue (skip), but a call routed to "slow" would wait: the
    # holder from the default queue must tell it.
    run_three(make_app, worker, lock_server.url, redislock_queues={"slow": {"on_duplicate": "wait"}})
    with lock_server.client() as client:
        assert (releases(client), publishes(client)) == (3, 3)


def test_a_waiter_from_a_wait_queue_runs_after_a_holder_from_a_skip_queue(
    make_app: Callable[..., Celery], worker: Callable[..., Any], lock_server: RedisServer
) -> None:
    app = make_app(
        redislock_url=lock_server.url,
        redislock_queues={"slow": {"on_duplicate": "wait", "acquire_timeout": 30}},
    )
    started, gate = threading.Event(), threading.Event()

    @app.task(base=SingletonTask, shared=False, name="notice.rebuild", lock_key=[])
    def rebuild(tag: str) -> str:
        if tag == "first":
            started.set()
            assert gate.wait(20)
        return tag

    waited = counters.snapshot()["waited"]
    with worker(app, pool="threads", concurrency=2, queues=["celery", "slow"]):
        first = rebuild.delay("first")
        assert started.wait(20)
        waiter = rebuild.apply_async(("second",), queue="slow")
        # Open the gate only once the waiter listens for the release notice.
        channel = release_channel(
            runtime_for(app).plan(app.tasks[rebuild.name], None).key(rebuild, ("x",), {})
        )
        with lock_server.client() as client:
            assert poll(lambda: dict(client.pubsub_numsub(channel)).get(channel.encode(), 0) > 0, 20)
        gate.set()
        assert (first.get(timeout=20), waiter.get(timeout=40)) == ("first", "second")
    assert counters.snapshot()["waited"] == waited + 1  # it waited, and was told of the release
    with lock_server.client() as client:
        assert publishes(client) == 2
