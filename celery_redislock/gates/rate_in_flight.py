"""A call's adaptive in-flight limits (a named limit declared with ``in_flight``): as it is
admitted, after its rates, it takes a slot of each (``engine.adaptive_in_flight``: N read from
the partition's one state in the same script call), renewed while it runs and given back when
the run ends. A call over N is neither run nor dropped: it is put off (``waits.put_off``, with a
copy token) to ask again in ``FLIGHT_RECHECK``; its start stays counted by its rates, so it is
not decided again there. A limit without ``in_flight`` costs nothing here."""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from celery.exceptions import Ignore
from celery.signals import task_postrun

from ..config.options import LockOptions
from ..engine.adaptive_in_flight import FlightSlot, InFlight, in_flight_key, take_flight
from ..engine.counting import count
from ..engine.decision_record import Entry
from ..engine.leases import REDIS_ERRORS, SemaphoreLease
from ..engine.renewal import get_renewer
from ..integration.acquisition import Execution
from ..integration.explain_readers import Context, Decision, iso, padded, reader
from ..integration.runtime import Runtime
from ..waits.put_off import put_off
from .rate_calls import CallLimits, LimitResolver, catalog_of

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = [
    "COUNTERS",
    "FLIGHT_FIELD",
    "FLIGHT_RECHECK",
    "FLIGHT_SUFFIX",
    "flights_of",
    "held_flights",
    "take_in_flight",
]

logger = logging.getLogger(__name__)

COUNTERS: Mapping[str, str] = {
    "in_flight_waited": "calls over an adaptive in-flight limit (N calls of a partition at once), put off to ask again",
}

#: Seconds a call over an in-flight limit waits before it asks again.
FLIGHT_RECHECK = 0.5
#: What ``held_slots`` names an in-flight slot (the log says "Gave back in_flight slot ...").
FLIGHT_SUFFIX = "in_flight"
#: The request attribute holding the in-flight slots a running call holds: ``(runtime, leases)``.
FLIGHT_FIELD = "redislock_in_flight"


def flights_of(runtime: Runtime, calls: CallLimits) -> list[tuple[str, str, InFlight]]:
    """``(log, name, bounds)`` of each of the call's limits with an adaptive ``in_flight``."""
    found = []
    catalog = None
    for limit in calls.limits:
        if not limit.name:
            continue
        catalog = catalog_of(runtime) if catalog is None else catalog
        declared = catalog.get(limit.name)
        spec = None if declared is None or declared.adaptive is None else declared.adaptive.in_flight
        if spec is not None:
            found.append((limit.key, limit.name, spec))
    return found


def held_flights(
    resolver: LimitResolver, runtime: Runtime, task: Any, options: LockOptions, context: Any
) -> list[tuple[str, str]]:
    """``(key, name)`` of each in-flight slot a call of ``task`` (its request's ``context``) takes
    by its execution's holder id: the worker's parent gives back a dead child's
    (``parent_release``), as it frees its lock, rather than at the end of its lease."""
    named = options.value("rate_limits") or ()
    if not named:
        return []
    catalog = catalog_of(runtime)

    def flying(name: str) -> bool:
        declared = catalog.get(name)
        return (
            declared is not None and declared.adaptive is not None and declared.adaptive.in_flight is not None
        )

    if not any(flying(name) for name, _ in named):
        return []  # no partition computed from a dead child's arguments for nothing
    found = []
    for name, log in resolver.named_logs(runtime, task, options, context.args or (), context.kwargs or {}):
        if flying(name):
            found.append((in_flight_key(log), FLIGHT_SUFFIX))
    return found


def take_in_flight(task: AnyTask, execution: Execution, calls: CallLimits) -> None:
    """Take a slot of each of the call's in-flight limits, or give back those taken and put the
    call off to ask again (raises ``Ignore``; an eager call waits here). Raises
    ``redis.RedisError`` when Redis is unreachable (``on_redis_error`` applies)."""
    runtime, options = execution.runtime, execution.options
    flights = flights_of(runtime, calls)
    if not flights:
        return
    ttl_ms = options.timeout_ms
    while True:
        leases: list[SemaphoreLease] = []
        refused: tuple[str, FlightSlot] | None = None
        try:
            for log, name, spec in flights:
                slot = take_flight(runtime.scripts, log, execution.holder, ttl_ms, spec)
                if not slot.taken:
                    refused = (name, slot)
                    break
                # Renewed with the ceiling as its limit: a slot is never re-taken above it.
                leases.append(SemaphoreLease(in_flight_key(log), execution.holder, ttl_ms, spec.ceiling))
        except BaseException:
            _give_back(runtime, leases)
            raise
        if refused is None:
            break
        _give_back(runtime, leases)
        name, slot = refused
        count("in_flight_waited", task=task.name)
        logger.info(
            "%s[%s] waits: in-flight limit %s runs %d of %d call(s) at once; asks again in %gs",
            task.name,
            execution.task_id,
            name,
            slot.running,
            slot.limit,
            FLIGHT_RECHECK,
        )
        request = task.request
        if not request.is_eager:
            noted = runtime.noted(
                execution.task_id, IN_FLIGHT_DECISION, name, str(slot.running), str(slot.limit)
            )
            put_off(task, runtime, FLIGHT_RECHECK, token=True, noted=noted)
            raise Ignore()
        time.sleep(FLIGHT_RECHECK)  # eager: nothing to re-queue
    renewer = get_renewer()
    for lease in leases:
        renewer.add(runtime.semaphores, lease, options.renew_interval_s)
    request = task.request if execution.request is None else execution.request
    vars(request)[FLIGHT_FIELD] = (runtime, leases)
    if task not in _flying:  # connected for tasks with in-flight limits only
        _flying.add(task)
        task_postrun.connect(_release_flights, sender=task, weak=False)


def _give_back(runtime: Runtime, leases: list[SemaphoreLease]) -> None:
    for lease in leases:
        get_renewer().discard(runtime.semaphores, lease)
        try:
            runtime.semaphores.release(lease.key, lease.holder)
        except REDIS_ERRORS as exc:  # it expires with its lease
            count("redis_errors")
            logger.warning("Could not give back in-flight slot %s of %s: %r", lease.key, lease.holder, exc)


#: The tasks whose runs ``_release_flights`` follows (each connected once, on its first slot).
_flying: weakref.WeakSet[Any] = weakref.WeakSet()


def _release_flights(sender: Any = None, task: Any = None, **_: Any) -> None:
    """The run ended (whatever its outcome): give its in-flight slots back."""
    request = getattr(task, "request", None)
    held = vars(request).pop(FLIGHT_FIELD, None) if request is not None else None
    if held is not None:
        _give_back(*held)


#: The kind of a call's entry when it waits for a slot of an in-flight limit: the limit, how many
#: of its calls ran and how many it admitted at once then.
IN_FLIGHT_DECISION = "in_flight"


@reader(IN_FLIGHT_DECISION)
def _waited(entry: Entry, context: Context) -> Decision:
    name, running, limit = padded(entry.fields, 3)
    look = None if entry.time is None else entry.time + FLIGHT_RECHECK
    details: dict[str, Any] = {"limit": name, "running": running, "in_flight": limit, "looks_again": look}
    return Decision(
        entry.time,
        "in_flight",
        f"waited: in-flight limit {name} ran {running} of {limit} call(s) at once; asks again at {iso(look)}",
        details,
    )
