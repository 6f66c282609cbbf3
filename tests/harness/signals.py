"""Watching the package's signals from a test: what a signal sent while a block ran, and the
rate-limit tests' run of four postponed calls through an in-process worker."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.utils.dispatch import Signal

from celery_redislock import SingletonTask
from celery_redislock.signals import task_rate_limited

__all__ = ["collect_requeued_results", "postponed_calls", "received"]


@contextmanager
def received(signal: Signal) -> Iterator[list[dict[str, Any]]]:
    """Each send of ``signal`` while the block runs: its sender's name (``sender``) and the
    arguments it was sent with."""
    sent: list[dict[str, Any]] = []

    def receiver(sender: Any, signal: Signal, **info: Any) -> None:
        sent.append({"sender": sender.name, **info})

    signal.connect(receiver, weak=False)
    try:
        yield sent
    finally:
        signal.disconnect(receiver)


def postponed_calls(
    app: Celery, worker: Callable[..., Any], name: str, **options: Any
) -> tuple[list[int], list[dict[str, Any]], list[Any]]:
    """Four calls of a ``SingletonTask`` ``name`` with ``options`` (a rate limit), each returning
    its argument, run by an in-process worker of two threads (``worker``, the worker tests'
    fixture): the arguments of each run, the ``task_rate_limited`` sends, and the calls' results
    (each checked)."""
    ran: list[int] = []

    @app.task(base=SingletonTask, shared=False, name=name, **options)
    def recorded(n: int) -> int:
        ran.append(n)
        return n

    with received(task_rate_limited) as postponed, worker(app, pool="threads", concurrency=2):
        results = [recorded.delay(n) for n in range(4)]
        assert sorted(result.get(timeout=20) for result in results) == [0, 1, 2, 3]
    return ran, postponed, results


def collect_requeued_results() -> None:
    """Free, while the test's app is open, the results of the calls its in-process worker
    re-queued (Celery subscribes to each; an AsyncResult collected after the app closed would
    try to unsubscribe for seconds, and fail where nobody can catch it)."""
    gc.collect()
