"""SingletonTask: the Celery Task base class that runs a task's body under its lock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from celery import Celery, Task
from celery.exceptions import Retry

from ..config.arguments import KEY_HEADER, KeyBuilder
from ..config.options import LockOptions
from ..config.schema import OptionSpec, option_specs, watch_options
from ..engine.holders import handover_id, queued_id, task_id_of
from ..engine.leases import REDIS_ERRORS
from ..engine.timing import to_ms
from ..errors import DuplicateTaskError, RateLimitPaused
from ..waits.put_off import carried_headers, claim_copy
from . import outcomes
from . import sending as enqueue
from .acquisition import Execution, Holding, Refused
from .keywords import CELERY_NAMES, check_keywords
from .mode import Plan, Send, registered, registered_gates
from .plain import PlainMode  # noqa: F401  (imported: registers the default mode)
from .queues import QUEUE_FIELD
from .request_lock import UNLOCKED
from .runtime import Runtime, run_function, runtime_for, send_routes, task_options

__all__ = ["KEY_HEADER", "SingletonTask"]

logger = logging.getLogger(__name__)

#: The request attribute holding what the running execution holds (a ``Holding``).
HELD_FIELD = "redislock_held"
#: The request attribute a bound task's body reads its lock from (``held.RedisLockInfo``).
INFO_FIELD = "redislock"
#: The send route of a task that locks at execution: published as Celery publishes it.
PUBLISH = "publish"
#: The send route of any other: through its plan's mode (``Mode.send``).
PLANNED = "planned"


if TYPE_CHECKING:
    _TaskBase = Task[Any, Any]
else:  # Celery's Task is subscriptable at runtime only from 5.7 on
    _TaskBase = Task


class SingletonTask(_TaskBase):
    """A task that runs at most once at a time per name and arguments (or ``lock_key``).

    Every task option (``lock_timeout``, ``on_duplicate``..., and a registered mode's:
    ``throttle``, ``debounce``...) is an attribute of this class, declared once by its spec
    (``config.schema``) and None here: "ask the configuration". Given on the task
    (``@app.task(base=SingletonTask, lock_timeout=60)`` or a subclass attribute), it wins over
    ``redislock_queues[queue]`` and ``redislock_options``.
    """

    if TYPE_CHECKING:
        # What type checkers see of the options, which are set at runtime from their specs: one
        # line a spec, typed as its kind says (tests/unit/test_architecture.py checks both ways
        # and prints the lines a new option needs).
        lock_timeout: ClassVar[float | None]
        renew_interval: ClassVar[float | None]
        lock_key: ClassVar[list[str] | Callable[..., Any] | None]
        on_duplicate: ClassVar[str | None]
        acquire_timeout: ClassVar[float | None]
        retry_countdown: ClassVar[float | None]
        release_on_retry: ClassVar[bool | None]
        lock_on: ClassVar[str | None]
        queued_timeout: ClassVar[float | None]
        on_redis_error: ClassVar[str | None]
        max_concurrency: ClassVar[int | None]
        fencing: ClassVar[bool | None]
        skip_result: ClassVar[str | None]
        lock: ClassVar[bool | None]
        lock_until: ClassVar[str | None]
        throttle: ClassVar[float | None]
        keep_latest: ClassVar[bool | None]
        debounce: ClassVar[float | None]
        debounce_max: ClassVar[float | None]
        global_rate_limit: ClassVar[str | None]
        rate_limit_key: ClassVar[list[str] | Callable[..., Any] | None]
        rate_limits: ClassVar[list[str] | dict[str, list[str] | Callable[..., Any] | None] | None]
        rate_cost: ClassVar[int | Callable[..., Any] | dict[str, int | Callable[..., Any]] | None]
        fair_key: ClassVar[list[str] | Callable[..., Any] | None]
        fair_lanes: ClassVar[int | None]
        fair_weights: ClassVar[dict[str, int] | Callable[..., Any] | None]
        fair_cap: ClassVar[int | None]

    @classmethod
    def on_bound(cls, app: Celery) -> None:
        # Registration is where a bad option must surface, naming the task: validate the
        # task's own options and the argument names its options give (lock_key, a mode's
        # partition) against the body's signature now, and refuse keywords that were meant as
        # options but are not (typos, celery-once's).
        check_keywords(cls, SingletonTask)
        options = task_options(cls)
        name, body = str(cls.name or cls.__name__), run_function(cls)
        KeyBuilder("check", name, body, options.get("lock_key"))
        for spec in option_specs():
            if spec.names_arguments and options.get(spec.name) is not None:
                KeyBuilder("check", name, body, options[spec.name], option=spec.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if request.called_directly:  # task(...) as a plain function: no message, no lock
            return super().__call__(*args, **kwargs)
        runtime = runtime_for(self.app)
        # The request's own attributes (a Context keeps them in its __dict__): a getattr with
        # a default that misses raises and catches an AttributeError, twice a task.
        fields = vars(request)
        plan = runtime.plan(self, fields.get(QUEUE_FIELD))
        if plan.locked:
            # A task locked at enqueue (or re-published) carries its key: JSON may have changed
            # its arguments' types since. Kept on the request, so a retry carries it on.
            key = fields.get(KEY_HEADER) or plan.keys.key(args, kwargs, self)
            fields[KEY_HEADER] = key
            fields[INFO_FIELD] = None  # until it holds the lock: never while it runs unlocked
        else:  # lock=False: the gates only, no key to compute
            key = ""
            fields[INFO_FIELD] = UNLOCKED
        try:
            outcome = self._decide(request, runtime, plan, key)
        except outcomes.SkippedAsSuccess as skipped:
            # skip_result="success": returned, so Celery stores it and a chord or chain goes on.
            return skipped.value
        if outcome is not None:  # else unlocked: the mode says so (unique while queued only), or Redis
            fields[HELD_FIELD] = outcome
            fields[INFO_FIELD] = outcome.info
        if not plan.told:  # no gate to tell how the body ended: nothing timed
            try:
                return self.run(*args, **kwargs)
            finally:
                self._release_held(request=request)
        started = time.monotonic()
        try:
            result = self.run(*args, **kwargs)
        except RateLimitPaused as paused:
            for gate in plan.told:  # the rate limit re-queues the call for after the pause
                handle = getattr(gate, "on_paused", None)
                if handle is not None:
                    handle(self, runtime, plan.options, paused, time.monotonic() - started)
            raise  # no rate limit to pause: an error like any other
        except Exception as exc:
            self._report(plan, runtime, exc, started)
            raise
        else:
            self._report(plan, runtime, None, started)
            return result
        finally:
            self._release_held(request=request)

    def _report(self, plan: Plan, runtime: Runtime, error: BaseException | None, started: float) -> None:
        """Tell the plan's gates how the body ended (an adaptive limit learns from it). A report
        that fails (a ``rate_cost`` that raises) is logged: it never changes the call's outcome."""
        for gate in plan.told:
            handle = getattr(gate, "on_outcome", None)
            if handle is None:
                continue
            try:
                handle(self, runtime, plan.options, error, time.monotonic() - started)
            except Exception as exc:
                logger.warning("Could not report how %s[%s] ended: %r", self.name, self.request.id, exc)

    def _decide(self, request: Any, runtime: Runtime, plan: Plan, key: str) -> Holding | None:
        """The lock this call runs under, or None: it runs unlocked (``lock=False``, the mode says
        so, or Redis is unreachable and ``on_redis_error="run"``). Raises what ends the call otherwise (a
        skip, a retry, a failure). ``request``: the running request (looking it up again walks
        Celery's request stack)."""
        options, mode = plan.options, plan.mode
        try:
            execution = Execution(
                runtime,
                options,
                mode,
                key,
                self.name,
                str(request.id),
                request.hostname,
                request.retries,
                plan.tallies,
                request,
            )
            # A copy of a call put off, or one given out again: dropped if another is the live
            # one, or if its call has run (its record deleted) and has a result.
            if claim_copy(self, runtime, request):
                outcomes.drop_finished(self)
            for gate in plan.gates:  # a rate limit: may end the call here
                gate.admit(self, execution)
            mode.before_acquire(self, execution)
            if not plan.locked:
                return None
            outcome: Holding | Refused | None = mode.acquire(self, execution)
        except REDIS_ERRORS as exc:
            # "retry" re-queues it, "fail" fails it (both raise); "run" runs it unlocked.
            outcomes.on_redis_error(self, runtime.settings, options, key, exc)
            return None
        if isinstance(outcome, Refused):
            if outcome.redelivered:
                outcomes.on_redelivered(self, options, key, outcome.holder)
            mode.on_refused(self, options, key, outcome.holder)
        return outcome

    def _release_held(self, hand_to: tuple[str, int] | None = None, request: Any = None) -> None:
        """Release the execution's lock, or hand it (``(holder id, TTL ms)``) to the next run
        of this task id. ``request``: the running request, if the caller has it (looking it
        up again walks Celery's request stack)."""
        if request is None:
            request = self.request
        held: Holding | None = getattr(request, HELD_FIELD, None)
        if held is not None:
            setattr(request, HELD_FIELD, None)
            held.release(hand_to)

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
        # The retry message carries the key this execution used (never one recomputed from
        # arguments JSON has changed), and is published inside super().retry(): the lock is
        # freed or handed over first, or the retried run could arrive while this one holds it.
        key = getattr(self.request, KEY_HEADER, None)
        if key:
            inherited = {**carried_headers(self.request), **(options.get("headers") or {})}
            options["headers"] = {**inherited, KEY_HEADER: key}
        held: Holding | None = getattr(self.request, HELD_FIELD, None)
        expires = options.get("expires", self.request.expires)  # what the retry's message gets
        hand_to = None if held is None else self._retry_hand_to(held, eta, countdown, expires)
        self._release_held(hand_to)
        try:
            return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)
        except Retry:
            raise
        except BaseException:
            # No retry was sent (out of retries, publish failed): nobody will take it over.
            if held is not None and hand_to is not None:
                held.cancel_hand_over(hand_to[0])
            raise

    def _retry_hand_to(
        self, held: Holding, eta: Any, countdown: float | None, expires: Any = None
    ) -> tuple[str, int] | None:
        """Whom a retry hands the lock to, for how long; None: released.

        ``release_on_retry=False``: to ``{id}@handover``, which only this task id takes over.
        A task locked at enqueue: to ``{id}@queued``, as the retry's message is queued again,
        atomically, so no other call slips in between a release and a re-acquire. Either lives
        until the retry is due, plus the usual TTL; one queued again, never past the retry's
        ``expires``."""
        options, mode = held.options, held.mode
        queued_again = options.lock_on == "enqueue" and not self.request.is_eager  # eager: no queue
        # A mode may keep its lock across a retry (a throttle's window), as release_on_retry=False.
        keep = not options.release_on_retry or mode.retry_keeps_lock
        if options.max_concurrency > 1 or (not keep and not queued_again):
            return None
        if countdown is None and not eta:
            countdown = self.default_retry_delay  # what Celery's retry() falls back to
        delay_ms = to_ms(enqueue.seconds_until(countdown, eta, self.app.timezone), minimum=0)
        task_id = str(self.request.id)
        if keep:
            return handover_id(task_id), options.timeout_ms + delay_ms
        return queued_id(task_id), enqueue.queued_ttl_ms(options.queued_timeout_ms + delay_ms, expires)

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        *rest: Any,
        **options: Any,
    ) -> Any:
        """With ``lock_on="enqueue"``, take the lock before publishing: a new call whose key is
        already queued or running publishes nothing and returns the holder's AsyncResult
        (``enqueue.send``)."""
        route = self._send_route()
        if route == PUBLISH or rest or self.app.conf.task_always_eager:
            # Most tasks lock at execution: sending them needs no lock settings, no Redis.
            return super().apply_async(args, kwargs, task_id, *rest, **options)
        runtime, plan, queue = enqueue.send_plan(self, options, args, kwargs)
        call = Send(self, runtime, plan, super().apply_async, args, kwargs, task_id, options, queue)
        for gate in plan.gates:  # a gate may route what is published (fair share: to a lane)
            on_send = getattr(gate, "on_send", None)
            if on_send is not None:
                call = on_send(call)
        return plan.mode.send(call)

    def _send_route(self) -> str:
        """How ``apply_async`` sends this task: ``PUBLISH``, or ``PLANNED`` (through its plan's
        mode) when a mode's own ``send`` or a lock taken at enqueue may apply. Decided from the
        task's own options and the ``redislock_*`` layers, unresolved (the plan decides the
        rest), once a process (``reset_runtime`` forgets it with the settings): asked of
        Celery's settings, it cost a send 7 lookups."""
        routes = send_routes(self.app)
        route = routes.get(self.name)
        if route is None:
            planned = any(mode.sends_through(self) for mode in registered()) or any(
                getattr(gate, "sends_through", _never)(self) for gate in registered_gates()
            )
            route = PLANNED if planned or enqueue.may_lock_at_enqueue(self) else PUBLISH
            routes[self.name] = route
        return route

    def _refused_at_send(self, options: LockOptions, key: str, task_id: str, holder: str) -> Any:
        """A new call (``task_id``, not sent) whose key is held: the caller gets the holder's
        AsyncResult, or with ``on_duplicate="raise"`` a DuplicateTaskError (as celery-once's
        AlreadyQueued and celery-singleton's raise_on_duplicate do). The compat bases answer
        as their peers did."""
        if options.on_duplicate == "raise":
            raise DuplicateTaskError(self.name, task_id, key, holder, task_id_of(holder))
        return self.AsyncResult(task_id_of(holder))


def _never(task: Any) -> bool:
    return False


def _declare_option(spec: OptionSpec) -> None:
    """Make ``spec`` an attribute of the task class, None: "ask the configuration" (Celery's
    convention for a task's configurable attributes). An option named as a Celery task
    attribute or keyword would silently change what Celery does with it: refused."""
    if spec.name in CELERY_NAMES:
        raise ValueError(
            f"option {spec.name!r} of {spec.owner!r} is named as a Celery task attribute or keyword"
        )
    setattr(SingletonTask, spec.name, None)


# The lock's options now, each mode's as it registers.
watch_options(_declare_option)
