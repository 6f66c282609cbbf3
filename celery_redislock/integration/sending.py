"""Locking at enqueue (``lock_on="enqueue"``): the lock taken by ``apply_async`` before a message
is published, and carried to its worker in the message's ``redislock_key`` header."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timezone, tzinfo
from typing import Any

from celery.utils import uuid
from celery.utils.time import maybe_iso8601

from ..config.arguments import KEY_HEADER
from ..config.urls import mask_url
from ..engine.counting import count
from ..engine.holders import queued_id, task_id_of
from ..engine.leases import REDIS_ERRORS
from ..engine.timing import to_ms
from ..errors import LockUnavailableError
from .mode import Plan, Send
from .queues import destination
from .runtime import Runtime, app_layers_ask, runtime_for
from .signals import send_duplicate

__all__ = [
    "EXPIRY_MARGIN_MS",
    "expiry_ttl_ms",
    "keyed_headers",
    "may_lock_at_enqueue",
    "message_expires",
    "queued_ttl_ms",
    "seconds_until",
    "send",
    "send_plan",
    "unreachable_at_send",
]

logger = logging.getLogger(__name__)

#: How long a lock taken at enqueue outlives its message's expiry: a worker that received the
#: message just before it expired has taken the lock over by then, or has discarded it.
EXPIRY_MARGIN_MS = 1000


def may_lock_at_enqueue(task: Any) -> bool:
    """False when no layer can make ``task`` lock at enqueue (the resolved plan decides the
    rest): the task's own setting wins, else any app or queue layer may ask for it."""
    if task.lock_on is not None:
        return bool(task.lock_on == "enqueue")
    return app_layers_ask(task.app, "lock_on", lambda value: value == "enqueue")


def send(call: Send) -> Any:
    """``apply_async`` of a task that may lock at enqueue (``may_lock_at_enqueue``).

    A new call whose key is already queued or running publishes nothing and is answered by
    ``task._refused_at_send`` (``task``: a ``SingletonTask``, whose module sits above this one).
    A message whose task id is given (a retry, a re-queued copy, a canvas member, a caller's own
    id) is already promised to someone waiting on that id: it is always published, with the
    lock if free, else unlocked, and its worker deals with the duplicate."""
    task, runtime, plan, publish, options = call.task, call.runtime, call.plan, call.publish, call.options
    args, kwargs, task_id = call.args, call.kwargs, call.task_id
    if plan.options.lock_on != "enqueue":
        return call.as_is()
    key, headers = keyed_headers(task, plan, args, kwargs, options)
    new_call = task_id is None
    task_id = task_id or uuid()
    queued = queued_id(task_id)
    delay = seconds_until(options.get("countdown"), options.get("eta"), task.app.timezone)
    ttl_ms = queued_ttl_ms(
        plan.options.queued_timeout_ms + to_ms(delay, minimum=0), message_expires(task, options)
    )
    try:
        # Takes the key, or re-enters this task id's own queued lock (a retry's).
        result = runtime.engine.acquire(key, queued, ttl_ms)
    except REDIS_ERRORS as exc:
        # "retry" and "run": send it anyway; the worker takes the lock when it runs it.
        unreachable_at_send(logger, call, task_id, key, exc, "without an enqueue lock", strict=True)
        return publish(args, kwargs, task_id, headers=headers, **options)
    if not result.acquired and new_call:
        count("refused_at_send", task=task.name)
        plan.mode.on_refused_at_send(task, plan.options, key, result.holder)
        logger.info("Not sending duplicate %s: %s is held by %s", task.name, key, result.holder)
        send_duplicate(task, task_id, key, result.holder, plan.options.on_duplicate, "enqueue")
        return task._refused_at_send(plan.options, key, task_id, result.holder)
    if not result.acquired and task_id_of(result.holder) != task_id:
        logger.info(
            "Sending %s[%s] unlocked: %s is held by %s, and a message with a given task id is "
            "never dropped; its worker handles the duplicate",
            task.name,
            task_id,
            key,
            result.holder,
        )
    try:
        return publish(args, kwargs, task_id, headers=headers, **options)
    except BaseException:
        if result.acquired:  # nothing was sent: nobody will take the lock over
            runtime.engine.release(key, queued)
        raise


