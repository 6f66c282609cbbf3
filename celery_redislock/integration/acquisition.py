"""One execution's lock: take it (or one of its key's slots), take over a dead delivery of the
same message, wait for it; hold it under renewal; release it or hand it to the next run.

The decision only: what a task does when it is refused, or when Redis is unreachable (a
``redis.RedisError`` raised from here), is the outcome policies' business (``outcomes.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from sys import modules
from typing import Any, Union

from ..config.options import LockOptions
from ..engine import (
    AcquireResult,
    AcquireStatus,
    Lease,
    LeaseEngine,
    LockEngine,
    SemaphoreEngine,
    SemaphoreLease,
    SlotResult,
)
from ..engine.counting import TaskTallies, count
from ..engine.decision_record import LOCK_DECISION
from ..engine.holders import (
    QUEUED_SUFFIX,
    any_delivery_prefix,
    handover_id,
    holder_id,
    local_pid,
    queued_id,
    task_id_of,
)
from ..engine.leases import REDIS_ERRORS
from ..engine.redis_semaphore import take_slot
from ..engine.renewal import Renewer, get_renewer
from ..engine.waiting import wait_for
from .liveness import process_alive
from .mode import Mode
from .request_lock import RedisLockInfo, unwatch, watch
from .runtime import Runtime
from .tracing import TRACE_MODULE, recording_span, span_event

__all__ = [
    "Execution",
    "Holding",
    "Outcome",
    "Refused",
    "acquire",
    "hold",
    "lost_at_release",
    "release_queued",
]

logger = logging.getLogger(__name__)


class Execution:
    """Who asks for a key: one delivery of the message ``task_id`` (of task ``task_name``, its
    ``retries``-th re-publish) on worker node ``hostname``, with the task's resolved options and
    mode; ``holder``, its holder id, is drawn as it is made; ``tallies``, the task's counts
    (its plan's); ``request``, the running Celery request, where the glue has it.

    A plain class with slots, not a frozen dataclass: one is made per task, and a frozen
    dataclass's ``__init__`` costs four times as much (it sets each field through
    ``object.__setattr__``). Nothing changes its fields once made."""

    __slots__ = (
        "holder",
        "hostname",
        "key",
        "mode",
        "options",
        "request",
        "retries",
        "runtime",
        "tallies",
        "task_id",
        "task_name",
    )

    def __init__(
        self,
        runtime: Runtime,
        options: LockOptions,
        mode: Mode,
        key: str,
        task_name: str,
        task_id: str,
        hostname: str | None,
        retries: int = 0,
        tallies: TaskTallies | None = None,
        request: Any = None,
    ) -> None:
        self.runtime = runtime
        self.tallies = TaskTallies(task_name) if tallies is None else tallies
        self.request = request
        self.options = options
        self.mode = mode
        self.key = key
        self.task_name = task_name
        self.task_id = task_id
        self.hostname = hostname
        self.retries = retries
        self.holder = holder_id(task_id, hostname)

    def held_by_dead_delivery(self, holder: str) -> bool:
        """True when ``holder`` is this task id, taken by a process of this very worker instance
        (so its pid is one this process can see) that is gone. A holder of another instance with
        the same node name (another host or container) is never judged by its pid."""
        pid = local_pid(holder, self.task_id, self.hostname)
        return pid is not None and not process_alive(pid)

    def take_over_dead(self, holders: Iterable[str], engine: LeaseEngine | None = None) -> bool:
        """Free the first of ``holders`` (of its key, on ``engine``: the lock engine unless
        given) that is this very message delivered to a child of this worker that died: Celery
        re-queued it (``reject_on_worker_lost``) without telling anyone, so it is not a
        duplicate. True: one was freed, and the caller asks for the key again."""
        dead = next((holder for holder in holders if self.held_by_dead_delivery(holder)), None)
        if dead is None:
            return False
        runtime, key = self.runtime, self.key
        if engine is None:
            runtime.engine.release(key, dead)
        else:  # a semaphore's slot: executions may queue for it (on_duplicate="wait")
            engine.release(key, dead, notify=runtime.release_channel(key))
        # The parent was told nothing (Celery re-queued the message instead of failing it), so
        # this is the only trace of the dead child's lock: the same line the parent would log.
        count("released", task=self.task_name)
        logger.info(
            "Released lock %s of %s[%s]: its worker process died (holder %s; freed by its redelivery)",
            key,
            self.task_name,
            self.task_id,
            dead,
        )
        return True


@dataclass(frozen=True)
class Refused:
    """The key is held by ``holder``: another call (a duplicate), or another delivery of this
    very message (``redelivered``: re-queued to look again, never run beside it)."""

    holder: str
    redelivered: bool


class Holding:
    """What one execution holds, under renewal: its lock, or one of its key's slots.

    ``engine``: the runtime's lock engine, or its semaphore engine (max_concurrency > 1);
    ``info``: what the body sees of it (``request.redislock``); ``started``: when the run
    started (monotonic), a throttle's window counts from there; ``renewer``: the renewal
    timer of the process that took it (looked up once); ``mode``: the plan's mode, asked at
    release. A slots class: one is made per task.
    """

    __slots__ = (
        "engine",
        "info",
        "lease",
        "mode",
        "options",
        "renewer",
        "runtime",
        "span",
        "started",
        "tallies",
    )

    def __init__(
        self,
        runtime: Runtime,
        options: LockOptions,
        mode: Mode,
        engine: LeaseEngine,
        lease: Lease,
        info: RedisLockInfo,
        renewer: Renewer,
        span: Any = None,
        tallies: TaskTallies | None = None,
    ) -> None:
        self.runtime = runtime
        self.tallies = TaskTallies(info.task_name) if tallies is None else tallies
        self.span = span  # the task's span, where it was recording at the acquire
        self.options = options
        self.mode = mode
        self.engine = engine
        self.lease = lease
        self.info = info
        self.renewer = renewer
        self.started = time.monotonic()

    def release(self, hand_to: tuple[str, int] | None = None) -> None:
        """Release it, or hand it (``(holder id, TTL ms)``) to the next run of this task id."""
        engine, lease, runtime = self.engine, self.lease, self.runtime
        self.renewer.discard(engine, lease)
        unwatch(self.info)
        task = self.info.task_name
        try:
            if hand_to is not None:  # a lock (a semaphore's slot is never handed over)
                runtime.engine.transfer(lease.key, lease.holder, *hand_to)
                outcome = "handed_over"
            elif self.mode.on_release(self):  # released the mode's own way (a throttle's window)
                outcome = "mode"
            elif engine.release(
                # Published only where an execution of the task may be waiting for it (an
                # on_duplicate="wait" anywhere in its configuration).
                lease.key,
                lease.holder,
                notify=runtime.release_channel(lease.key) if runtime.waited_on(task) else None,
            ):
                self.tallies.released()
                outcome = "released"
            else:
                lost_at_release(lease)
                outcome = "lost"
            if self.span is not None:
                span_event(self.span, "release", task, lease.key, lease.holder, outcome)
        except REDIS_ERRORS as exc:
            count("redis_errors")
            if self.span is not None:
                span_event(self.span, "release", task, lease.key, lease.holder, "redis_error")
            logger.warning(
                "Could not release lock %s: %r; it expires in at most %ss",
                lease.key,
                exc,
                self.options.lock_timeout,
            )

    def cancel_hand_over(self, to: str) -> None:
        """Free a lock handed to ``to`` whose next run will not come (no retry was sent)."""
        try:
            self.runtime.engine.release(self.lease.key, to)
        except REDIS_ERRORS as exc:
            logger.warning("Could not release lock %s: %r; it expires on its TTL", self.lease.key, exc)


Outcome = Union[Holding, Refused]


def acquire(execution: Execution) -> Outcome:
    """Take the key for ``execution``; raises ``redis.RedisError`` when Redis is unreachable."""
    options = execution.options
    if options.max_concurrency > 1:
        return _acquire_slot(execution)
    runtime, key = execution.runtime, execution.key
    engine = runtime.engine
    if _take_free(execution, engine):  # the usual case: held at once, no result object between
        return _hold(execution, engine, Lease(key, execution.holder, options.timeout_ms))
    # Found held, or a lock taken at enqueue to take over, or fenced: the acquire script.
    result = _try_acquire(execution, expect_free=False)
    if not result.acquired and execution.take_over_dead((result.holder,)):
        result = _try_acquire(execution)
    redelivered = not result.acquired and task_id_of(result.holder) == execution.task_id
    if not result.acquired and not redelivered and execution.options.on_duplicate == "wait":
        result = _wait(execution)
    if not result.acquired:
        return Refused(result.holder, redelivered)
    return _hold(execution, engine, Lease(key, execution.holder, options.timeout_ms), result)


def lost_at_release(lease: Lease) -> None:
    """The key was no longer held by the run's holder when it ended."""
    logger.error("Lock %s was no longer held by %s at release (expired or taken)", lease.key, lease.holder)


