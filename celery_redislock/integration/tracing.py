"""The lock's events on the task's OpenTelemetry span: acquire, skip, postpone and release, each
a span event with the key, holder and outcome, where the process traces.

Nothing is imported here: a process traces when its set-up imported ``opentelemetry.trace``
(the SDK's, or an instrumentation's), and the events go to the current span, which
opentelemetry-instrumentation-celery makes the task's. A process without OpenTelemetry pays a
dictionary lookup an event.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Union

__all__ = ["TRACE_MODULE", "lock_event", "recording_span", "span_event"]

logger = logging.getLogger(__name__)

Attribute = Union[str, float, int]
_failed: list[type[BaseException]] = []
#: In ``sys.modules`` when the process may trace: callers on a task's path test it themselves,
#: which spares them lock_event's call where nothing traces.
TRACE_MODULE = "opentelemetry.trace"
#: Where the current context lives (imported by ``opentelemetry.trace``).
CONTEXT_MODULE = "opentelemetry.context"


def lock_event(name: str, task: str, key: str, holder: str, outcome: str, **more: Attribute) -> None:
    """Add the span event ``redislock.<name>`` of ``task``'s lock to the current span, if one is
    recording. Never raises: it is on the task's path (a failing tracer is logged once, naming
    the task)."""
    span = recording_span(task)
    if span is not None:
        span_event(span, name, task, key, holder, outcome, **more)


def recording_span(task: str) -> Any:
    """The current span if it is recording, else None (never raises). A lock held through a
    run keeps it for its release: one span lookup a run, not two."""
    modules = sys.modules
    trace = modules.get(TRACE_MODULE)
    if trace is None:
        return None
    try:
        # The current context first (public, whatever provider made the span): where nothing
        # traces the run it is empty, and get_current_span's lookups and is_recording are spared.
        context = modules[CONTEXT_MODULE].get_current()
        if not context:
            return None
        span = trace.get_current_span(context)
        return span if span.is_recording() else None
    except Exception as exc:
        _failed_once(exc, "current span", task)
        return None


def span_event(
    span: Any, name: str, task: str, key: str, holder: str, outcome: str, **more: Attribute
) -> None:
    """Add the event ``redislock.<name>`` to ``span`` (from ``recording_span``); never raises."""
    try:
        # The task is the span's already (its name, celery.task_name): not repeated, as each
        # attribute costs the SDK a check on every event.
        attributes: dict[str, Attribute] = {
            "redislock.key": key,
            "redislock.holder": holder,
            "redislock.outcome": outcome,
        }
        attributes.update((f"redislock.{field}", value) for field, value in more.items())
        span.add_event(f"redislock.{name}", attributes)
    except Exception as exc:
        _failed_once(exc, f"span event redislock.{name}", task)


def _failed_once(exc: Exception, what: str, task: str) -> None:
    if type(exc) not in _failed:
        _failed.append(type(exc))
        logger.warning("Could not add the %s of %s", what, task, exc_info=True)
