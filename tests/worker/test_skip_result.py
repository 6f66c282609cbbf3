"""``skip_result``: what a skipped duplicate stores, seen by a group and a chord on a real
in-process worker: a FAILURE (the default: a chord fails), a SUCCESS naming the holder (a chord
goes on), or nothing (a chord still gets its FAILURE: it waits for every member)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from celery import Celery, chord, group
from celery.exceptions import ChordError
from celery.signals import task_postrun

from celery_redislock import DuplicateTaskError, SingletonTask

from .conftest import poll, registration_error
from .mode_harness import key_for

HOLDER = "holder-s@elsewhere:1:1"
SKIPPED = {"skipped": True, "holder": HOLDER, "holder_task_id": "holder-s"}


def tasks(app: Celery, **options: Any) -> tuple[Any, Any]:
    """``part(n)``, a SingletonTask returning ``n`` whose key for ``n=2`` another execution
    holds; ``total(values)``, a plain chord callback."""

    @app.task(base=SingletonTask, shared=False, name="skips.part", **options)
    def part(n: int) -> int:
        return n

    @app.task(shared=False, name="skips.total")
    def total(values: list[Any]) -> list[Any]:
        return values

    return part, total


@pytest.fixture
def held(locks: redis.Redis) -> Callable[[Celery, Any], str]:
    """``held(app, part)``: the key of ``part(2)``, taken by another execution for a minute."""

    def hold(app: Celery, part: Any) -> str:
        key = key_for(app, part, 2)
        locks.set(key, HOLDER, px=60_000)
        return key

    return hold


@pytest.fixture
def ended() -> Iterator[dict[str, str]]:
    """Task id -> Celery's final state, from ``task_postrun`` (sent once the trace is done)."""
    states: dict[str, str] = {}

    def record(task_id: str, state: str, **_: Any) -> None:
        states[task_id] = state

    task_postrun.connect(record, weak=False)
    yield states
    task_postrun.disconnect(record)


@pytest.mark.parametrize("layer", ["task", "queue", "app"])
def test_a_chord_goes_on_past_a_skipped_member_with_skip_result_success(
    layer: str, make_app: Callable[..., Celery], worker: Any, held: Callable[[Celery, Any], str]
) -> None:
    setting = {"skip_result": "success"}
    conf = {"task": {}, "queue": {"redislock_queues": {"celery": setting}}}.get(
        layer, {"redislock_options": setting}
    )
    app = make_app(**conf)
    part, total = tasks(app, **(setting if layer == "task" else {}))
    key = held(app, part)
    with worker(app, concurrency=2):
        result = chord(group(part.s(n) for n in range(3)))(total.s())
        assert result.get(timeout=15) == [0, 1, {**SKIPPED, "key": key}]
        skipped = result.parent.results[2]
        assert skipped.successful() and not skipped.failed()


@pytest.mark.parametrize("stored", [None, "failure", "ignore"])
def test_a_chord_with_a_skipped_member_fails_unless_skip_result_success(
    stored: str | None, make_app: Callable[..., Celery], worker: Any, held: Callable[[Celery, Any], str]
) -> None:
    app = make_app()
    part, total = tasks(app, **({"skip_result": stored} if stored else {}))
    held(app, part)
    with worker(app, concurrency=2):
        result = chord(group(part.s(n) for n in range(3)))(total.s())
        # "ignore" too: a chord counts every member, so its skipped one is answered as failed.
        with pytest.raises(DuplicateTaskError, match=HOLDER):
            result.get(timeout=15)
        assert poll(lambda: result.state == "FAILURE")
        assert isinstance(result.result, ChordError) and HOLDER in str(result.result)
        assert result.parent.results[2].failed()


@pytest.mark.parametrize("stored", ["failure", "success", "ignore"])
def test_a_group_s_results_under_each_skip_result(
    stored: str,
    make_app: Callable[..., Celery],
    worker: Any,
    held: Callable[[Celery, Any], str],
    ended: dict[str, str],
) -> None:
    app = make_app(redislock_options={"skip_result": stored})
    part, _ = tasks(app)
    key = held(app, part)
    with worker(app, concurrency=2):
        result = group(part.s(n) for n in range(3)).apply_async()
        first, second, skipped = result.results
        assert [first.get(timeout=15), second.get(timeout=15)] == [0, 1]
        assert poll(lambda: skipped.id in ended, 15)
        if stored == "failure":  # the default: get() raises, the group has failed
            error = skipped.get(timeout=15, propagate=False)
            assert isinstance(error, DuplicateTaskError) and error.holder == HOLDER
            assert result.failed()
        elif stored == "success":
            assert skipped.get(timeout=15) == {**SKIPPED, "key": key}
            assert skipped.successful() and not result.failed()
        else:  # nothing stored: for a call nobody waits on
            assert ended[skipped.id] == "IGNORED" and skipped.state == "PENDING"


def test_a_chain_goes_on_with_the_skipped_call_s_value_with_skip_result_success(
    make_app: Callable[..., Celery], worker: Any, held: Callable[[Celery, Any], str]
) -> None:
    app = make_app()
    part, total = tasks(app, skip_result="success")
    key = held(app, part)
    with worker(app, concurrency=2):
        assert (part.s(2) | total.s()).apply_async().get(timeout=15) == {**SKIPPED, "key": key}


def test_an_eager_skip_returns_what_a_worker_would_store(
    make_app: Callable[..., Celery], held: Callable[[Celery, Any], str]
) -> None:
    app = make_app(task_always_eager=True, redislock_options={"skip_result": "success"})
    part, _ = tasks(app)
    key = held(app, part)
    assert part.delay(2).get() == {**SKIPPED, "key": key}
    assert part.delay(1).get() == 1


def test_an_unknown_skip_result_names_the_option_and_the_choices(make_app: Callable[..., Celery]) -> None:
    error = registration_error(make_app(), "skips.bad", skip_result="sucess")
    assert "option 'skip_result'" in str(error)
    assert "'failure', 'success', 'ignore'" in str(error) and "did you mean 'success'" in str(error)