def release_queued(runtime: Runtime, key: str, task_id: str) -> None:
    """``lock_until="started"``: free the task's own lock taken at enqueue. Compare-and-delete:
    a lock that is not ``{task id}@queued`` (another call's, after ours expired) stays."""
    if runtime.engine.release(key, queued_id(task_id), notify=runtime.release_channel(key)):
        count("released")


def _hold(
    execution: Execution, engine: LeaseEngine, lease: Lease, result: AcquireResult | None = None
) -> Holding:
    execution.tallies.acquired()
    span = recording_span(execution.task_name) if TRACE_MODULE in modules else None
    if span is not None:
        span_event(span, "acquire", execution.task_name, lease.key, lease.holder, "acquired")
    runtime = execution.runtime
    info = RedisLockInfo(
        lease.key,
        lease.holder,
        execution.task_name,
        execution.task_id,
        runtime.app,
        runtime.engine.client,
        # Fenced: the script issued a token, and told the server's time too.
        token=None if result is None else result.token,
        acquired_at=None if result is None else result.server_time,
    )
    watch(info)
    renewer = get_renewer()
    renewer.add(engine, lease, execution.options.renew_interval_s)
    return Holding(
        runtime, execution.options, execution.mode, engine, lease, info, renewer, span, execution.tallies
    )


