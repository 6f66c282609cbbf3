"""Every wait the package makes, on RabbitMQ quorum queues with a topic exchange and publisher
confirms: Celery (5.5 and later) then sends each countdown through RabbitMQ's native delayed
delivery, where kombu cuts it to whole seconds and refuses one under a second. A postponed,
retried or debounced call must neither be lost nor refused there (``waits.broker_delay``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from celery import Celery

from celery_redislock.contrib.testing import WorkerProcess, poll

from .conftest import QUORUM, open_gate, wait_started
from .mode_harness import ModeTask, node
from .test_rate_limit import starts

pytest.importorskip("celery.utils.quorum_queues", reason="native delayed delivery came with Celery 5.5")


RECORD = """
import time
coord.rpush("starts:" + account, f"{time.time()!r} {n} {self.request.retries} {self.request.id}")
return n
"""


@pytest.fixture
def quorum(
    urls: dict[str, str],
    rabbitmq_url: str,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> Callable[..., tuple[Celery, WorkerProcess]]:
    """``start(task, *worker args)``: a worker of ``task`` and the caller's app, both on a vhost of
    the session's RabbitMQ with quorum queues (locks and results on Redis)."""

    def start(task: ModeTask, *args: str) -> tuple[Celery, WorkerProcess]:
        proc = task.start(
            worker_process, {**urls, "broker": rabbitmq_url}, *args, module=f"app.conf.update({QUORUM!r})\n"
        )
        return make_app(broker_url=rabbitmq_url, **QUORUM), proc

    return start


def test_rate_limited_calls_postponed_by_less_than_a_second_all_run_once(
    quorum: Callable[..., tuple[Celery, WorkerProcess]], coord: redis.Redis
) -> None:
    # The reproducer: 12 calls at 4/s, the later ones postponed by fractions of a second.
    task = ModeTask(
        "quorum.rate", "account, n", RECORD, {"global_rate_limit": "4/s", "rate_limit_key": ["account"]}
    )
    app, proc = quorum(task, "-c", "2", "-n", node("quorum-rate"))
    sender = task.sender(app)
    results = [sender.delay("acme", n) for n in range(12)]
    assert poll(lambda: all(result.ready() for result in results), 60, interval=0.2), proc.log()
    assert sorted(result.get(timeout=1) for result in results) == list(range(12)), proc.log()
    assert sorted(n for _, n, _, _ in starts(coord, "acme")) == list(range(12))
    assert "countdown must be a positive number" not in proc.log()


def test_a_duplicate_retried_in_less_than_a_second_runs_once_its_key_is_free(
    quorum: Callable[..., tuple[Celery, WorkerProcess]], coord: redis.Redis
) -> None:
    body = 'coord.rpush("ran:" + tag, self.request.id)\nif tag == "first":\n    return hold(self, "first")\nreturn tag'
    task = ModeTask(
        "quorum.retry",
        "tag",
        body,
        {"lock_key": [], "on_duplicate": "retry", "retry_countdown": 0.3, "max_retries": 100},
    )
    app, proc = quorum(task, "-c", "2", "-n", node("quorum-retry"))
    sender = task.sender(app)
    first = sender.delay("first")
    wait_started(coord, "first")
    later = [sender.delay(f"later{n}") for n in range(2)]
    assert poll(lambda: proc.log().count("Retrying duplicate quorum.retry") >= 2, 20), proc.log()
    open_gate(coord, "first")
    assert first.get(timeout=20) == "done first"
    assert [result.get(timeout=30) for result in later] == ["later0", "later1"], proc.log()
    assert [coord.llen(f"ran:later{n}") for n in range(2)] == [1, 1]


def test_a_call_put_off_again_through_the_same_delay_queues_comes_back_each_time(
    quorum: Callable[..., tuple[Celery, WorkerProcess]], coord: redis.Redis
) -> None:
    # Three seconds go through two delay queues (2 s, then 1 s). RabbitMQ drops a message that
    # expires towards a queue its x-death header names (a cycle; dead-lettered at least once, it
    # holds it for ever): a copy that carried its previous trip's x-death never came back.
    body = 'coord.rpush("ran:" + tag, self.request.id)\nif tag == "first":\n    return hold(self, "first")\nreturn tag'
    task = ModeTask(
        "quorum.hops",
        "tag",
        body,
        {"lock_key": [], "on_duplicate": "retry", "retry_countdown": 3, "max_retries": 100},
    )
    app, proc = quorum(task, "-c", "2", "-n", node("quorum-hops"))
    sender = task.sender(app)
    first = sender.delay("first")
    wait_started(coord, "first")
    later = sender.delay("later")
    assert poll(lambda: proc.log().count("Retrying duplicate quorum.hops") >= 3, 40), proc.log()
    open_gate(coord, "first")
    assert first.get(timeout=20) == "done first"
    assert later.get(timeout=30) == "later", proc.log()
    assert coord.llen("ran:later") == 1


def test_a_debounce_of_half_a_second_is_sent_and_runs_its_bursts_last_call(
    quorum: Callable[..., tuple[Celery, WorkerProcess]], coord: redis.Redis
) -> None:
    task = ModeTask(
        "quorum.debounce",
        "account, n",
        RECORD,
        {"lock_key": ["account"], "debounce": 0.5, "skip_result": "success"},
    )
    app, proc = quorum(task, "-c", "2", "-n", node("quorum-debounce"))
    sender = task.sender(app)
    results = [sender.delay("acme", n) for n in range(3)]  # refused at send before: ValueError
    assert results[-1].get(timeout=30) == 2, proc.log()
    assert poll(lambda: all(result.ready() for result in results), 30), proc.log()
    assert [n for _, n, _, _ in starts(coord, "acme")] == [2]