def unreachable_at_send(
    log: logging.Logger,
    call: Send,
    task_id: str,
    key: str,
    exc: Exception,
    sent: str,
    *,
    strict: bool = False,
) -> None:
    """Redis could not be reached while sending ``call`` (as ``task_id``, keyed ``key``): counted,
    and one WARNING on the sender's ``log`` saying it is sent anyway, ``sent`` (how: "without an
    enqueue lock"). ``strict``: the call needs Redis at send, so a TLS configuration error (which
    sending anyway would hide) and ``on_redis_error="fail"`` raise instead."""
    count("redis_errors")
    task, runtime = call.task, call.runtime
    url = mask_url(runtime.settings.url)
    if strict:
        tls_error = runtime.settings.tls_error(exc)
        if tls_error is not None:
            raise tls_error from exc
        if call.plan.options.on_redis_error == "fail":
            raise LockUnavailableError(task.name, task_id, key, url, exc) from exc
    log.warning("Sending %s[%s] %s: Redis at %s is unreachable (%r)", task.name, task_id, sent, url, exc)


def send_plan(
    task: Any, options: Mapping[str, Any], args: Any, kwargs: Any
) -> tuple[Runtime, Plan, str | None]:
    """The app's runtime, the task's plan for the queue a send goes to, as Celery routes it
    (``destination``: the send's ``queue``, the task's, ``task_routes``), so a routed call gets
    the queue layer its worker will resolve, and that queue. Routed only when some queue layer
    exists (the queue is None otherwise): the router is not free and this is every planned
    send's path."""
    runtime = runtime_for(task.app)
    queue = destination(task, options, args, kwargs) if runtime.settings.queues else None
    return runtime, runtime.plan(task, queue), queue


def keyed_headers(
    task: Any, plan: Plan, args: Any, kwargs: Any, options: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The lock key of a send and its message headers (taken out of ``options``) carrying it.

    A re-published message keeps the key it was locked under (JSON may have changed its
    arguments' types since); a new one is keyed here, and carries the key to its worker."""
    headers = {**(options.pop("headers", None) or {})}
    key = headers.get(KEY_HEADER) or plan.key(task, tuple(args or ()), dict(kwargs or {}))
    headers[KEY_HEADER] = key
    return key, headers


def seconds_until(countdown: float | None, eta: datetime | str | None, tz: tzinfo) -> float:
    """Seconds until a message sent with ``countdown`` or ``eta`` is due, as Celery reads them:
    a countdown wins over an eta; a naive eta is in the app's timezone ``tz``."""
    if countdown:
        return max(0.0, float(countdown))
    if not eta:
        return 0.0
    when = datetime.fromisoformat(eta) if isinstance(eta, str) else eta
    if when.tzinfo is None:
        when = when.replace(tzinfo=tz)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def message_expires(task: Any, options: Mapping[str, Any]) -> Any:
    """The ``expires`` a send's message gets: the send's own (an explicit None clears the
    task's), else the task's default, as Celery's ``apply_async`` merges them."""
    return options.get("expires", task.expires)


def expiry_ttl_ms(expires: float | datetime | str | None) -> int | None:
    """Milliseconds from now until a message sent with ``expires`` (seconds, a datetime or its
    ISO 8601 form, as a retry carries it; naive means UTC, as Celery reads it for the broker's
    per-message TTL) expires, or None when it does not. A broker may drop an expired message
    where no worker sees it (RabbitMQ does), so nothing is left to free its lock."""
    if expires is None:
        return None
    if isinstance(expires, (int, float)):
        return to_ms(expires, minimum=0)
    when = maybe_iso8601(expires)  # Celery's own reading of an ISO 8601 string
    if when is None:  # an empty string: no expiry, as Celery reads it
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return to_ms((when - datetime.now(timezone.utc)).total_seconds(), minimum=0)


def queued_ttl_ms(ttl_ms: int, expires: float | datetime | str | None) -> int:
    """The TTL of a lock held for a queued message: ``ttl_ms``, but never longer than the
    message's expiry (``expiry_ttl_ms``) plus ``EXPIRY_MARGIN_MS``."""
    expiry_ms = expiry_ttl_ms(expires)
    if expiry_ms is None:
        return ttl_ms
    return max(1, min(ttl_ms, expiry_ms + EXPIRY_MARGIN_MS))
