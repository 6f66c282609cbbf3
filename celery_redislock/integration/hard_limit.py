"""Which pool process the prefork pool is killing at a task's hard time limit, for the parent's
release of that process's lock.

Celery sends the ``TimeLimitExceeded`` ``task_failure`` from inside the pool's hard-timeout
handler without the request, so without the pid of the process the pool kills right after. This
step wraps that handler to say which process it is, for the length of the call.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import bootsteps

__all__ = ["HardLimitKill", "killed_at_hard_limit"]


class _Kill(threading.local):
    """The process the pool's hard-timeout handler running in this thread kills, if any."""

    pid: int | None = None


_kill = _Kill()


def killed_at_hard_limit() -> int | None:
    """Inside the pool's hard-timeout handler, the pid of the process it kills; None anywhere
    else (a pool without the hook does not say which process it kills)."""
    return _kill.pid


class HardLimitKill(bootsteps.StartStopStep):
    """Wrap the hard-timeout handler of the prefork pool (the ``AsynPool`` of a worker with an
    event loop, which looks it up on itself each time it calls it)."""

    name = "celery_redislock.HardLimitKill"
    requires = ("celery.worker.components:Pool",)

    def start(self, parent: Any) -> None:
        pool: Any = getattr(parent.pool, "_pool", None)
        on_hard_timeout = getattr(pool, "on_hard_timeout", None)
        if on_hard_timeout is None or getattr(on_hard_timeout, "redislock_hook", False):
            return

        def hard_timeout(job: Any) -> None:
            pid = getattr(job, "_worker_pid", None)  # billiard's ApplyResult: who runs the job
            _kill.pid = pid if isinstance(pid, int) else None
            try:
                on_hard_timeout(job)  # fails the request (task_failure), then kills the process
            finally:
                _kill.pid = None

        hard_timeout.redislock_hook = True  # type: ignore[attr-defined]
        pool.on_hard_timeout = hard_timeout
