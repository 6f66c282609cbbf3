"""The lock's own Celery signals, declared by the glue that sends them: a duplicate refused
(``integration.outcomes``, ``integration.sending``, a mode ending a call as a duplicate), a
held lock lost or re-taken (the renewal's report, ``integration.request_lock``). Public, with a
mode's own, at ``celery_redislock.signals``, which documents their arguments.

Each is sent in the process where it happens. Celery's ``Signal.send`` catches and logs what a
receiver raises, so a failing receiver never breaks the task (or the renewal thread); with no
receiver connected, sending costs one attribute test, and the arguments are not even built
(``connected``).
"""

from __future__ import annotations

from typing import Any

from celery.utils.dispatch import Signal

__all__ = [
    "connected",
    "lock_lost",
    "lock_retaken",
    "send_duplicate",
    "send_lease_event",
    "task_duplicate",
]

task_duplicate = Signal(
    name="redislock.task_duplicate",
    providing_args=["task_id", "key", "holder", "strategy", "where"],
)

lock_lost = Signal(
    name="redislock.lock_lost",
    providing_args=["key", "holder", "new_holder", "task_id"],
)

lock_retaken = Signal(
    name="redislock.lock_retaken",
    providing_args=["key", "holder", "new_holder", "task_id"],
)


def connected(signal: Signal) -> bool:
    """Whether ``signal`` has a receiver: what ``Signal.send`` tests first, asked before the
    arguments are built."""
    return bool(signal.receivers)


def send_duplicate(task: Any, task_id: str, key: str, holder: str, strategy: str, where: str) -> None:
    """Send ``task_duplicate`` for a refused call of ``task``."""
    if connected(task_duplicate):
        task_duplicate.send(
            sender=task, task_id=task_id, key=key, holder=holder, strategy=strategy, where=where
        )


def send_lease_event(
    signal: Signal, task: Any, key: str, holder: str, new_holder: str | None, task_id: str | None
) -> None:
    """Send ``lock_lost`` or ``lock_retaken`` for the lease ``key``/``holder``."""
    if connected(signal):
        signal.send(sender=task, key=key, holder=holder, new_holder=new_holder, task_id=task_id)
