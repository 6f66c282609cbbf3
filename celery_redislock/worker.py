"""Worker lifecycle: tag each request with its queue, free locks of dead or terminated
children from the parent, release what a process holds at shutdown."""

from __future__ import annotations

import atexit
import logging
from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import redis
from celery import Celery, signals
from celery.exceptions import TimeLimitExceeded, WorkerLostError

from .bootstep import SettingsCheck
from .renewal import get_renewer
from .runtime import holder_prefix, runtime_for
from .stats import counters
from .task import SingletonTask

__all__ = ["consumed_queue"]

logger = logging.getLogger("celery_redislock.worker")

#: The request attribute carrying the queue a message was consumed from.
QUEUE_FIELD = "redislock_queue"


def consumed_queue(
    delivery_info: Mapping[str, Any], queues: Iterable[Any], tags: Mapping[str, str]
) -> str | None:
    """The name of the queue a message was consumed from.

    Celery's request ``delivery_info`` has the exchange and routing key, not the queue. AMQP
    deliveries carry the consumer tag, which names the queue exactly; other transports (Redis)
    are matched on the consuming queues' bindings: the queue bound to that exchange with that
    routing key (Celery's default direct routing), preferring one named like the routing key.
    """
    tag = delivery_info.get("consumer_tag")
    if tag:
        for name, active in tags.items():
            if active == tag:
                return name
    exchange = delivery_info.get("exchange")
    routing_key = delivery_info.get("routing_key")
    matches = [
        queue.name
        for queue in queues
        if queue.routing_key == routing_key
        and (not exchange or getattr(queue.exchange, "name", None) == exchange)
    ]
    if not matches:
        return None
    return str(routing_key) if routing_key in matches else str(matches[0])


@signals.task_received.connect(weak=False)
def _tag_queue(sender: Any = None, request: Any = None, **_: Any) -> None:
    # Runs in the consumer (the parent of prefork children): the request dict is what the
    # child gets as task.request, so the queue rides along to SingletonTask.__call__.
    if request is None or not isinstance(request.task, SingletonTask):
        return
    task_consumer = getattr(sender, "task_consumer", None)
    queues: Sequence[Any] = getattr(task_consumer, "queues", None) or list(
        request.task.app.amqp.queues.values()
    )
    tags: Mapping[str, str] = getattr(task_consumer, "_active_tags", None) or {}
    message = getattr(request, "message", None)
    delivery_info = getattr(message, "delivery_info", None) or request.delivery_info or {}
    request.request_dict[QUEUE_FIELD] = consumed_queue(delivery_info, queues, tags)


def _release_for(task: SingletonTask, context: Any, why: str) -> None:
    """Free, from the parent, the lock a child held for ``context`` (its request)."""
    try:
        runtime = runtime_for(task.app)
        plan = runtime.plan(task, getattr(context, QUEUE_FIELD, None))
        key = plan.key(task, context.args or (), context.kwargs or {})
        prefix = holder_prefix(str(context.id), context.hostname)
        engine = runtime.engine_for(plan.options)  # a lock, or a semaphore's slots
        if engine.release_holder_prefix(key, prefix, notify=runtime.release_channel(key)):
            counters.incr("released")
            logger.info("Released lock %s of %s[%s]: %s", key, task.name, context.id, why)
    except redis.RedisError as exc:
        counters.incr("redis_errors")
        logger.warning(
            "Could not release the lock of %s[%s] (%s): %r; it expires on its TTL",
            task.name,
            context.id,
            why,
            exc,
        )
    except Exception:  # a signal handler must not break the worker's failure handling
        logger.exception("Could not release the lock of %s[%s] (%s)", task.name, context.id, why)


@signals.task_failure.connect(weak=False)
def _release_dead_child(
    sender: Any = None,
    task_id: str | None = None,
    exception: BaseException | None = None,
    args: Any = None,
    kwargs: Any = None,
    **_: Any,
) -> None:
    # Sent in the parent when a prefork child died mid-task (WorkerLostError) or was killed
    # at its hard time limit: the child's own release never ran, so free its lock now
    # instead of after lock_timeout.
    if not isinstance(sender, SingletonTask):
        return
    if isinstance(exception, WorkerLostError):
        _release_for(sender, sender.request, "its worker process died")
    elif isinstance(exception, TimeLimitExceeded):
        # Celery sends this one without the request's context: rebuild what the key needs.
        context = SimpleNamespace(id=task_id, hostname=_node["name"], args=args, kwargs=kwargs)
        _release_for(sender, context, "it was killed at its hard time limit")


@signals.task_revoked.connect(weak=False)
def _release_terminated(sender: Any = None, request: Any = None, terminated: bool = False, **_: Any) -> None:
    if terminated and isinstance(sender, SingletonTask) and request is not None:
        _release_for(sender, request, "it was revoked and terminated")


# This worker's node name (celery@host), for releases whose signal carries no request context.
_node: dict[str, str | None] = {"name": None}


@signals.worker_init.connect(weak=False)
def _add_settings_check(sender: Any = None, **_: Any) -> None:
    _node["name"] = getattr(sender, "hostname", None)
    # Bad redislock_* settings must stop the worker before it consumes anything, but what a
    # signal receiver raises is swallowed: add the bootstep that checks them instead. The
    # worker sends worker_init just before it builds its blueprint from app.steps["worker"].
    app: Celery | None = getattr(sender, "app", None)
    if app is not None:
        app.steps["worker"].add(SettingsCheck)


@signals.worker_process_shutdown.connect(weak=False)
def _release_process_locks(**_: Any) -> None:
    # A prefork child exiting, or (worker_shutdown below) a solo/threads worker: release what
    # this process still holds, then stop its renewal thread.
    renewer = get_renewer()
    released = renewer.release_all()
    counters.incr("released", released)
    renewer.stop()


@signals.worker_shutdown.connect(weak=False)
def _release_at_shutdown(**_: Any) -> None:
    _release_process_locks()


@signals.worker_shutting_down.connect(weak=False)
def _release_after_cold_shutdown(how: str | None = None, **_: Any) -> None:
    # A cold shutdown terminates the pool: children normally release in their own cleanup, but
    # one killed outright cannot. Celery forgets the active requests before the pool is gone
    # (and sends no worker_shutdown), so note them now and free their locks at exit.
    if how != "Cold":
        return
    from celery.worker import state

    busy = [(r.task, r._context) for r in list(state.active_requests) if isinstance(r.task, SingletonTask)]
    if busy:
        atexit.register(_release_requests, busy)


def _release_requests(busy: list[tuple[SingletonTask, Any]]) -> None:
    for task, context in busy:
        _release_for(task, context, "the worker was shut down cold")
