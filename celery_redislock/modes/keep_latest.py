"""``keep_latest=True``: at most one running and one pending call per key.

Every call records itself as the key's latest (``{lock key}:latest``, its task id): when it is
sent (``send``), so that calls queued while every worker process is busy replace each other
too; or, for a message sent otherwise (``send_task``, a producer without this package), when a
worker takes it. At execution a call takes the lock if it is free and it is still the latest,
in one script (``keep_latest.lua``). A call that finds the lock held is the pending one: it is re-queued (same task id, like a retry) and checks again every
``PENDING_POLL`` seconds; it runs once the lock is free, unless a later call has become the
latest meanwhile: then it ends as a skipped duplicate naming that call (``{task id}@latest``),
its result stored, so its caller is answered. Only the latest call can ever take the lock after
the running one, so nothing called after the last run started is lost, and the latest
arguments win.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from celery import Task
from celery.exceptions import Ignore
from celery.utils import uuid

from ..config.options import LockOptions
from ..config.urls import mask_url
from ..engine import Lease
from ..engine.counting import count
from ..engine.holders import any_delivery_prefix, latest_id, task_id_of
from ..engine.leases import REDIS_ERRORS
from ..engine.mode_scripts import LatestReply, latest_key
from ..engine.timing import DEFAULT_RETRY_DELAY
from ..integration import sending as enqueue
from ..integration.acquisition import Execution, Outcome, Refused, freed_dead_delivery, hold
from ..integration.outcomes import broker_wait_policy
from ..integration.runtime import Runtime, app_layers_ask
from ..integration.sending import Publish

if TYPE_CHECKING:
    from ..integration.task import SingletonTask

__all__ = ["PENDING_HEADER", "PENDING_POLL", "acquire_latest", "may_keep_latest", "send"]

logger = logging.getLogger(__name__)

#: The message header (a request attribute in the worker) marking a call recorded as the latest
#: already (when sent, or a re-queued pending call): it only checks whether it is still the
#: latest, where a call never recorded makes itself the latest.
PENDING_HEADER = "redislock_pending"
#: Seconds between two checks of a pending call (how long after the running call ends, at most,
#: the pending one starts, if a worker process is free).
PENDING_POLL = DEFAULT_RETRY_DELAY


def may_keep_latest(task: SingletonTask) -> bool:
    """False when no layer can give ``task`` keep_latest (the resolved plan decides the rest)."""
    if task.keep_latest is not None:
        return bool(task.keep_latest)
    return app_layers_ask(task.app, "keep_latest", bool)


def send(
    task: SingletonTask,
    publish: Publish,
    args: Any,
    kwargs: Any,
    task_id: str | None,
    options: dict[str, Any],
) -> Any:
    """``apply_async`` of a task that may keep the latest: a new call is recorded as its key's
    latest before it is published, so a call sent earlier and still queued is replaced by it even
    when no worker process is free to take either (one solo worker, ``-c 1`` busy). A message
    whose task id is given (a retry, a re-queued copy) is published as it is."""
    runtime, plan = enqueue.send_plan(task, options)
    if not plan.options.keep_latest:  # another queue's task
        return enqueue.send(task, publish, args, kwargs, task_id, options)
    if task_id is not None:
        return publish(args, kwargs, task_id, **options)
    key, headers = enqueue.keyed_headers(task, plan, args, kwargs, options)
    task_id = uuid()
    recorded = _record(task, runtime, key, task_id, latest_ttl(plan.options))
    if recorded:
        headers[PENDING_HEADER] = "1"
    try:
        return publish(args, kwargs, task_id, headers=headers, **options)
    except BaseException:
        if recorded:
            # Never sent: a call that names it as the latest would be replaced by nothing.
            # Forget it (if still the latest), so the calls queued before it run.
            try:
                runtime.engine.release(latest_key(key), task_id)
            except REDIS_ERRORS:
                logger.warning("Could not forget %s as the latest of %s; it expires on its TTL", task_id, key)
        raise


def _record(task: SingletonTask, runtime: Runtime, key: str, task_id: str, ttl_ms: int) -> bool:
    """Record ``task_id`` as ``key``'s latest call, before its publish (a worker may take the
    message at once, and must find it the latest); False when Redis is unreachable: its worker
    records it when it takes it (it replaces fewer calls queued meanwhile, but loses none)."""
    try:
        runtime.engine.client.set(latest_key(key), task_id, px=ttl_ms)
        return True
    except REDIS_ERRORS as exc:
        count("redis_errors")
        logger.warning(
            "Sending %s[%s] unrecorded as the latest: Redis at %s is unreachable (%r)",
            task.name,
            task_id,
            mask_url(runtime.settings.url),
            exc,
        )
        return False


def latest_ttl(options: LockOptions) -> int:
    """Milliseconds the latest key lives: longer than a pending call may wait in the queue that
    queued_timeout allows, and than a run."""
    return max(options.queued_timeout_ms, options.timeout_ms)


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
        count("replaced")
        return Refused(latest_id(reply.other), redelivered=False)
    if task_id_of(reply.other) == execution.task_id:
        return Refused(reply.other, redelivered=True)
    return _pend(task, execution, reply.other)


def _step(execution: Execution, recheck: bool) -> LatestReply:
    options = execution.options
    return execution.runtime.modes.keep_latest(
        execution.key,
        execution.holder,
        options.timeout_ms,
        execution.task_id,
        latest_ttl(options),
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
