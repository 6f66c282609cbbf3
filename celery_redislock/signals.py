"""The package's own Celery signals: a duplicate refused, a held lock lost or re-taken, a call
postponed by its rate limit, a rate limit paused by a task body.

Public as ``celery_redislock.signals.task_duplicate`` (and ``lock_lost``, ``lock_retaken``);
defined here, apart from the worker lifecycle handlers, so the modules that send them
(``integration.outcomes``, ``integration.sending``, the renewal hook) need not import those. Each is sent in the process
where it happens. Celery's ``Signal.send`` catches and logs what a receiver raises, so a failing
receiver never breaks the task (or the renewal thread); with no receiver connected, sending
costs one attribute test, and the arguments are not even built (``_connected``).
"""

from __future__ import annotations

from typing import Any

from celery.utils.dispatch import Signal

__all__ = [
    "lock_lost",
    "lock_retaken",
    "send_duplicate",
    "send_lease_event",
    "send_rate_limited",
    "send_rate_paused",
    "task_duplicate",
    "task_rate_limited",
    "task_rate_paused",
]

#: A call refused because its key is held: ``sender`` the task; ``task_id``, ``key``,
#: ``holder`` (the id holding the key), ``strategy`` (the task's ``on_duplicate``), ``where``:
#: ``"enqueue"`` (``apply_async`` published nothing) or ``"execute"`` (a worker did not run it).
task_duplicate = Signal(
    name="redislock.task_duplicate",
    providing_args=["task_id", "key", "holder", "strategy", "where"],
)

#: The renewal found a held lock taken by someone else (it had expired): ``sender`` the task
#: (None for a ``RedisLock``/``RedisSemaphore`` held outside a task); ``key``, ``holder`` (the id
#: this process held it under), ``new_holder`` (the id holding it now, None if unknown; for a
#: semaphore, the ids holding every slot, joined by ", "), ``task_id`` (None outside a task).
lock_lost = Signal(
    name="redislock.lock_lost",
    providing_args=["key", "holder", "new_holder", "task_id"],
)

#: The renewal found a held lock gone (expired, or Redis restarted without it) and free, and
#: took it back: same arguments as ``lock_lost``, ``new_holder`` always None. Someone may have
#: held it in between: a body that must know uses a fencing token.
lock_retaken = Signal(
    name="redislock.lock_retaken",
    providing_args=["key", "holder", "new_holder", "task_id"],
)

#: A call over its ``global_rate_limit`` (or its named ``rate_limits``) was not run but re-queued for its slot: ``sender`` the
#: task; ``task_id``, ``key`` (the log of its first limit), ``rate`` (``"10/s"``; with named
#: limits ``"partner 10/s; llm 5/s, 20/m"``), ``wait`` (seconds until its slot, from when it was
#: re-queued).
task_rate_limited = Signal(
    name="redislock.task_rate_limited",
    providing_args=["task_id", "key", "rate", "wait"],
)

#: A task body raised ``RateLimitPaused``: its limits were paused on every worker and the call
#: re-queued for after the pause. ``sender`` the task; ``task_id``, ``limits`` (the paused
#: limits' names, ``""`` for a ``global_rate_limit``), ``keys`` (their partitions' logs),
#: ``retry_after`` (seconds asked for).
task_rate_paused = Signal(
    name="redislock.task_rate_paused",
    providing_args=["task_id", "limits", "keys", "retry_after"],
)


def _connected(signal: Signal) -> bool:
    # What Signal.send tests first: checked here before the arguments are built.
    return bool(signal.receivers)


def send_duplicate(task: Any, task_id: str, key: str, holder: str, strategy: str, where: str) -> None:
    """Send ``task_duplicate`` for a refused call of ``task``."""
    if _connected(task_duplicate):
        task_duplicate.send(
            sender=task, task_id=task_id, key=key, holder=holder, strategy=strategy, where=where
        )


def send_lease_event(
    signal: Signal, task: Any, key: str, holder: str, new_holder: str | None, task_id: str | None
) -> None:
    """Send ``lock_lost`` or ``lock_retaken`` for the lease ``key``/``holder``."""
    if _connected(signal):
        signal.send(sender=task, key=key, holder=holder, new_holder=new_holder, task_id=task_id)


def send_rate_limited(task: Any, task_id: str, key: str, rate: str, wait: float) -> None:
    """Send ``task_rate_limited`` for a call of ``task`` re-queued for its slot."""
    if _connected(task_rate_limited):
        task_rate_limited.send(sender=task, task_id=task_id, key=key, rate=rate, wait=wait)


def send_rate_paused(task: Any, task_id: str, limits: list[str], keys: list[str], retry_after: float) -> None:
    """Send ``task_rate_paused`` for a pause raised by a call of ``task``."""
    if _connected(task_rate_paused):
        task_rate_paused.send(sender=task, task_id=task_id, limits=limits, keys=keys, retry_after=retry_after)
