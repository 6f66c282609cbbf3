"""How late a postponed call started (``redislock_start_lateness_seconds``), through a real prefork
worker: a debounced call and rate-limited calls put off for their slots, each measured once in the
child that starts it, summed by the main process, scraped over HTTP; each call's lateness checked
against the server's clock read by its body."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest
import redis
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.contrib.testing import WorkerProcess, poll
from celery_redislock.contrib.testing.servers import free_port

from .conftest import worker_module
from .test_metrics import scrape

pytest.importorskip("prometheus_client")

TASKS = """
import json

from celery_redislock.waits.due import DUE_HEADER

app.conf.redislock_metrics_port = {port}
lock_redis = redis.Redis.from_url(app.conf.redislock_url)


def started(task, tag):
    # The server's clock as the body starts, beside the due time its message carried.
    seconds, micros = lock_redis.time()
    due = vars(task.request).get(DUE_HEADER)
    coord.rpush("started:" + tag, json.dumps([due, seconds * 1000 + micros // 1000]))
    return tag


@app.task(base=SingletonTask, bind=True, name="late.debounced", debounce=0.5)
def debounced(self, key, n):
    return started(self, "debounced")


@app.task(base=SingletonTask, bind=True, name="late.rated", global_rate_limit="1/s")
def rated(self, n):
    return started(self, "rated")
"""

SERIES = 'redislock_start_lateness_seconds_{}{{kind="{}",task="late.{}"}}'


def measured(port: int, task: str, kind: str) -> tuple[float, float]:
    """The histogram's count and sum for ``task`` and ``kind`` (0s before any measure)."""
    samples = scrape(port)
    return samples.get(SERIES.format("count", kind, task), 0.0), samples.get(
        SERIES.format("sum", kind, task), 0.0
    )


def body_lateness(coord: redis.Redis, tag: str) -> list[float]:
    """Seconds after its due time each postponed call's body started, by the server's clock."""
    found = [json.loads(raw) for raw in coord.lrange(f"started:{tag}", 0, -1)]
    return [(now - due[1]) / 1000 for due, now in found if due is not None]


def _never_run(self: object, key: str, n: int) -> None:
    raise AssertionError("the worker runs it")


def test_postponed_calls_are_measured_late_by_kind_on_the_servers_clock(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    port = free_port()
    source = worker_module(urls, "lateness", TASKS.format(port=port))
    worker_process(source, "-c", "1", "-n", f"lateness-{uuid.uuid4().hex[:8]}@test")
    client = make_app()

    # A burst of one key (its arguments): the last call runs, half a second after it was sent.
    # Sent through the task (its mode records the burst, publishes with its delay and due time).
    sender = client.task(base=SingletonTask, bind=True, name="late.debounced", debounce=0.5, shared=False)(
        _never_run
    )
    burst = [sender.delay("k", 0) for _ in range(3)]
    assert burst[-1].get(timeout=30) == "debounced"
    assert poll(lambda: measured(port, "debounced", "debounce")[0] == 1, 15), scrape(port)
    _, total = measured(port, "debounced", "debounce")
    [late] = body_lateness(coord, "debounced")
    # Measured as its turn was decided, before its body: no later than the body saw, and not
    # much earlier (loose: a loaded machine).
    assert 0 <= total <= late + 0.05 and late - total < 2.0, (total, late)

    # One a second: the first starts now, the two others are put off for their slots.
    calls = [client.send_task("late.rated", args=[n]) for n in range(3)]
    assert [call.get(timeout=60) for call in calls] == ["rated"] * 3
    assert poll(lambda: measured(port, "rated", "rate_limit")[0] == 2, 15), scrape(port)
    _, total = measured(port, "rated", "rate_limit")
    lates = body_lateness(coord, "rated")
    assert len(lates) == 2, lates  # the first call was never postponed: nothing measured
    assert 0 <= total <= sum(lates) + 0.1 and sum(lates) - total < 4.0, (total, lates)
    # Neither kind counted the other's calls; the plain first call carried no due time.
    assert measured(port, "rated", "debounce") == (0.0, 0.0)
