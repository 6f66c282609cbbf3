"""Prometheus counters from celery_redislock's signals: duplicates by task and strategy, locks lost.

Import this module where the events happen: in the worker (``-I prometheus_metrics``, or from
the module that defines the app) for duplicates skipped at execution and locks lost, and in the
process that sends tasks for duplicates refused at send (``lock_on="enqueue"``). A prefork
worker counts in its children: run it with ``PROMETHEUS_MULTIPROC_DIR`` set, as prometheus_client's
multiprocess mode asks, and expose them with ``start_http_server`` from ``worker_init``.

    pip install 'celery-redislock[prometheus]'
    python examples/prometheus_metrics.py [REDIS_URL]

Run as a script, it refuses a few duplicates at send (no worker needed) and prints the counters.
Without a URL it starts a throwaway redis-server (the ``test`` extra brings one).
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import Any

from celery import Celery
from prometheus_client import REGISTRY, Counter, generate_latest

from celery_redislock import SingletonTask
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.signals import lock_lost, lock_retaken, task_duplicate

DUPLICATES = Counter(
    "redislock_duplicates",
    "Calls refused because their lock was held",
    ["task", "strategy", "where"],
)
LOST = Counter("redislock_locks_lost", "Locks found held by someone else while their task ran", ["task"])
RETAKEN = Counter("redislock_locks_retaken", "Locks found gone while their task ran, taken back", ["task"])


def _task_name(sender: Any) -> str:
    # A RedisLock held outside a task is sent with no sender.
    return str(getattr(sender, "name", None) or "-")


@task_duplicate.connect(weak=False)
def count_duplicate(sender: Any = None, strategy: str = "", where: str = "", **_: Any) -> None:
    DUPLICATES.labels(task=_task_name(sender), strategy=strategy, where=where).inc()


@lock_lost.connect(weak=False)
def count_lost(sender: Any = None, **_: Any) -> None:
    LOST.labels(task=_task_name(sender)).inc()


@lock_retaken.connect(weak=False)
def count_retaken(sender: Any = None, **_: Any) -> None:
    RETAKEN.labels(task=_task_name(sender)).inc()


def main(url: str) -> None:
    app = Celery("metrics_example", broker=url, set_as_current=False)
    app.conf.update(redislock_url=url, broker_connection_retry_on_startup=False)

    @app.task(base=SingletonTask, shared=False, lock_on="enqueue", name="example.send_report")
    def send_report(day: str) -> None: ...

    for _ in range(3):  # the first is queued; the two others are refused at send
        send_report.delay("monday")
    app.close()
    for line in generate_latest(REGISTRY).decode().splitlines():
        if line.startswith("redislock_"):
            print(line)


if __name__ == "__main__":
    with ExitStack() as stack:
        main(sys.argv[1] if len(sys.argv) > 1 else stack.enter_context(RedisServer()).url)
