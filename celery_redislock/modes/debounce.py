"""``debounce=SECONDS`` (``debounce_max=SECONDS``): a burst of calls of one key runs once, with
the last call's arguments, ``SECONDS`` after the last call (at most ``debounce_max`` after the
first).

Each new call is published with that delay (``countdown``) after recording itself as its key's
latest call (``{lock key}:debounce``; the burst's first-call time in ``{lock key}:burst``, on the
server's clock), in one script. When a message is due, it runs only if it is still the latest;
else it ends as a skipped duplicate naming the call that superseded it (``{id}@debounced``),
counted ``debounced``. The latest runs under the key's lock as usual; if the previous burst's run
still holds it, the latest is retried (``retry_countdown``) until it is free, never skipped, or
the burst would be lost (``wait_out``).
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from celery import Task
from celery.utils import uuid

from ..config.options import LockOptions
from ..config.urls import mask_url
from ..engine.counting import count
from ..engine.holders import debounced_id, task_id_of
from ..engine.leases import REDIS_ERRORS
from ..errors import DuplicateTaskError
from ..integration import sending as enqueue
from ..integration.acquisition import Execution
from ..integration.outcomes import broker_wait_policy, retry_duplicate, skip
from ..integration.runtime import app_layers_ask
from ..integration.sending import Publish, seconds_until
from ..signals import send_duplicate

if TYPE_CHECKING:
    from ..integration.task import SingletonTask

__all__ = ["check", "may_debounce", "send", "user_max_retries", "wait_out"]

logger = logging.getLogger(__name__)


def may_debounce(task: SingletonTask) -> bool:
    """False when no layer can debounce ``task`` (the resolved plan decides the rest)."""
    if task.debounce is not None:
        return True
    return app_layers_ask(task.app, "debounce", lambda value: value is not None)


def send(
    task: SingletonTask,
    publish: Publish,
    args: Any,
    kwargs: Any,
    task_id: str | None,
    options: dict[str, Any],
) -> Any:
    """``apply_async`` of a task that may be debounced: a new call is recorded as its key's latest
    and published with the burst's delay. A message whose task id is given (a retry, a re-queued
    copy) is published as it is: it was debounced when first sent."""
    runtime, plan = enqueue.send_plan(task, options)
    settings = plan.options
    if settings.debounce is None:  # another queue's task, or one that locks at enqueue
        return enqueue.send(task, publish, args, kwargs, task_id, options)
    if task_id is not None:
        return publish(args, kwargs, task_id, **options)
    key, headers = enqueue.keyed_headers(task, plan, args, kwargs, options)
    task_id = uuid()
    asked = seconds_until(options.pop("countdown", None), options.pop("eta", None), task.app.timezone)
    ttl_ms = settings.queued_timeout_ms + settings.debounce_ms + settings.debounce_max_ms
    try:
        delay_ms = runtime.modes.debounce_call(
            key, task_id, settings.debounce_ms, settings.debounce_max_ms, ttl_ms
        )
    except REDIS_ERRORS as exc:
        # Not recorded: it is sent with the full delay and runs when due (a burst then runs more
        # than once, which is better than losing its last call).
        count("redis_errors")
        logger.warning(
            "Sending %s[%s] undebounced: Redis at %s is unreachable (%r)",
            task.name,
            task_id,
            mask_url(runtime.settings.url),
            exc,
        )
        delay_ms = settings.debounce_ms
    # A countdown or eta the caller gave delays it further, never less.
    countdown = max(asked, delay_ms / 1000)
    return publish(args, kwargs, task_id, headers=headers, countdown=countdown, **options)


def check(task: SingletonTask, execution: Execution) -> None:
    """A debounced call is due: return to run it if it is its burst's latest call, else end it
    as a skipped duplicate naming the call that superseded it. Raises ``redis.RedisError``."""
    latest = execution.runtime.modes.debounce_run(execution.key, execution.task_id)
    if latest is None:
        return
    count("debounced")
    holder = debounced_id(latest)
    send_duplicate(task, execution.task_id, execution.key, holder, "skip", "execute")
    error = DuplicateTaskError(task.name, execution.task_id, execution.key, holder, latest)
    skip(task, error)


def wait_out(task: SingletonTask, options: LockOptions, key: str, holder: str) -> NoReturn:
    """The burst's latest call is due and ``holder`` (the previous burst's run) holds ``key``:
    re-queued every ``retry_countdown`` until the key is free, whatever ``on_duplicate`` says and
    however long the run takes (the previous calls of its burst were skipped naming it: skipping
    it too would lose the burst). Only a ``max_retries`` the task sets itself bounds the waits: a
    call out of those is lost, logged as an ERROR and counted ``debounce_lost``, its FAILURE
    stored. Eager, where nothing can be re-queued, it ends as a skipped duplicate."""
    request = task.request
    task_id = str(request.id)
    error = DuplicateTaskError(task.name, task_id, key, holder, task_id_of(holder))
    send_duplicate(task, task_id, key, holder, "retry", "execute")
    if request.is_eager:
        skip(task, error)
    bound = user_max_retries(task)
    if bound is not None and request.retries >= bound:
        count("debounce_lost")
        logger.error(
            "Lost debounced %s[%s]: %s was still held by %s after %d retries (the task's "
            "max_retries); nothing of its burst runs",
            task.name,
            task_id,
            key,
            holder,
            request.retries,
        )
        skip(task, error)
    try:
        retry_duplicate(task, options, error, max_retries=sys.maxsize, retry_policy=broker_wait_policy(task))
    finally:
        # Celery's retry() leaves the bound given on the task object, where its autoretry_for
        # would read it for this task's later runs in this process.
        vars(task).pop("override_max_retries", None)


def user_max_retries(task: Task[Any, Any]) -> int | None:
    """The ``max_retries`` the task sets itself (its decorator, a subclass, ``task_annotations``),
    else None: Celery's default (3) is not a bound the user chose, nor is ``None``."""
    for owner in (task, *type(task).__mro__):
        if owner is Task:
            break
        if "max_retries" in vars(owner):
            bound: int | None = vars(owner)["max_retries"]
            return bound
    return None
