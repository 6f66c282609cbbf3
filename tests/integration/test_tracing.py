"""OpenTelemetry: the renewal thread kept out of traces, the lock's span events on the current
span, and nothing of OpenTelemetry imported by a process that does not trace."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import redis

from celery_redislock.engine import Lease, LockEngine
from celery_redislock.engine.renewal import Renewer, add_cycle_listener, remove_cycle_listener
from celery_redislock.integration.tracing import lock_event, recording_span

from .helpers import poll

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@pytest.fixture
def renewer() -> Iterator[Renewer]:
    renewer = Renewer()
    yield renewer
    renewer.stop()


def test_the_renewal_thread_is_kept_out_of_traces(renewer: Renewer, redislock_redis: redis.Redis) -> None:
    # An instrumented Redis client asks is_instrumentation_enabled() before it makes a span.
    # Seen red without untraced(): the renewal thread's calls were instrumented.
    seen: list[bool] = []

    def cycle(held: list[Lease], latencies: list[float]) -> None:
        seen.append(is_instrumentation_enabled())

    add_cycle_listener(cycle)
    try:
        engine = LockEngine(redislock_redis)
        lease = Lease("lock:traced", "me", 5_000)
        assert engine.acquire(lease.key, lease.holder, lease.ttl_ms).acquired
        renewer.add(engine, lease, 0.05)
        assert poll(lambda: len(seen) >= 2, timeout=5.0)
        renewer.discard(engine, lease)
    finally:
        remove_cycle_listener(cycle)
    assert not any(seen), seen
    assert is_instrumentation_enabled()  # this thread still traces


def test_a_lock_event_lands_on_the_current_span_with_its_attributes() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer(__name__).start_as_current_span("run/app.task"):
        lock_event("acquire", "app.task", "redislock:app.task:00", "id@host:1", "acquired")
    lock_event("release", "app.task", "redislock:app.task:00", "id@host:1", "released")  # no span: nothing
    [span] = exporter.get_finished_spans()
    [event] = span.events
    assert event.name == "redislock.acquire"
    assert dict(event.attributes or {}) == {
        "redislock.key": "redislock:app.task:00",
        "redislock.holder": "id@host:1",
        "redislock.outcome": "acquired",
    }


def test_the_span_is_found_in_a_context_holding_more_and_a_context_without_one_adds_nothing() -> None:
    # recording_span reads the current context first (empty where nothing traces the run). Seen
    # red with a lookup that took the span for the context's only entry: baggage hid it.
    from opentelemetry import baggage, context

    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # not the global one: a span of any provider is found
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    token = context.attach(baggage.set_baggage("tenant", "a"))
    try:
        assert recording_span("app.task") is None  # an entry, no span
        with provider.get_tracer(__name__).start_as_current_span("run/app.task"):
            lock_event("acquire", "app.task", "redislock:app.task:00", "id@host:1", "acquired")
    finally:
        context.detach(token)
    assert recording_span("app.task") is None  # the context is empty again
    [span] = exporter.get_finished_spans()
    assert [event.name for event in span.events] == ["redislock.acquire"]


def test_nothing_of_opentelemetry_is_imported_without_the_extra() -> None:
    # Blocked: a process where the extra is not installed. The package, its Celery part and a
    # locked task run eagerly must not reach for it.
    script = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # import opentelemetry raises ImportError
        from celery import Celery
        from celery_redislock import SingletonTask
        import celery_redislock.ops.stats, celery_redislock.integration.tracing
        from celery_redislock.integration.tracing import lock_event, recording_span
        lock_event("acquire", "t", "k", "h", "acquired")
        loaded = [name for name in sys.modules if name.startswith("opentelemetry") and sys.modules[name]]
        assert not loaded, loaded
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_change_of_an_adaptive_limit_is_a_span_event_with_its_rates_and_reason() -> None:
    # Seen red before the change told the span (no event).
    from celery_redislock.engine.adaptive_rates import RateChange
    from celery_redislock.engine.rate_decisions import Limit
    from celery_redislock.gates.rate_reports import changed

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer(__name__).start_as_current_span("run/app.call"):
        changed("app.call", Limit("{redislock:limits}:partner", (), "partner"), RateChange(10.0, 8.0, "429"))
    [span] = exporter.get_finished_spans()
    [event] = span.events
    assert event.name == "redislock.rate_adapted"
    assert dict(event.attributes or {}) == {
        "redislock.key": "{redislock:limits}:partner",
        "redislock.holder": "partner",
        "redislock.outcome": "429",
        "redislock.old_rate": 10.0,
        "redislock.new_rate": 8.0,
    }


def test_a_change_of_an_adaptive_limits_calls_in_flight_is_a_span_event_with_n_and_reason() -> None:
    # Seen red with flight_changed not telling the span (no event).
    from celery_redislock.engine.adaptive_in_flight import FlightChange
    from celery_redislock.engine.rate_decisions import Limit
    from celery_redislock.gates.rate_reports import flight_changed

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer(__name__).start_as_current_span("run/app.call"):
        flight_changed(
            "app.call", Limit("{redislock:limits}:partner", (), "partner"), FlightChange(8, 6, "429")
        )
    [span] = exporter.get_finished_spans()
    [event] = span.events
    assert event.name == "redislock.in_flight_adapted"
    assert dict(event.attributes or {}) == {
        "redislock.key": "{redislock:limits}:partner",
        "redislock.holder": "partner",
        "redislock.outcome": "429",
        "redislock.old_in_flight": 8,
        "redislock.new_in_flight": 6,
    }
