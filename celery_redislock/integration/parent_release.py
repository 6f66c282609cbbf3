"""Freeing, from the worker's parent, the lock a pool child held for a request it can no longer
release itself: the child died, was terminated or was killed at its hard time limit. Only that
child's: two deliveries of one message (a copy redelivered after the broker's visibility
timeout) can hold the same task id's lock in two children, one of them alive."""

from __future__ import annotations

import logging
from typing import Any

from ..config.arguments import KEY_HEADER
from ..engine.counting import count
from ..engine.holders import holder_prefix, local_pid
from ..engine.leases import REDIS_ERRORS, LeaseEngine
from .liveness import process_alive
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
    """Free the lock (or semaphore slot) a pool process held for ``context`` (its request) and
    can no longer release itself, and the slots its gates took by the same holder id (its
    tenant's ``fair_cap``). Given ``pid`` (the process Celery says died, or that the pool is
    ending), only the holders of that process; without, only those of this task id on this
    worker instance whose process no longer runs: another delivery of the same message may hold
    them in a live process. True when something was freed."""
    try:
        runtime = runtime_for(task.app)
        plan = runtime.plan(task, getattr(context, QUEUE_FIELD, None))
        freed = False
        if plan.locked:  # lock=False: no lock, but maybe its gates' slots
            key = lock_key(task, context)
            engine = runtime.engine_for(plan.options)  # a lock, or a semaphore's slots
            for reason in _free(engine, key, context, pid, why, runtime.release_channel(key)):
                count("released", task=task.name)
                count("released_by_parent", task=task.name)
                logger.info("Released lock %s of %s[%s]: %s", key, task.name, context.id, reason)
                freed = True
        for gate in plan.gates:
            held_slots = getattr(gate, "held_slots", None)
            # A gate's semaphore slot is taken by the same holder id as the lock: freed the same way.
            for key, name in held_slots(runtime, task, plan.options, context) if held_slots else ():
                for reason in _free(runtime.semaphores, key, context, pid, why):
                    logger.info(
                        "Gave back %s slot %s of %s[%s]: %s", name, key, task.name, context.id, reason
                    )
                    freed = True
        return freed
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


def _free(
    engine: LeaseEngine, key: str, context: Any, pid: int | None, why: str, notify: str | None = None
) -> list[str]:
    """Free the holders of ``key`` that the delivery ``context`` took in process ``pid`` (or in
    any of its processes that no longer run); what the log says of each freed."""
    task_id, hostname = str(context.id), context.hostname
    return [
        reason
        for dead, reason in _processes(engine, key, task_id, hostname, pid, why)
        if engine.release_holder_prefix(key, holder_prefix(task_id, hostname, dead), notify=notify)
    ]


def _processes(
    engine: LeaseEngine, key: str, task_id: str, hostname: str | None, pid: int | None, why: str
) -> list[tuple[int, str]]:
    """The processes whose holders of ``task_id`` to free, each with what the log says of it:
    ``pid``, or those of the current holders that no longer run (read, then each freed by a
    compare on the server, so a holder taken meanwhile by a live process is never matched)."""
    if pid is not None:
        return [(pid, why)]
    pids = {local_pid(holder, task_id, hostname) for holder in engine.holders(key)}
    return [
        (dead, f"{why} (pid {dead})")
        for dead in sorted(p for p in pids if p is not None and not process_alive(p))
    ]
