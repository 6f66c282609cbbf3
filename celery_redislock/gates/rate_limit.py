"""``global_rate_limit="N/s|m|h"`` (with ``rate_limit_key``, the partition): at most N starts per
period of a partition, across every worker, pool and process, decided by the Redis server's clock
(``engine.rate_limiter``: a sliding-window log). A gate: it composes with the lock and whatever mode
the task has, and is asked before them.

A call over the limit is not run and not dropped: it reserves the next free slot (no later call
takes it) and is put off until then (``waits.put_off``: same task id and arguments, its
``request.retries`` unchanged, not bounded by ``max_retries``), so its result still reaches the
caller. A wait shorter than the broker carries (``waits.broker_delay.shortest_broker_wait``) is
waited out in the worker instead: a re-published call is due ``COME_BACK_EARLY`` before its slot
(up to a second before on native delayed delivery) and waits out the rest, so it starts on time. A wait longer
than the broker holds a message safely (``redislock_max_postpone``) is made of hops: the call
comes back early and goes back again, keeping its reservation.

Each re-published copy carries a fresh hop token (``HOP_HEADER``) and its partition's log
(``LOG_HEADER``; every limit of a call of several in ``LIMITS_HEADER``): a copy the broker gave out
twice is told apart and dropped, and a copy revoked or expired in the worker gives its slot back
(``give_back``: as the worker's ``revoke`` command comes, ``integration.revoked_waiting``, and
on ``task_revoked``).

Named limits (``rate_limits``, declared in ``redislock_limits`` or ``declare_limit``) and a cost
per call (``rate_cost``) go through the same gate: a call's limits are decided in one script
call (``rate_calls`` says which). A body that raises ``RateLimitPaused`` (or calls
``self.request.redislock.pause``, which raises it) pauses them on every worker, and its call
is re-queued for after the pause the way a postponed call is (``on_paused``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from celery.signals import task_revoked
from celery.utils.dispatch import Signal

from ..config.limits import check_rate_cost, check_rate_limits
from ..config.mode_rules import Clash
from ..config.options import LockOptions, check_lock_key
from ..config.schema import OptionSpec
from ..engine.counting import count
from ..engine.leases import REDIS_ERRORS
from ..engine.rate_decisions import cancel_limits, decide_limits, pause_limits
from ..engine.rates import optional_rate
from ..engine.timing import to_ms
from ..errors import RateLimitPaused
from ..integration.acquisition import Execution
from ..integration.outcomes import finished, redelivered
from ..integration.revoked_waiting import waiting_revoked
from ..integration.runtime import Runtime, runtime_for
from ..waits.broker_delay import shortest_broker_wait
from ..waits.due import started
from .rate_calls import (
    HOP_HEADER,
    LIMITS_HEADER,
    LOG_HEADER,
    PAUSES_HEADER,
    RATE_SUFFIX,
    LimitResolver,
    limits_of_message,
    pauses_of,
    rate_key,
)
from .rate_explain import PAUSE_DECISION, RATE_DECISION
from .rate_in_flight import held_flights, take_in_flight
from .rate_inventory import LIMIT_SUFFIX, describe_limit_key, describe_rate_key, named_keys
from .rate_postpone import COME_BACK_EARLY, drop_copy, postpone
from .rate_reports import report_outcome, report_overload
from .rate_signals import SIGNALS, send_rate_paused

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = [
    "COME_BACK_EARLY",
    "GATE",
    "HOP_HEADER",
    "LIMITS_HEADER",
    "LOG_HEADER",
    "PAUSES_HEADER",
    "RateLimitGate",
    "give_back",
    "rate_key",
]

logger = logging.getLogger(__name__)


class RateLimitGate:
    name: ClassVar[str] = "rate_limit"
    options: ClassVar[tuple[OptionSpec, ...]] = (
        OptionSpec(
            "global_rate_limit",
            None,
            optional_rate,
            "At most N starts per period of a partition, across every worker: ``'N/s'``, ``'N/m'`` "
            "or ``'N/h'``. A call over it is re-queued for its slot, never dropped.",
            "str | None",
            "rate_limit",
        ),
        OptionSpec(
            "rate_limit_key",
            None,
            check_lock_key,
            "The partition of ``global_rate_limit``: None (one limit for the task), a list of "
            "argument names, or ``(task, args, kwargs) -> str``.",
            "list[str] | callable | None",
            "rate_limit",
            names_arguments=True,
        ),
        OptionSpec(
            "rate_limits",
            None,
            check_rate_limits,
            "Named limits (declared in ``redislock_limits`` or by ``declare_limit``) every call must "
            "fit: a list of names, or a dict of name -> its partition (None, argument names, or "
            "``(task, args, kwargs) -> str``). A call starts only when all admit it.",
            "list[str] | dict[str, list[str] | callable | None] | None",
            "rate_limit",
        ),
        OptionSpec(
            "rate_cost",
            None,
            check_rate_cost,
            "Units of its limits a call costs: an int, ``(task, args, kwargs) -> int``, or a dict of "
            "limit name -> either (None: 1). More than a limit admits at once fails the call.",
            "int | callable | dict[str, int | callable] | None",
            "rate_limit",
        ),
    )
    counters: ClassVar[Mapping[str, str]] = {
        "rate_limited": "calls over their ``global_rate_limit``, re-queued for their slot (once a "
        "call: its later hops are not counted)",
        "rate_copies_dropped": "second copies of a postponed call dropped (a broker gave one out twice)",
        "rate_paused": "pauses of rate limits raised by a task body (``RateLimitPaused``), its call re-queued",
        "rate_over_runtime": "decisions that re-queued a call costing more than a runtime rate of its limits "
        "admits at once (``limit set``), to ask again until the limit admits it",
    }
    #: A partition's log, beside its partition key (``describe_key`` reads its state).
    key_suffixes: ClassVar[Mapping[str, str]] = {RATE_SUFFIX: "rate limit", LIMIT_SUFFIX: "named limit"}
    signals: ClassVar[Mapping[str, Signal]] = SIGNALS

    def __init__(self) -> None:
        self.limits = LimitResolver()

    def selects(self, options: LockOptions) -> bool:
        return options.value("global_rate_limit") is not None or options.value("rate_limits") is not None

    def check_plan(self, runtime: Runtime, task: Any, options: LockOptions) -> None:
        """Named limits the app does not declare are refused when the plan is made (at worker
        start, naming the task)."""
        self.limits.check_plan(runtime, task, options)

    def clash(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
        """A start is counted when the call is admitted, before the mode and the lock: calls
        that would be admitted and then wait, or be admitted again and again without running,
        make no sense with it. ``on_duplicate="wait"`` would start a call later than counted
        (the limit could be passed); debounce's superseded calls and keep_latest's pending ones
        would use up the limit before they are dropped."""
        option = next(
            (name for name in ("global_rate_limit", "rate_limits") if options.get(name) is not None), None
        )
        if option is None:
            return None
        if options.get("on_duplicate") == "wait":
            problem = (
                "cannot be used with on_duplicate='wait' (a call waiting for its key would start "
                "later than its start is counted: use 'retry' or 'skip')"
            )
            return option, problem, "on_duplicate"
        for mode, why in (
            ("debounce", "a burst's superseded calls would use up the limit before they are skipped"),
            ("keep_latest", "a pending call would use up the limit each time it looks again"),
        ):
            if options.get(mode):
                return mode, f"cannot be used with {option} ({why})", option
        return None

    def admit(self, task: AnyTask, execution: Execution) -> None:
        """Let the call start now, or re-publish it for its reserved slot (raises ``Ignore``), or
        drop it when it is a second copy of a call (raises ``Ignore``). Raises
        ``redis.RedisError`` when Redis is unreachable (``on_redis_error`` applies)."""
        calls = self.limits.of(task, execution.runtime, execution.options)
        key = calls.home
        scripts = execution.runtime.scripts
        request = task.request
        token = vars(request).get(HOP_HEADER) or ""
        if redelivered(request) and finished(task):
            # Given out again (its worker died before the ack) after another copy of it ran: that
            # start may have left the log (kept one period), where the decision would not see it.
            drop_copy(task, execution, key, "it has run already")
        while True:
            hop = uuid.uuid4().hex
            decision = decide_limits(
                scripts,
                calls.limits,
                execution.task_id,
                reserve=True,
                attempt=execution.retries,
                pauses=pauses_of(request),
                token=token,
                next_token=hop,
                cost=calls.costs,
                source=calls.source,
                record=execution.runtime.noted(execution.task_id, RATE_DECISION),
            )
            if decision.allowed:
                started(task, decision.now_ms)  # a postponed call: how late after its slot
                break
            if decision.status == "started":
                if finished(task):
                    drop_copy(task, execution, key, "it has run already")
                # Its run started and has no result: its process may have died mid-run, or it
                # waited for an in-flight slot. The lock decides (a live holder re-queues it),
                # its start is not counted again.
                break
            if decision.status == "held":
                drop_copy(task, execution, key, "another copy of it holds its slot")
            # Eager: nothing to re-queue. A wait the broker cannot carry is waited out here; a
            # call over a runtime rate may wait as long as the override lasts: never in a worker.
            over = decision.status == "over"
            if (over or decision.wait > shortest_broker_wait(task.app)) and not request.is_eager:
                postpone(task, execution.runtime, calls, decision, token, hop)
            time.sleep(decision.wait)
        take_in_flight(task, execution, calls)  # admitted by its rates: now its calls at once

    def partition(self, task: AnyTask, execution: Execution) -> str:
        """The Redis key of the log of the running call's ``global_rate_limit`` partition."""
        return self.limits.of(task, execution.runtime, execution.options).home

    def on_outcome(
        self,
        task: AnyTask,
        runtime: Runtime,
        options: LockOptions,
        error: BaseException | None,
        elapsed: float,
    ) -> None:
        """The body ended after ``elapsed`` seconds (``error``: what it raised, None: it
        returned): reported to the call's adaptive limits (``rate_reports``)."""
        report_outcome(self.limits, task, runtime, options, error, elapsed)

    def on_paused(
        self,
        task: AnyTask,
        runtime: Runtime,
        options: LockOptions,
        paused: RateLimitPaused,
        elapsed: float = 0.0,
    ) -> NoReturn:
        """The body raised ``paused``: pause its limits (those it names, else all the call's) on
        the server's clock, then re-queue the call for a slot after the pause, as a postponed
        call is (a new attempt: its start before the pause does not count for it). Logged,
        counted ``rate_paused``. Raises ``Ignore``; re-raises ``paused`` for an eager call."""
        request = task.request
        task_id = str(request.id)
        calls = self.limits.of(task, runtime, options)
        chosen = calls.named(paused.limits)
        scripts = runtime.scripts
        end = pause_limits(scripts, chosen, paused.retry_after, calls.source)
        # An overload of its adaptive limits too: their rate is cut before the call is re-queued.
        why = f"RateLimitPaused (retry after {paused.retry_after:g}s)"
        report_overload(self.limits, task, runtime, options, chosen, elapsed, why)
        count("rate_paused")
        send_rate_paused(
            task,
            task_id,
            [limit.name for limit in chosen],
            [limit.key for limit in chosen],
            paused.retry_after,
        )
        names = ", ".join(limit.label for limit in chosen)
        logger.warning(
            "Paused rate limit(s) %s for %.3fs: %s[%s] raised RateLimitPaused; re-queued for after the pause",
            names,
            paused.retry_after,
            task.name,
            task_id,
        )
        if request.is_eager:  # nothing to re-queue
            raise paused
        pauses = pauses_of(request) + 1
        vars(request)[PAUSES_HEADER] = pauses
        token = vars(request).get(HOP_HEADER) or ""
        hop = uuid.uuid4().hex
        decision = decide_limits(
            scripts,
            calls.limits,
            task_id,
            reserve=True,
            attempt=request.retries,
            pauses=pauses,
            token=token,
            next_token=hop,
            cost=calls.costs,
            source=calls.source,
            record=runtime.noted(task_id, PAUSE_DECISION, str(to_ms(end))),
        )
        logger.debug("%s[%s] re-queued after the pause ending at %.3f (server time)", task.name, task_id, end)
        postpone(task, runtime, calls, decision, token, hop, paused=True)

    def held_slots(
        self, runtime: Runtime, task: Any, options: LockOptions, context: Any
    ) -> list[tuple[str, str]]:
        """``(key, name)`` of the in-flight slots a running call (its request's ``context``) took
        by its execution's holder id, which the worker's parent gives back for a child that died
        holding them (``parent_release``)."""
        return held_flights(self.limits, runtime, task, options, context)

    def describe_key(
        self, runtime: Runtime, key: str, task_name: str, suffix: str, value: str | None
    ) -> str | None:
        """A ``global_rate_limit`` partition's log, or a named limit's partition (``other_keys``)."""
        if suffix == LIMIT_SUFFIX:
            return describe_limit_key(runtime, key)
        return describe_rate_key(runtime, key, task_name)

    def other_keys(self, runtime: Runtime, task: str | None) -> Iterator[tuple[str, str, str]]:
        """The partitions of the app's named limits (of those ``task`` names): not beside a lock
        key, under the app's one named-limit tag."""
        return named_keys(runtime, task)


