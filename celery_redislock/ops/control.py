"""`celery inspect redislock_stats`: the lock counters of a worker, all its pool processes summed."""

from __future__ import annotations

import os
from typing import Any

from celery.worker.control import inspect_command

from .stats import counters

__all__ = ["redislock_stats"]


# Registered on import, in the worker (which answers) and in the client (whose `celery inspect`
# rejects names it does not know): importing celery_redislock imports this module.
@inspect_command()
def redislock_stats(state: Any, **_: Any) -> dict[str, Any]:
    """Lock counters of this worker (acquired, skipped, retried, lost, released, ...), in all
    and by task (``{"tasks": {task name: {counter: n}}}``, the tasks that counted), and how late
    its postponed calls started (``{"lateness": {task: {kind: {"count", "sum", "buckets"}}}}``,
    each bucket's count by ``LATENESS_BUCKETS``, +Inf last)."""
    # Answered by the worker's main process; prefork children share its counters (stats.py).
    lateness: dict[str, dict[str, Any]] = {}
    for (task, kind), (buckets, count, total) in counters.lateness().items():
        lateness.setdefault(task, {})[kind] = {"count": count, "sum": total, "buckets": buckets}
    return {
        "pid": os.getpid(),
        "counters": counters.snapshot(),
        "tasks": counters.by_task(),
        "lateness": lateness,
    }
