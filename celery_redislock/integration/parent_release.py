"""Freeing, from the worker's parent, the lock a pool child held for a request it can no longer
release itself: the child died, was terminated or was killed at its hard time limit."""

from __future__ import annotations

import logging
from typing import Any

from ..config.arguments import KEY_HEADER
from ..engine.counting import count
from ..engine.holders import holder_prefix
from ..engine.leases import REDIS_ERRORS
from .queues import QUEUE_FIELD
from .runtime import runtime_for
from .task import SingletonTask

__all__ = ["lock_key", "release_for"]

logger = logging.getLogger(__name__)


def lock_key(task: SingletonTask, context: Any) -> str:
    """The key a request's execution locks: the one its message carries, else computed from its
    arguments as the execution did."""
    carried = getattr(context, KEY_HEADER, None)
    if isinstance(carried, str) and carried:
        return carried
    plan = runtime_for(task.app).plan(task, getattr(context, QUEUE_FIELD, None))
    return plan.key(task, context.args or (), context.kwargs or {})


def release_for(task: SingletonTask, context: Any, why: str, pid: int | None = None) -> bool:
    """Free the lock (or semaphore slot) a child held for ``context`` (its request): any holder
    of its task id on this worker instance, or, given ``pid``, only that process's. True when
    something was freed."""
    try:
        runtime = runtime_for(task.app)
        plan = runtime.plan(task, getattr(context, QUEUE_FIELD, None))
        key = lock_key(task, context)
        prefix = holder_prefix(str(context.id), context.hostname, pid)
        engine = runtime.engine_for(plan.options)  # a lock, or a semaphore's slots
        if engine.release_holder_prefix(key, prefix, notify=runtime.release_channel(key)):
            count("released")
            logger.info("Released lock %s of %s[%s]: %s", key, task.name, context.id, why)
            return True
    except REDIS_ERRORS as exc:
        count("redis_errors")
        logger.warning(
            "Could not release the lock of %s[%s] (%s): %r; it expires on its TTL",
            task.name,
            context.id,
            why,
            exc,
        )
    except Exception:  # a signal handler must not break the worker's failure handling
        logger.exception("Could not release the lock of %s[%s] (%s)", task.name, context.id, why)
    return False
