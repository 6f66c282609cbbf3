"""The rate-limit signals of named limits, through a real in-process worker and redis-server: a
call postponed by a named limit sends ``task_rate_limited`` (its limit's key and rate), a pause
raised by a body sends ``task_rate_paused``; the calls still run, each once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_redislock import RateLimitPaused, SingletonTask
from celery_redislock.gates.rate_calls import named_log
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.signals import task_rate_paused
from tests.harness import collect_requeued_results, postponed_calls, received


def test_a_call_postponed_by_a_named_limit_sends_task_rate_limited(
    make_app: Callable[..., Celery], worker: Callable[..., Any]
) -> None:
    app = make_app(redislock_limits={"partner": "2/s"})
    ran, postponed, results = postponed_calls(app, worker, "named.signalled", rate_limits=["partner"])
    assert len(postponed) >= 2 and {p["sender"] for p in postponed} == {"named.signalled"}
    log = named_log(runtime_for(app).settings.key_prefix, "partner")
    assert {p["key"] for p in postponed} == {log} and {p["rate"] for p in postponed} == {"partner 2/s"}
    assert {p["task_id"] for p in postponed} <= {result.id for result in results}
    assert sorted(ran) == [0, 1, 2, 3]
    collect_requeued_results()


def test_a_pause_raised_by_a_body_sends_task_rate_paused(
    make_app: Callable[..., Celery], worker: Callable[..., Any]
) -> None:
    # Seen red before task_rate_paused was sent: no signal received.
    app = make_app(redislock_limits={"partner": "50/s", "llm": "50/s"})
    ran: list[int] = []

    @app.task(
        base=SingletonTask, shared=False, name="named.pausing", rate_limits=["partner", "llm"], bind=True
    )
    def pausing(self: Any, n: int) -> int:
        ran.append(n)
        if len(ran) == 1:
            raise RateLimitPaused(retry_after=0.5, limits=["partner"])
        return n

    with received(task_rate_paused) as paused, worker(app, pool="threads", concurrency=1):
        result = pausing.delay(7)
        assert result.get(timeout=20) == 7
    log = named_log(runtime_for(app).settings.key_prefix, "partner")
    assert paused == [
        {
            "sender": "named.pausing",
            "task_id": result.id,
            "limits": ["partner"],
            "keys": [log],
            "retry_after": 0.5,
        }
    ]
    assert ran == [7, 7]  # re-queued after the pause, run again: not lost
    collect_requeued_results()
