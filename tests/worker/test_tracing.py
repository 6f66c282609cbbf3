"""The lock's OpenTelemetry span events through a real prefork worker: the task's span, made by
opentelemetry-instrumentation-celery in the pool's children, carries the acquire and the
release of the run that held the lock, and the skip of each duplicate, with key and holder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock.contrib.testing import poll

from .conftest import WorkerProcess, open_gate, skip_duplicates, wait_started, worker_module

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.instrumentation.celery")

TASKS = """
from celery.signals import worker_process_init


@worker_process_init.connect(weak=False)
def trace_this_child(**_):
    # Each pool child exports its finished spans, one JSON line each, to a file of its own.
    from opentelemetry import trace
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    out = open(f"{spans}/spans-{{os.getpid()}}.jsonl", "a", buffering=1)
    provider = TracerProvider()
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\\n")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    CeleryInstrumentor().instrument()


@app.task(base=SingletonTask, bind=True, name="tracing.held")
def held(self, tag):
    return hold(self, tag)
"""


def finished_spans(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for path in folder.glob("spans-*.jsonl") for line in path.read_text().splitlines()
    ]


def events_of(span: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (event["name"], event["attributes"])
        for event in span["events"]
        if event["name"].startswith("redislock.")
    ]


def test_the_lock_events_are_on_the_task_spans_of_a_prefork_worker(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    spans = tmp_path / "spans"
    spans.mkdir()
    worker_process(worker_module(urls, "tracing", TASKS.format(spans=str(spans))), "-c", "2")
    client = make_app()

    holder = client.send_task("tracing.held", args=["t"])
    try:
        [(_, holder_id)] = wait_started(coord, "t")
        skip_duplicates(client, "tracing.held", "t", 2)
    finally:
        open_gate(coord, "t")
    assert holder.get(timeout=15) == "done t"

    def all_three() -> list[dict[str, Any]] | None:
        runs = [span for span in finished_spans(spans) if span["name"] == "run/tracing.held"]
        return runs if len(runs) == 3 else None

    runs = poll(all_three, 15)
    assert runs, finished_spans(spans)
    by_id = {span["attributes"]["messaging.message.id"]: span for span in runs}
    held_span = by_id.pop(holder_id)
    [(acquire, taken), (release, freed)] = events_of(held_span)
    assert (acquire, release) == ("redislock.acquire", "redislock.release")
    assert taken["redislock.outcome"] == "acquired" and freed["redislock.outcome"] == "released"
    key, holder_of = taken["redislock.key"], taken["redislock.holder"]
    assert key.startswith("redislock:tracing.held:") and holder_of.startswith(holder_id)
    assert (freed["redislock.key"], freed["redislock.holder"]) == (key, holder_of)
    assert held_span["attributes"]["celery.task_name"] == "tracing.held"  # the task is the span's
    for span in by_id.values():  # the two duplicates
        [(skip, attributes)] = events_of(span)
        assert skip == "redislock.skip"
        assert attributes["redislock.outcome"] == "skipped"
        assert (attributes["redislock.key"], attributes["redislock.holder"]) == (key, holder_of)
