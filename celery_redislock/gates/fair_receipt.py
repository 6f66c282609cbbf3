"""Fair share's count-out as a worker receives a call: in the worker's consumer (its main
process, whatever the pool), handed to the process's count-out thread
(``engine.fair_countout``), so the call's start in the pool pays no round trip for it; flushed
as the worker shuts down."""

from __future__ import annotations

from typing import Any

from celery.signals import task_received, worker_shutdown

from ..engine.fair_countout import get_countout, stop_countout
from ..integration.runtime import runtime_for

__all__ = ["FAIR_HEADER"]

#: The message header of a fair call: ``[queue, tenant, ticket]`` (the ticket counts it out of
#: its backlog once, however often the broker gives it out).
FAIR_HEADER = "redislock_fair"


@task_received.connect(weak=False)
def _received(sender: Any = None, request: Any = None, **_: Any) -> None:
    """A fair call reached this worker: buffer its ticket. Sent for every message the consumer
    takes, so a call that is not fair costs one lookup."""
    header = getattr(request, "request_dict", None) or {}
    fair = header.get(FAIR_HEADER)
    # Not fair, or counted in no backlog (a hashed lane, a re-queue), or not ours to read.
    if not isinstance(fair, (list, tuple)) or len(fair) != 3 or not fair[2]:
        return
    runtime = runtime_for(request.task.app)
    get_countout().add(runtime.scripts, runtime.settings.key_prefix, str(fair[0]), str(fair[2]))


@worker_shutdown.connect(weak=False)
def _shutdown(**_: Any) -> None:
    """Count out what is buffered before the worker exits (its consumer has stopped by then)."""
    stop_countout()
