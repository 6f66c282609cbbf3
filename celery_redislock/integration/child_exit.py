"""Free a prefork child's locks as soon as the worker's parent sees the child exit.

Celery answers for a child lost mid-task (``WorkerLostError``, whose ``task_failure`` frees its
locks in ``worker_handlers``) once billiard's pool has reaped it. The pool hears of an exit when a pipe
the child holds closes, a moment before the kernel lets the parent reap it: the pool often finds
the child still there and notices the loss only at its next maintenance pass, up to 5 s later.
This step hooks that same event and frees, from the parent, the locks of the requests the child
was running as soon as the child is gone, and the slots their gates took by the same holder ids
(a tenant's ``fair_cap``: ``parent_release``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import bootsteps
from celery.app.task import Context
from celery.worker import state

from .liveness import process_alive
from .parent_release import release_for
from .task import SingletonTask

__all__ = ["ChildExitRelease"]

logger = logging.getLogger(__name__)

# How soon to look again at a child whose pipe closed but which is not a zombie yet: the kernel
# gets there within microseconds, so the first look after 1 ms nearly always finds it gone; the
# delay doubles up to a second for a child that closed the pipe itself and runs on.
FIRST_DELAY = 0.001
MAX_DELAY = 1.0


class ChildExitRelease(bootsteps.StartStopStep):
    """Hook the prefork pool's process-exit event (the ``AsynPool`` of a worker with an event
    loop; other pools have no such event and keep the ``WorkerLostError`` path alone)."""

    name = "celery_redislock.ChildExitRelease"
    requires = ("celery.worker.components:Pool",)

    def start(self, parent: Any) -> None:
        # After the Pool step started the pool, before the consumer registers it with the event
        # loop: the pool looks this method up on each child it tracks, the first ones included.
        pool: Any = getattr(parent.pool, "_pool", None)
        on_exit = getattr(pool, "_event_process_exit", None)
        if on_exit is None or getattr(on_exit, "redislock_hook", False):
            return

        def event_process_exit(hub: Any, proc: Any) -> None:
            try:
                _watch(hub, proc.pid)
            except Exception:  # the pool's own exit handling must run whatever happens here
                logger.exception("Could not watch the exit of pool process %s", proc.pid)
            finally:
                on_exit(hub, proc)

        event_process_exit.redislock_hook = True  # type: ignore[attr-defined]
        pool._event_process_exit = event_process_exit


def _watch(hub: Any, pid: int) -> None:
    """Called as child ``pid``'s exit pipe closes, before the pool reaps it."""
    requests = [
        request
        for request in list(state.active_requests)
        if request.worker_pid == pid and isinstance(request.task, SingletonTask)
    ]
    if requests:
        _ExitingChild(hub, pid, requests).check()


class _ExitingChild:
    """A pool child whose exit pipe closed, and the SingletonTask requests it was running."""

    def __init__(self, hub: Any, pid: int, requests: list[Any]) -> None:
        self.hub = hub
        self.pid = pid
        self.requests = requests
        self.delay = FIRST_DELAY

    def check(self) -> None:
        # Runs in the event loop, as the pool does: the pool cannot reap the child, nor fork
        # another, meanwhile.
        if process_alive(self.pid):
            if any(request in state.active_requests for request in self.requests):
                # Not a zombie yet, so not reaped: the pid is still this child's.
                self.hub.call_later(self.delay, self.check)
                self.delay = min(self.delay * 2, MAX_DELAY)
            # Else Celery answered while the pid runs: the child ended its requests (and freed
            # their locks) before exiting, or the pool reaped it and the pid runs another
            # process, perhaps a new child holding a redelivery's lock (which frees the dead one's).
            return
        # Gone, and no process has the pid: free what that very process held, by the holder ids
        # that carry its pid, whatever Celery answered (a re-queue or a retry frees nothing;
        # what a failure's handler freed already is not found).
        why = f"its worker process died (pid {self.pid}, freed at its exit)"
        for request in self.requests:
            release_for(request.task, Context(request.request_dict), why, self.pid)
