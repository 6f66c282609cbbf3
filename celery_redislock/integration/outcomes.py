"""What an execution does when it does not get its lock: the duplicate strategies (``on_duplicate``),
a redelivered copy of a running message, an unreachable Redis (``on_redis_error``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NoReturn

from celery import states
from celery.backends.base import DisabledBackend
from celery.exceptions import Ignore

from ..config.options import LockOptions
from ..config.settings import AppSettings
from ..config.urls import mask_url
from ..engine.counting import count
from ..engine.holders import task_id_of
from ..errors import DuplicateTaskError, LockUnavailableError
from ..waits.put_off import put_off
from .runtime import runtime_for
from .signals import send_duplicate
from .tracing import lock_event

__all__ = [
    "SkippedAsSuccess",
    "drop_finished",
    "finished",
    "on_duplicate",
    "on_redelivered",
    "on_redis_error",
    "redelivered",
    "retry_duplicate",
    "skip",
    "skipped_value",
]

logger = logging.getLogger(__name__)

#: The request attribute holding what ``finished`` read from the result backend.
FINISHED_FIELD = "redislock_finished"

if TYPE_CHECKING:
    from celery import Task

    # Celery's Task is generic to type checkers only before 5.7: subscripted at runtime it raises.
    AnyTask = Task[Any, Any]


def on_duplicate(
    task: AnyTask, options: LockOptions, key: str, holder: str, strategy: str | None = None
) -> NoReturn:
    """Another task id holds ``key``: raise, retry later, or skip, as ``strategy`` (by default
    ``on_duplicate``) says ("wait" has waited already)."""
    request = task.request
    error = DuplicateTaskError(task.name, str(request.id), key, holder, task_id_of(holder))
    strategy = strategy or options.on_duplicate
    send_duplicate(task, str(request.id), key, holder, strategy, "execute")
    if strategy == "raise":
        count("skipped", task=task.name)
        lock_event("skip", task.name, key, holder, "raised")
        raise error
    # Out of retries (or eager, where nothing can be re-queued) it ends as a skip.
    retries_left = task.max_retries is None or request.retries < task.max_retries
    if strategy == "retry" and retries_left and not request.is_eager:
        retry_duplicate(task, options, error)
    skip(task, options, error)


def retry_duplicate(
    task: AnyTask, options: LockOptions, error: DuplicateTaskError, *, unlimited: bool = False
) -> NoReturn:
    """Re-queued in ``retry_countdown`` (a retry: counted in the task's ``max_retries`` unless
    ``unlimited``), counted ``retried``."""
    count("retried", task=task.name)
    lock_event("skip", task.name, error.key, error.holder, "retried")
    logger.info(
        "Retrying duplicate %s[%s] in %ss: %s is held by %s",
        task.name,
        task.request.id,
        options.retry_countdown,
        error.key,
        error.holder,
    )
    runtime = runtime_for(task.app)
    raise put_off(
        task, runtime, options.retry_countdown, bounded=not unlimited, keep_retries=False, exc=error
    )


class SkippedAsSuccess(Exception):
    """Not an error: how ``skip`` with ``skip_result="success"`` makes the task return
    ``value`` (caught by ``SingletonTask.__call__``)."""

    def __init__(self, value: dict[str, Any]) -> None:
        super().__init__(value)
        self.value = value


def skipped_value(error: DuplicateTaskError) -> dict[str, Any]:
    """The SUCCESS result of a skipped call (``skip_result="success"``): JSON, marked as a
    skip, naming who holds its key."""
    return {"skipped": True, "holder": error.holder, "holder_task_id": error.holder_task_id, "key": error.key}


def skip(task: AnyTask, options: LockOptions, error: DuplicateTaskError) -> NoReturn:
    """Not run: one INFO line, and a result that answers a waiting caller (and a chord) at
    once, as ``skip_result`` says: a FAILURE holding ``error`` (no on_failure / task_failure),
    a SUCCESS naming the holder (returned through Celery's success path, so a chord or a chain
    goes on), or nothing (except in a chord, which waits for every member: FAILURE)."""
    count("skipped", task=task.name)
    lock_event("skip", task.name, error.key, error.holder, "skipped")
    request = task.request
    logger.info("Skipped duplicate %s[%s]: %s is held by %s", task.name, request.id, error.key, error.holder)
    stored = options.skip_result
    if stored == "success":
        raise SkippedAsSuccess(skipped_value(error))
    if request.is_eager:
        raise error  # no backend to store in: the EagerResult carries the error
    if request.chord or (stored == "failure" and not task.ignore_result):
        task.backend.mark_as_failure(str(request.id), error, request=request, call_errbacks=False)
    raise Ignore()


def on_redelivered(task: AnyTask, options: LockOptions, key: str, holder: str) -> NoReturn:
    """Another delivery of this very message holds the lock: a copy given out again by the
    Redis broker's visibility timeout while the original runs, or a message re-queued after
    its child died on another worker (whose lock only expires). Not run now; not dropped
    either, since the holder may never finish: re-queued to look again once the lock may have
    moved, and dropped then if that task id has finished meanwhile (``finished``)."""
    request = task.request
    error = DuplicateTaskError(task.name, str(request.id), key, holder, task_id_of(holder))
    if request.is_eager:
        skip(task, options, error)
    count("retried", task=task.name)
    countdown = options.renew_interval_s
    logger.info(
        "Re-queued redelivered %s[%s] in %ss: %s is held by its other delivery %s",
        task.name,
        request.id,
        countdown,
        key,
        holder,
    )
    # Published like a retry (same task id, waits for the broker), but no RETRY state is
    # stored: that would overwrite the result the holder may store in the meantime.
    put_off(task, runtime_for(task.app), countdown, keep_retries=False, exc=error)
    raise Ignore()


def redelivered(request: Any) -> bool:
    """Whether the broker marked this delivery as one given out before (kombu's Redis transport
    when it restores an unacknowledged message, RabbitMQ when a consumer went away without
    acknowledging it)."""
    return bool((request.delivery_info or {}).get("redelivered"))


def finished(task: AnyTask) -> bool:
    """Whether this task id already has a final result (a re-queued copy is then dropped).
    Asked of the result backend once a delivery: a gate and the mode both ask, moments apart."""
    request = task.request
    fields = vars(request)
    known: bool | None = fields.get(FINISHED_FIELD)
    if known is None:
        known = fields[FINISHED_FIELD] = _finished(task, str(request.id))
    return known


def _finished(task: AnyTask, task_id: str) -> bool:
    if task.ignore_result or isinstance(task.backend, DisabledBackend):
        return False
    try:
        state = task.backend.get_task_meta(task_id).get("status")
    except Exception as exc:  # the result store is not the lock's business: run it
        logger.warning("Could not read the state of %s[%s]: %r", task.name, task_id, exc)
        return False
    return state in states.READY_STATES


def drop_finished(task: AnyTask) -> None:
    """Drop this delivery (raises ``Ignore``) if its task id has a final result already: a copy
    of a message the broker gave out again after its first delivery was decided."""
    if finished(task):
        logger.info("Dropped redelivered %s[%s]: it has finished already", task.name, task.request.id)
        raise Ignore()


def on_redis_error(
    task: AnyTask, settings: AppSettings, options: LockOptions, key: str, exc: Exception
) -> None:
    """The lock Redis failed (any of ``engine.leases.REDIS_ERRORS``): return to run unlocked
    (``"run"``, logged), or raise: re-queued (``"retry"``, nothing lost) or failed (``"fail"``).
    A failed TLS set-up is none of these: a configuration error (``RedisTLSError``, naming the
    setting), the task fails."""
    count("redis_errors")
    tls_error = settings.tls_error(exc)
    if tls_error is not None:
        raise tls_error from exc
    shown = mask_url(settings.url)
    request = task.request
    if options.on_redis_error == "run":
        logger.warning(
            "Running %s[%s] without its %s: Redis at %s is unreachable (%r)",
            task.name,
            request.id,
            "lock" if key else "gates",  # no key: run without a lock (lock=False)
            shown,
            exc,
        )
        return
    error = LockUnavailableError(task.name, str(request.id), key, shown, exc)
    if options.on_redis_error == "retry" and not request.is_eager:
        logger.warning("Retrying %s[%s] in %ss: %s", task.name, request.id, options.retry_countdown, error)
        raise put_off(
            task, runtime_for(task.app), options.retry_countdown, keep_retries=False, exc=error
        ) from exc
    raise error from exc