@task_revoked.connect
def give_back(sender: Any = None, request: Any = None, **info: Any) -> None:
    """A postponed call revoked, or expired, in the worker that holds its message: give its slot
    back in every limit it waits in (its message names them; any other call has no slot). Sent
    as the revoke reaches the worker (``waiting_revoked``), and again by Celery at the call's ETA,
    which then finds nothing to give back."""
    key = getattr(request, LOG_HEADER, None)
    if not isinstance(key, str) or not key or sender is None:
        return
    task_id = str(request.id)
    try:
        scripts = runtime_for(sender.app).scripts
        limits, costs = limits_of_message(request, key)
        if cancel_limits(scripts, limits, task_id, getattr(request, HOP_HEADER, None) or "", cost=costs):
            why = "expired" if info.get("expired") else "revoked"
            logger.info("Gave back the slot of %s rate-limited %s[%s] in %s", why, sender.name, task_id, key)
    except REDIS_ERRORS as exc:  # a signal handler must not break the worker's revoke handling
        count("redis_errors")
        logger.warning("Could not give back the slot of %s[%s] in %s: %r", sender.name, task_id, key, exc)


# A revoked call waiting for its ETA holds no slot from the moment its worker knows.
waiting_revoked.connect(give_back)

GATE = RateLimitGate()
