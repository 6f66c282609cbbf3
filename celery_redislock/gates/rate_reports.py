"""What a call of an adaptive named limit reports when its body ends, and what a change of the
limit's rate tells: a success (a slow one above the limit's latency target), an overload (an
exception the limit names, or ``RateLimitPaused``), reported to the partition's one state in
Redis (``engine.adaptive_rates``). Each change of the rate is one INFO line, one count
(``rate_adapted``) and one OpenTelemetry event; the gauge reads the state itself
(``ops.adaptive_metrics``). A report never fails the call: Redis unreachable is logged and
counted, and the limit keeps its rate."""

from __future__ import annotations

import logging
from typing import Any

from ..config.options import LockOptions
from ..engine.adaptive_in_flight import FlightChange, report_flight
from ..engine.adaptive_rates import AdaptiveRate, RateChange, report_call
from ..engine.counting import count
from ..engine.leases import REDIS_ERRORS
from ..engine.rate_decisions import Limit
from ..integration.runtime import Runtime
from ..integration.tracing import lock_event
from .rate_calls import CallLimits, LimitResolver, catalog_of

__all__ = ["COUNTERS", "changed", "flight_changed", "report_outcome", "report_overload"]

logger = logging.getLogger(__name__)

COUNTERS = {
    "rate_adapted": "changes of an adaptive limit's rate (each logged at INFO with its reason)",
    "in_flight_adapted": "changes of an adaptive limit's calls at once (``in_flight``; each logged at INFO "
    "with its reason)",
}


def _adaptive(runtime: Runtime, options: LockOptions) -> dict[str, AdaptiveRate]:
    named = options.value("rate_limits") or ()
    if not named:
        return {}
    catalog = catalog_of(runtime)
    found = {}
    for name, _ in named:
        declared = catalog.get(name)
        if declared is not None and declared.adaptive is not None:
            found[name] = declared.adaptive
    return found


def report_outcome(
    resolver: LimitResolver,
    task: Any,
    runtime: Runtime,
    options: LockOptions,
    error: BaseException | None,
    elapsed: float,
) -> None:
    """The body of the running call ended after ``elapsed`` seconds, raising ``error`` (None: it
    returned): report it to each of its adaptive limits that it says something of."""
    adaptive = _adaptive(runtime, options)
    if not adaptive:
        return
    reports: list[tuple[str, str]] = []
    for spec in adaptive.values():
        if error is None:
            slow = spec.latency_target is not None and elapsed > spec.latency_target
            reports.append(
                ("slow", f"latency {elapsed:.3f}s above {spec.latency_target:g}s") if slow else ("ok", "")
            )
        else:
            matched = spec.is_overload(error)
            reports.append(("over", f"{matched}: {error}"[:200]) if matched else ("", ""))
    if not any(kind for kind, _ in reports):
        return  # an error no limit names: it says nothing of the partner's capacity
    calls = resolver.of(task, runtime, options)
    for (kind, reason), (name, spec) in zip(reports, adaptive.items()):
        if kind:
            _report(task, runtime, calls, _limit(calls, name), spec, kind, elapsed, reason)


def report_overload(
    resolver: LimitResolver,
    task: Any,
    runtime: Runtime,
    options: LockOptions,
    limits: tuple[Limit, ...],
    elapsed: float,
    reason: str,
) -> None:
    """The body raised ``RateLimitPaused`` for ``limits``: an overload of each adaptive one."""
    adaptive = _adaptive(runtime, options)
    chosen = [limit for limit in limits if limit.name in adaptive]
    if not chosen:
        return
    calls = resolver.of(task, runtime, options)
    for limit in chosen:
        _report(task, runtime, calls, limit, adaptive[limit.name], "over", elapsed, reason)


def _limit(calls: CallLimits, name: str) -> Limit:
    return next(limit for limit in calls.limits if limit.name == name)


def _report(
    task: Any,
    runtime: Runtime,
    calls: CallLimits,
    limit: Limit,
    spec: AdaptiveRate,
    kind: str,
    elapsed: float,
    reason: str,
) -> None:
    try:
        change = report_call(runtime.scripts, limit.key, limit.name, spec, kind, elapsed, reason)
        # The same report moves its calls at once (one more script call, for such limits only).
        flight = (
            None
            if spec.in_flight is None
            else report_flight(runtime.scripts, limit.key, spec.in_flight, kind, elapsed, reason)
        )
    except REDIS_ERRORS as exc:
        count("redis_errors", task=task.name)
        logger.warning(
            "Could not report a call of %s[%s] to adaptive limit %s: %r",
            task.name,
            task.request.id,
            limit.name,
            exc,
        )
        return
    if change is not None:
        changed(task.name, limit, change)
    if flight is not None:
        flight_changed(task.name, limit, flight)


def changed(task_name: str, limit: Limit, change: RateChange) -> None:
    """Tell of a change of an adaptive limit's rate: log, count, span event."""
    logger.info(
        "Adaptive limit %s (%s): rate %.3f/s -> %.3f/s (%s)",
        limit.name,
        limit.key,
        change.old,
        change.new,
        change.reason,
    )
    count("rate_adapted", task=task_name)
    lock_event(
        "rate_adapted",
        task_name,
        limit.key,
        limit.name,
        change.reason,
        old_rate=change.old,
        new_rate=change.new,
    )


def flight_changed(task_name: str, limit: Limit, change: FlightChange) -> None:
    """Tell of a change of an adaptive limit's calls at once: log, count, span event."""
    logger.info(
        "Adaptive limit %s (%s): in flight %d -> %d at once (%s)",
        limit.name,
        limit.key,
        change.old,
        change.new,
        change.reason,
    )
    count("in_flight_adapted", task=task_name)
    lock_event(
        "in_flight_adapted",
        task_name,
        limit.key,
        limit.name,
        change.reason,
        old_in_flight=change.old,
        new_in_flight=change.new,
    )
