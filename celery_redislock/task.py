"""SingletonTask: the Celery Task base class that runs a task's body under its lock."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import redis
from celery import Celery, Task, states
from celery.backends.base import DisabledBackend
from celery.exceptions import Ignore, Retry
from celery.utils import uuid

from .engine import AcquireResult, Lease, LeaseEngine, SemaphoreEngine, SemaphoreLease, SlotResult
from .errors import DuplicateTaskError, LockUnavailableError
from .keys import KeyBuilder
from .options import LockOptions, mask_url
from .renewal import get_renewer
from .runtime import (
    QUEUED_SUFFIX,
    Plan,
    Runtime,
    any_delivery_prefix,
    check_keywords,
    handover_id,
    holder_id,
    holder_prefix,
    process_alive,
    queued_id,
    run_function,
    runtime_for,
    task_id_of,
    task_options,
)
from .semaphore import take_slot
from .stats import counters
from .waiting import wait_for

__all__ = ["SingletonTask"]

logger = logging.getLogger("celery_redislock.task")

#: Message header carrying the lock key of a task locked at enqueue.
KEY_HEADER = "redislock_key"

#: How the re-queued copy of a task that found Redis unreachable is published. Redis is often the
#: broker too, and then it is down just as long: Celery's default policy gives up within a second
#: and the task would be dropped (``Reject``). This one waits for the broker as long as it takes,
#: a WARNING per failed attempt, so the task is never lost.
BROKER_WAIT_INTERVAL_MAX = 5.0

# The "wait" strategy re-tries at least this often even without a release notice, in case the
# holder died and its lock expired (an expiry publishes nothing).
WAIT_FALLBACK_POLL = 1.0


@dataclass
class _Held:
    """The lock one execution holds: kept on the request so retry() and the end of the run find it."""

    runtime: Runtime
    lease: Lease
    options: LockOptions
    #: the runtime's lock engine, or its semaphore engine (max_concurrency > 1)
    engine: LeaseEngine


class SingletonTask(Task[Any, Any]):
    """A task that runs at most once at a time per name and arguments (or ``lock_key``).

    Options given here (``@app.task(base=SingletonTask, lock_timeout=60)`` or a subclass
    attribute) win over ``redislock_queues[queue]`` and ``redislock_options``; ``None`` means
    "ask the configuration".
    """

    #: Seconds the lock lives in Redis without renewal.
    lock_timeout: ClassVar[float | None] = None
    #: Seconds between renewals of a held lock (default ``lock_timeout / 3``).
    renew_interval: ClassVar[float | None] = None
    #: ``None`` (every argument), a list of argument names (``[]``: one run of the task at a
    #: time, whatever its arguments), or ``(task, args, kwargs) -> str``.
    lock_key: ClassVar[Any] = None
    #: ``"skip"``, ``"retry"``, ``"raise"`` or ``"wait"``.
    on_duplicate: ClassVar[str | None] = None
    #: Seconds ``"wait"`` waits for the holder.
    acquire_timeout: ClassVar[float | None] = None
    #: Countdown of a ``"retry"`` of a duplicate.
    retry_countdown: ClassVar[float | None] = None
    #: False keeps the lock across ``self.retry()``: the retried run takes it over.
    release_on_retry: ClassVar[bool | None] = None
    #: ``"execute"`` or ``"enqueue"``.
    lock_on: ClassVar[str | None] = None
    #: TTL of a lock taken at enqueue.
    queued_timeout: ClassVar[float | None] = None
    #: ``"retry"``, ``"run"`` or ``"fail"`` when Redis cannot be reached to take the lock.
    on_redis_error: ClassVar[str | None] = None
    #: Executions of one key allowed at once.
    max_concurrency: ClassVar[int | None] = None

    @classmethod
    def on_bound(cls, app: Celery) -> None:
        # Registration is where a bad option must surface, naming the task: validate the
        # task's own options and its lock_key names against the body's signature now, and
        # refuse keywords that were meant as options but are not (typos, celery-once's).
        check_keywords(cls, SingletonTask)
        options = task_options(cls)
        KeyBuilder("check", str(cls.name or cls.__name__), run_function(cls), options.get("lock_key"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.request.called_directly:  # task(...) as a plain function: no message, no lock
            return super().__call__(*args, **kwargs)
        runtime = runtime_for(self.app)
        plan = runtime.plan(self, getattr(self.request, "redislock_queue", None))
        # A task locked at enqueue carries its key: JSON may have changed its arguments' types.
        key = getattr(self.request, KEY_HEADER, None) or plan.key(self, args, kwargs)
        held = self._acquire(runtime, plan, key)
        if held is None:  # Redis unreachable and on_redis_error="run": logged in _acquire
            return self.run(*args, **kwargs)
        self.request.redislock_held = held  # type: ignore[attr-defined]
        try:
            return self.run(*args, **kwargs)
        finally:
            self._release_held()

    @property
    def _task_id(self) -> str:
        return str(self.request.id)

    # -- taking the lock ----------------------------------------------------------------

    def _acquire(self, runtime: Runtime, plan: Plan, key: str) -> _Held | None:
        options = plan.options
        request = self.request
        holder = holder_id(self._task_id, request.hostname)
        if request.retries and self._finished():
            # A re-queued copy (above) whose original has finished meanwhile: nothing to do.
            logger.info("Dropped redelivered %s[%s]: it has finished already", self.name, request.id)
            raise Ignore()
        if options.max_concurrency > 1:
            return self._acquire_slot(runtime, options, key, holder)
        try:
            result = self._try_acquire(runtime, options, key, holder)
            if not result.acquired and self._held_by_dead_delivery(result.holder):
                # This very message, from a child that died here; Celery re-queued it
                # (reject_on_worker_lost) without telling anyone: not a duplicate, take over.
                runtime.engine.release(key, result.holder)
                self._freed_dead_delivery(key, result.holder)
                result = self._try_acquire(runtime, options, key, holder)
            redelivered = not result.acquired and task_id_of(result.holder) == self._task_id
            if not result.acquired and not redelivered and options.on_duplicate == "wait":
                result = self._wait(runtime, options, key, holder)
        except redis.RedisError as exc:
            return self._on_redis_error(runtime, options, key, exc)
        if redelivered:
            self._on_redelivered(options, key, result.holder)  # raises
        if not result.acquired:
            self._on_duplicate(options, key, result.holder)  # raises
        return self._hold(runtime, options, runtime.engine, Lease(key, holder, options.timeout_ms))

    def _hold(self, runtime: Runtime, options: LockOptions, engine: LeaseEngine, lease: Lease) -> _Held:
        counters.incr("acquired")
        get_renewer().add(engine, lease, options.renew_interval_s)
        return _Held(runtime, lease, options, engine)

    def _acquire_slot(self, runtime: Runtime, options: LockOptions, key: str, holder: str) -> _Held | None:
        """``max_concurrency`` > 1: take one of the slots of the semaphore at ``key``; "wait"
        queues for one (served in arrival order), the other strategies never jump the queue."""
        engine = runtime.semaphores
        try:
            slot = self._take_slot(engine, options, key, holder, blocking=False)
            dead = next((h for h in slot.holders if self._held_by_dead_delivery(h)), None)
            if dead is not None:  # this very message, from a child that died here: not a duplicate
                engine.release(key, dead, notify=runtime.release_channel(key))
                self._freed_dead_delivery(key, dead)
                slot = self._take_slot(engine, options, key, holder, blocking=False)
            sibling = next((h for h in slot.holders if task_id_of(h) == self._task_id), None)
            if (
                sibling is None
                and not slot.acquired
                and options.on_duplicate == "wait"
                and options.acquire_timeout > 0
            ):
                slot = self._take_slot(engine, options, key, holder, blocking=True)
                if slot.acquired:
                    counters.incr("waited")
        except redis.RedisError as exc:
            return self._on_redis_error(runtime, options, key, exc)
        if sibling is not None:
            self._on_redelivered(options, key, sibling)  # raises
        if not slot.acquired:
            # Every slot held, or the free ones owed to executions queued (on_duplicate="wait").
            holders = ", ".join(slot.holders) or "executions queued first"
            self._on_duplicate(options, key, f"{holders} (max_concurrency={options.max_concurrency})")
        lease = SemaphoreLease(key, holder, options.timeout_ms, options.max_concurrency)
        return self._hold(runtime, options, engine, lease)

    def _take_slot(
        self, engine: SemaphoreEngine, options: LockOptions, key: str, holder: str, *, blocking: bool
    ) -> SlotResult:
        return take_slot(
            engine,
            key,
            holder,
            options.max_concurrency,
            options.timeout_ms,
            blocking=blocking,
            timeout=options.acquire_timeout,
            retry_delay=WAIT_FALLBACK_POLL,
            # Another delivery of this very message holding a slot is not a co-holder: see
            # _on_redelivered.
            siblings=any_delivery_prefix(self._task_id),
        )

    def _held_by_dead_delivery(self, holder: str) -> bool:
        """True when ``holder`` is this task id, on this worker node, in a process that is gone."""
        prefix = holder_prefix(self._task_id, self.request.hostname)
        if not holder.startswith(prefix):
            return False
        pid = holder[len(prefix) :].split(":", 1)[0]
        return pid.isdigit() and not process_alive(int(pid))

    def _freed_dead_delivery(self, key: str, holder: str) -> None:
        # The parent was told nothing (Celery re-queued the message instead of failing it), so
        # this is the only trace of the dead child's lock: the same line the parent would log.
        counters.incr("released")
        logger.info(
            "Released lock %s of %s[%s]: its worker process died (holder %s; freed by its redelivery)",
            key,
            self.name,
            self._task_id,
            holder,
        )

    def _try_acquire(self, runtime: Runtime, options: LockOptions, key: str, holder: str) -> AcquireResult:
        # An execution takes over its own hand-over (a retry) and any lock taken at enqueue.
        return runtime.engine.acquire(
            key, holder, options.timeout_ms, handover_id(self._task_id), takeover_suffix=QUEUED_SUFFIX
        )

    def _wait(self, runtime: Runtime, options: LockOptions, key: str, holder: str) -> AcquireResult:
        """Wait up to acquire_timeout for the lock, woken by the holder's release notice."""
        result = wait_for(
            runtime.engine.client,
            runtime.release_channel(key),
            lambda: self._try_acquire(runtime, options, key, holder),
            lambda r: r.acquired,
            options.acquire_timeout,
            WAIT_FALLBACK_POLL,
        )
        if result.acquired:
            counters.incr("waited")
        return result

    def _on_redelivered(self, options: LockOptions, key: str, holder: str) -> None:
        """Another delivery of this very message holds the lock: a copy given out again by the
        Redis broker's visibility timeout while the original runs, or a message re-queued after
        its child died on another worker (whose lock only expires). Not run now; not dropped
        either, since the holder may never finish: re-queued to look again once the lock may have
        moved, and dropped then if that task id has finished meanwhile."""
        request = self.request
        error = DuplicateTaskError(self.name, self._task_id, key, holder)
        if request.is_eager:
            self._skip(error)
        counters.incr("retried")
        countdown = options.renew_interval_s
        logger.info(
            "Re-queued redelivered %s[%s] in %ss: %s is held by its other delivery %s",
            self.name,
            request.id,
            countdown,
            key,
            holder,
        )
        # Published like a retry (same task id, waits for the broker), but no RETRY state is
        # stored: that would overwrite the result the holder may store in the meantime.
        self.retry(
            countdown=countdown,
            exc=error,
            throw=False,
            max_retries=sys.maxsize,
            retry_policy=self._broker_wait_policy(),
        )
        raise Ignore()

    def _finished(self) -> bool:
        """Whether this task id already has a final result (a re-queued copy is then dropped)."""
        if self.ignore_result or isinstance(self.backend, DisabledBackend):
            return False
        try:
            state = self.backend.get_task_meta(self._task_id).get("status")
        except Exception as exc:  # the result store is not the lock's business: run it
            logger.warning("Could not read the state of %s[%s]: %r", self.name, self._task_id, exc)
            return False
        return state in states.READY_STATES

    def _on_duplicate(self, options: LockOptions, key: str, holder: str) -> None:
        request = self.request
        error = DuplicateTaskError(self.name, self._task_id, key, holder)
        strategy = options.on_duplicate
        if strategy == "raise":
            counters.incr("skipped")
            raise error
        # Out of retries (or eager, where nothing can be re-queued) it ends as a skip.
        retries_left = self.max_retries is None or request.retries < self.max_retries
        if strategy == "retry" and retries_left and not request.is_eager:
            counters.incr("retried")
            logger.info(
                "Retrying duplicate %s[%s] in %ss: %s is held by %s",
                self.name,
                request.id,
                options.retry_countdown,
                key,
                holder,
            )
            raise self.retry(countdown=options.retry_countdown, exc=error)
        self._skip(error)

    def _skip(self, error: DuplicateTaskError) -> None:
        """Not run: one INFO line, a FAILURE result naming the holder so a waiting caller
        (and a chord) is answered at once, and no on_failure / task_failure."""
        counters.incr("skipped")
        request = self.request
        logger.info(
            "Skipped duplicate %s[%s]: %s is held by %s", self.name, request.id, error.key, error.holder
        )
        if request.is_eager:
            raise error  # no backend to store in: the EagerResult carries the error
        if not self.ignore_result or request.chord:
            self.backend.mark_as_failure(self._task_id, error, request=request, call_errbacks=False)
        raise Ignore()

    def _on_redis_error(
        self, runtime: Runtime, options: LockOptions, key: str, exc: redis.RedisError
    ) -> _Held | None:
        counters.incr("redis_errors")
        url = mask_url(runtime.settings.url)
        policy = options.on_redis_error
        request = self.request
        if policy == "run":
            logger.warning(
                "Running %s[%s] without its lock: Redis at %s is unreachable (%r)",
                self.name,
                request.id,
                url,
                exc,
            )
            return None
        error = LockUnavailableError(self.name, self._task_id, key, url, exc)
        if policy == "retry" and not request.is_eager:
            logger.warning(
                "Retrying %s[%s] in %ss: %s", self.name, request.id, options.retry_countdown, error
            )
            # Not bounded by the task's max_retries: it has not run yet, and running out of
            # retries would drop it. (These retries still count in request.retries.)
            raise self.retry(
                countdown=options.retry_countdown,
                exc=error,
                max_retries=sys.maxsize,
                retry_policy=self._broker_wait_policy(),
            ) from exc
        raise error from exc

    def _broker_wait_policy(self) -> dict[str, Any]:
        """A publish retry policy that waits for an unreachable broker until it is back."""
        name, task_id = self.name, self._task_id

        def errback(exc: BaseException, interval: float) -> None:
            logger.warning(
                "Could not re-queue %s[%s]: the broker is unreachable (%r); trying again in %.1fs",
                name,
                task_id,
                exc,
                interval,
            )

        return {
            "max_retries": None,  # kombu's Connection.ensure: retry for ever
            "interval_start": 0.2,
            "interval_step": 0.5,
            "interval_max": BROKER_WAIT_INTERVAL_MAX,
            "errback": errback,
        }

    # -- releasing it ---------------------------------------------------------------------

    def _release_held(self, handover_ttl_ms: int | None = None) -> None:
        """Release the execution's lock, or hand it over to the next run of this task id."""
        held: _Held | None = getattr(self.request, "redislock_held", None)
        if held is None:
            return
        self.request.redislock_held = None  # type: ignore[attr-defined]
        engine, lease = held.engine, held.lease
        get_renewer().discard(engine, lease)
        try:
            if handover_ttl_ms is not None:  # a lock (a semaphore's slot is never handed over)
                held.runtime.engine.transfer(
                    lease.key, lease.holder, handover_id(self._task_id), handover_ttl_ms
                )
            elif engine.release(lease.key, lease.holder, notify=held.runtime.release_channel(lease.key)):
                counters.incr("released")
            else:
                logger.error(
                    "Lock %s was no longer held by %s at release (expired or taken)", lease.key, lease.holder
                )
        except redis.RedisError as exc:
            counters.incr("redis_errors")
            logger.warning(
                "Could not release lock %s: %r; it expires in at most %ss",
                lease.key,
                exc,
                held.options.lock_timeout,
            )

    def retry(
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: Exception | None = None,
        throw: bool = True,
        eta: Any = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Any:
        # The retry message is published inside super().retry(): free (or hand over) the
        # lock first, or the retried run could arrive while this one still holds it.
        held: _Held | None = getattr(self.request, "redislock_held", None)
        if held is None or held.options.release_on_retry:
            self._release_held()
            return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)
        delay = countdown if countdown is not None else self.default_retry_delay or 0
        self._release_held(handover_ttl_ms=held.options.timeout_ms + int(delay * 1000))
        try:
            return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)
        except Retry:
            raise
        except BaseException:
            # No retry was sent (out of retries, publish failed): nobody will take it over.
            self._release_handover(held)
            raise

    def _release_handover(self, held: _Held) -> None:
        try:
            held.runtime.engine.release(held.lease.key, handover_id(self._task_id))
        except redis.RedisError as exc:
            logger.warning("Could not release lock %s: %r; it expires on its TTL", held.lease.key, exc)

    # -- locking at enqueue ---------------------------------------------------------------

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        *rest: Any,
        **options: Any,
    ) -> Any:
        """With ``lock_on="enqueue"``, take the lock before publishing: a call whose key is
        already queued or running publishes nothing and returns the holder's AsyncResult, or
        raises DuplicateTaskError with ``on_duplicate="raise"``."""
        if not self._may_lock_at_enqueue() or self.app.conf.task_always_eager or rest:
            # Most tasks lock at execution: sending them needs no lock settings, no Redis.
            return super().apply_async(args, kwargs, task_id, *rest, **options)
        queue = options.get("queue")
        queue_name = getattr(queue, "name", queue)
        runtime = runtime_for(self.app)
        plan = runtime.plan(self, queue_name if isinstance(queue_name, str) else None)
        if plan.options.lock_on != "enqueue" or self.app.conf.task_always_eager or rest:
            return super().apply_async(args, kwargs, task_id, *rest, **options)
        task_id = task_id or uuid()
        key = plan.key(self, tuple(args or ()), dict(kwargs or {}))
        queued = queued_id(task_id)
        try:
            result = runtime.engine.acquire(key, queued, plan.options.queued_timeout_ms, handover_id(task_id))
        except redis.RedisError as exc:
            return self._enqueue_unlocked(runtime, plan.options, key, task_id, exc, args, kwargs, options)
        if not result.acquired:
            return self._refused_at_send(plan.options, key, task_id, result.holder)
        headers = {**(options.pop("headers", None) or {}), KEY_HEADER: key}
        try:
            return super().apply_async(args, kwargs, task_id, headers=headers, **options)
        except BaseException:
            # Nothing was sent: nobody will take the lock over.
            runtime.engine.release(key, queued)
            raise

    def _refused_at_send(self, options: LockOptions, key: str, task_id: str, holder: str) -> Any:
        """A send refused by the enqueue lock: nothing is published. The caller gets the holder's
        AsyncResult, or with ``on_duplicate="raise"`` a DuplicateTaskError (as celery-once's
        AlreadyQueued and celery-singleton's raise_on_duplicate do)."""
        holder_task = task_id_of(holder)
        if holder_task == task_id:
            # The same task id re-sent (a retry, a re-queue): not a duplicate of another call.
            logger.info("Not sending %s[%s] again: %s is held by %s", self.name, task_id, key, holder)
            return self.AsyncResult(holder_task)
        counters.incr("refused_at_send")
        logger.info("Not sending duplicate %s: %s is held by %s", self.name, key, holder)
        if options.on_duplicate == "raise":
            raise DuplicateTaskError(self.name, task_id, key, holder)
        return self.AsyncResult(holder_task)

    def _may_lock_at_enqueue(self) -> bool:
        """False when no layer can make this task lock at enqueue (the resolved plan decides
        the rest): the task's own setting wins, else any app or queue layer may ask for it."""
        if self.lock_on is not None:
            return self.lock_on == "enqueue"
        conf = self.app.conf
        layers = [conf.get("redislock_options"), *(conf.get("redislock_queues") or {}).values()]
        return any(isinstance(layer, Mapping) and layer.get("lock_on") == "enqueue" for layer in layers)

    def _enqueue_unlocked(
        self,
        runtime: Runtime,
        options: LockOptions,
        key: str,
        task_id: str,
        exc: redis.RedisError,
        args: Any,
        kwargs: Any,
        send_options: dict[str, Any],
    ) -> Any:
        counters.incr("redis_errors")
        url = mask_url(runtime.settings.url)
        if options.on_redis_error == "fail":
            raise LockUnavailableError(self.name, task_id, key, url, exc) from exc
        # "retry" and "run": send it anyway; the worker takes the lock when it runs it.
        logger.warning(
            "Sending %s[%s] without an enqueue lock: Redis at %s is unreachable (%r)",
            self.name,
            task_id,
            url,
            exc,
        )
        return super().apply_async(args, kwargs, task_id, **send_options)
