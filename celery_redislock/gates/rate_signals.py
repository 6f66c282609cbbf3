"""The rate limit's Celery signals, declared and registered by the gate that sends them
(``rate_limit.GATE.signals``): a call postponed for its slot, limits paused by a task body.
Public at ``celery_redislock.signals``, which documents their arguments."""

from __future__ import annotations

from typing import Any

from celery.utils.dispatch import Signal

from ..integration.signals import connected

__all__ = ["SIGNALS", "send_rate_limited", "send_rate_paused", "task_rate_limited", "task_rate_paused"]

task_rate_limited = Signal(
    name="redislock.task_rate_limited",
    providing_args=["task_id", "key", "rate", "wait"],
)

task_rate_paused = Signal(
    name="redislock.task_rate_paused",
    providing_args=["task_id", "limits", "keys", "retry_after"],
)

#: What the gate registers: each signal by its public name.
SIGNALS = {"task_rate_limited": task_rate_limited, "task_rate_paused": task_rate_paused}


def send_rate_limited(task: Any, task_id: str, key: str, rate: str, wait: float) -> None:
    """Send ``task_rate_limited`` for a call of ``task`` re-queued for its slot."""
    if connected(task_rate_limited):
        task_rate_limited.send(sender=task, task_id=task_id, key=key, rate=rate, wait=wait)


def send_rate_paused(task: Any, task_id: str, limits: list[str], keys: list[str], retry_after: float) -> None:
    """Send ``task_rate_paused`` for a pause raised by a call of ``task``."""
    if connected(task_rate_paused):
        task_rate_paused.send(sender=task, task_id=task_id, limits=limits, keys=keys, retry_after=retry_after)
