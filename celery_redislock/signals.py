"""The package's own Celery signals, at their public path: a duplicate refused, a held lock lost
or re-taken, a call postponed by its rate limit, a rate limit paused by a task body.

Each is declared by what sends it, and re-exported here: the lock's by the Celery glue
(``integration.signals``), a mode's or a gate's by the mode, which registers it with its counters
(``integration.mode.registered_signals``). Each is sent in the process where it happens; a
receiver that raises is logged by Celery and never breaks the task (or the renewal thread).
"""

from __future__ import annotations

from .gates import rate_signals as _rate
from .integration import signals as _lock

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
task_duplicate = _lock.task_duplicate

#: The renewal found a held lock taken by someone else (it had expired): ``sender`` the task
#: (None for a ``RedisLock``/``RedisSemaphore`` held outside a task); ``key``, ``holder`` (the id
#: this process held it under), ``new_holder`` (the id holding it now, None if unknown; for a
#: semaphore, the ids holding every slot, joined by ", "), ``task_id`` (None outside a task).
lock_lost = _lock.lock_lost

#: The renewal found a held lock gone (expired, or Redis restarted without it) and free, and
#: took it back: same arguments as ``lock_lost``, ``new_holder`` always None. Someone may have
#: held it in between: a body that must know uses a fencing token.
lock_retaken = _lock.lock_retaken

#: A call over its ``global_rate_limit`` (or its named ``rate_limits``) was not run but
#: re-queued for its slot: ``sender`` the task; ``task_id``, ``key`` (the log of its first
#: limit), ``rate`` (``"10/s"``; with named limits ``"partner 10/s; llm 5/s, 20/m"``), ``wait``
#: (seconds until its slot, from when it was re-queued).
task_rate_limited = _rate.task_rate_limited

#: A task body raised ``RateLimitPaused``: its limits were paused on every worker and the call
#: re-queued for after the pause. ``sender`` the task; ``task_id``, ``limits`` (the paused
#: limits' names, ``""`` for a ``global_rate_limit``), ``keys`` (their partitions' logs),
#: ``retry_after`` (seconds asked for).
task_rate_paused = _rate.task_rate_paused

send_duplicate = _lock.send_duplicate
send_lease_event = _lock.send_lease_event
send_rate_limited = _rate.send_rate_limited
send_rate_paused = _rate.send_rate_paused
