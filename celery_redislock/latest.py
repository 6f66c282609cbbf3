"""``keep_latest=True``: at most one running and one pending call per key.

Every call records itself as the key's latest (``{lock key}:latest``, its task id) and takes the
lock if it is free, in one script (``keep_latest.lua``). A call that finds the lock held is the
pending one: it is re-queued (same task id, like a retry) and checks again every
``PENDING_POLL`` seconds; it runs once the lock is free, unless a later call has become the
latest meanwhile: then it ends as a skipped duplicate naming that call (``{task id}@latest``),
its result stored, so its caller is answered. Only the latest call can ever take the lock after
the running one, so nothing called after the last run started is lost, and the latest
arguments win.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from celery import Task
from celery.exceptions import Ignore

from .acquisition import Execution, Outcome, Refused, freed_dead_delivery, hold
from .core import Lease
from .core.modes import LatestReply
from .holders import any_delivery_prefix, latest_id, task_id_of
from .outcomes import broker_wait_policy
from .stats import counters

__all__ = ["PENDING_HEADER", "PENDING_POLL", "acquire_latest"]

logger = logging.getLogger("celery_redislock.task")

#: The message header (a request attribute in the worker) marking a re-queued pending call:
#: it only checks whether it is still the latest, where a new call makes itself the latest.
PENDING_HEADER = "redislock_pending"
#: Seconds between two checks of a pending call (how long after the running call ends, at most,
#: the pending one starts, if a worker process is free).
PENDING_POLL = 1.0


def acquire_latest(task: Task[Any, Any], execution: Execution) -> Outcome:
    """Run (a Holding), be replaced (a Refused naming the latest call), be another delivery of
    the running message (a redelivered Refused), or be the pending call: re-queued here (raises
    ``Ignore``). Raises ``redis.RedisError`` when Redis is unreachable."""
    recheck = bool(getattr(task.request, PENDING_HEADER, None))
    reply = _step(execution, recheck)
    if reply.status == "pending" and execution.held_by_dead_delivery(reply.other):
        # This very message, from a child that died here: take over, as acquire() does.
        execution.runtime.engine.release(execution.key, reply.other)
        freed_dead_delivery(execution, reply.other)
        reply = _step(execution, recheck=True)
    options = execution.options
    if reply.status == "run":
        return hold(
            execution, execution.runtime.engine, Lease(execution.key, execution.holder, options.timeout_ms)
        )
    if reply.status == "replaced":
        counters.incr("replaced")
        return Refused(latest_id(reply.other), redelivered=False)
    if task_id_of(reply.other) == execution.task_id:
        return Refused(reply.other, redelivered=True)
    return _pend(task, execution, reply.other)


def _step(execution: Execution, recheck: bool) -> LatestReply:
    options = execution.options
    # The latest key outlives any wait of a pending call in the queue that queued_timeout allows.
    latest_ttl = max(options.queued_timeout_ms, options.timeout_ms)
    return execution.runtime.modes.keep_latest(
        execution.key,
        execution.holder,
        options.timeout_ms,
        execution.task_id,
        latest_ttl,
        recheck=recheck,
        deliveries=any_delivery_prefix(execution.task_id),
    )


def _pend(task: Task[Any, Any], execution: Execution, holder: str) -> Outcome:
    request = task.request
    if request.is_eager:  # nothing can be re-queued: it ends as a duplicate of the running one
        return Refused(holder, redelivered=False)
    logger.info(
        "Pending %s[%s]: %s is held by %s; it runs next unless a later call replaces it",
        task.name,
        request.id,
        execution.key,
        holder,
    )
    # Published like a retry (same task id, waits for the broker); no RETRY state is stored.
    task.retry(
        countdown=PENDING_POLL,
        throw=False,
        max_retries=sys.maxsize,
        retry_policy=broker_wait_policy(task),
        headers={PENDING_HEADER: "1"},
    )
    raise Ignore()