def _try_acquire(execution: Execution, *, expect_free: bool = True) -> AcquireResult:
    # An execution takes over its own hand-over (a retry) and any lock taken at enqueue. A task
    # locked at enqueue finds its key held (by its own @queued lock): straight to the acquire
    # script, not a SET NX that must fail first.
    runtime, options = execution.runtime, execution.options
    if expect_free and _take_free(execution, runtime.engine):
        return AcquireResult(AcquireStatus.TAKEN, execution.holder)
    return runtime.engine.acquire(
        execution.key,
        execution.holder,
        options.timeout_ms,
        handover_id(execution.task_id),
        takeover_suffix=QUEUED_SUFFIX,
        expect_free=False,  # found held, a take-over expected, or fenced: the script
        fencing=options.fencing,
        record=runtime.noted(execution.task_id, LOCK_DECISION, *_refusal_fields(execution)),
    )


def _take_free(execution: Execution, engine: LockEngine) -> bool:
    """The usual case, a free key, taken by the SET NX alone (its record in the same write),
    before the acquire script's arguments are even built. Not for a task locked at enqueue (its
    key is held by its own @queued lock) nor a fenced one (only the script issues a token)."""
    options = execution.options
    if options.lock_on != "execute" or options.fencing:
        return False
    recorder = execution.runtime.recorder
    if recorder is None:
        return engine.take(execution.key, execution.holder, options.timeout_ms)
    quiet = recorder.take_quiet(execution.task_id, execution.key, execution.task_name)
    return engine.take(execution.key, execution.holder, options.timeout_ms, quiet)


def _refusal_fields(execution: Execution) -> tuple[str, str, str, str]:
    options = execution.options  # the record's fields: the key, what a refusal leads to, the retries
    return execution.key, options.on_duplicate, str(options.retry_countdown), str(execution.retries)


def _wait(execution: Execution) -> AcquireResult:
    """Wait up to acquire_timeout for the lock, woken by the holder's release notice."""
    result = wait_for(
        execution.runtime.engine.client,
        execution.runtime.release_channel(execution.key),
        lambda: _try_acquire(execution, expect_free=False),
        lambda r: r.acquired,
        execution.options.acquire_timeout,
    )
    if result.acquired:
        count("waited", task=execution.task_name)
    return result


def _acquire_slot(execution: Execution) -> Outcome:
    """``max_concurrency`` > 1: take one of the slots of the semaphore at the key; "wait"
    queues for one (served in arrival order), the other strategies never jump the queue."""
    runtime, options, key = execution.runtime, execution.options, execution.key
    engine = runtime.semaphores
    slot = _take_slot(engine, execution, blocking=False)
    if execution.take_over_dead(slot.holders, engine):
        slot = _take_slot(engine, execution, blocking=False)
    sibling = next((h for h in slot.holders if task_id_of(h) == execution.task_id), None)
    if sibling is not None:
        return Refused(sibling, redelivered=True)
    if not slot.acquired and options.on_duplicate == "wait" and options.acquire_timeout > 0:
        slot = _take_slot(engine, execution, blocking=True)
        if slot.acquired:
            count("waited", task=execution.task_name)
    if not slot.acquired:
        # Every slot held, or the free ones owed to executions queued (on_duplicate="wait").
        holders = ", ".join(slot.holders) or "executions queued first"
        return Refused(f"{holders} (max_concurrency={options.max_concurrency})", redelivered=False)
    lease = SemaphoreLease(key, execution.holder, options.timeout_ms, options.max_concurrency)
    return _hold(execution, engine, lease)


def _take_slot(engine: SemaphoreEngine, execution: Execution, *, blocking: bool) -> SlotResult:
    options = execution.options
    return take_slot(
        engine,
        execution.key,
        execution.holder,
        options.max_concurrency,
        options.timeout_ms,
        blocking=blocking,
        timeout=options.acquire_timeout,
        # Another delivery of this very message holding a slot is not a co-holder: it is
        # redelivered (see outcomes.on_redelivered).
        siblings=any_delivery_prefix(execution.task_id),
    )


# A mode that takes its lock its own way (keep_latest), then hold it as acquire() does.
hold = _hold
