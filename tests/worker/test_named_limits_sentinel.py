"""Named limits through a Sentinel-discovered master, with a real in-process worker: two limits
decided at once for every start, and a pause raised by a body holding every start back for its
duration; read on the master, by the server's clock."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery

from celery_redislock import RateLimitPaused, SingletonTask
from celery_redislock.contrib.testing import SentinelSet
from celery_redislock.engine.keys import limit_keys
from celery_redislock.gates.rate_calls import named_log
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.signals import task_rate_paused
from tests.harness import GrantRecorder, most_in_a_window


@pytest.mark.slow
def test_two_named_limits_and_a_pause_through_sentinel(
    sentinels: SentinelSet, make_app: Callable[..., Celery], worker: Callable[..., Any]
) -> None:
    app = make_app(
        redislock_url=sentinels.url,
        redislock_transport_options=sentinels.transport_options,
        redislock_limits={"partner": "2/s", "llm": "50/s"},
    )
    ran: list[int] = []

    @app.task(
        base=SingletonTask, shared=False, name="sentinel.named", rate_limits=["partner", "llm"], bind=True
    )
    def named(self: Any, n: int) -> int:
        ran.append(n)
        if len(ran) == 1:
            raise RateLimitPaused(retry_after=1.5, limits=["llm"])
        return n

    prefix = runtime_for(app).settings.key_prefix
    partner, llm = named_log(prefix, "partner"), named_log(prefix, "llm")
    pause_ends: list[float] = []
    with sentinels.master().client() as master:

        def on_paused(sender: Any, **info: Any) -> None:
            # Sent once the pause is written: its end (server ms) is on the master now.
            pause_ends.append(int(master.get(limit_keys(llm)[4]) or 0) / 1000)

        task_rate_paused.connect(on_paused, weak=False)
        recorders = [GrantRecorder(master, partner), GrantRecorder(master, llm)]
        try:
            with worker(app, pool="threads", concurrency=2):
                results = [named.delay(n) for n in range(6)]
                assert sorted(result.get(timeout=30) for result in results) == list(range(6))
        finally:
            task_rate_paused.disconnect(on_paused)
            by_partner, by_llm = (recorder.stop() for recorder in recorders)
    # Both limits charged by one decision: every start is in both logs, at the same server time.
    assert by_partner == by_llm and len(by_partner) == 7  # six calls, the paused one twice
    assert most_in_a_window(by_partner, 1.0) <= 2
    # The pause (of llm only) held back every start of the calls naming it until its end.
    [end] = pause_ends
    assert end > by_llm[0]
    assert not [t for t in by_llm if end - 1.5 < t < end], (end, by_llm)
    assert len(ran) == 7 and set(ran) == set(range(6))  # nothing lost, only the paused call twice
    gc.collect()  # the re-queued calls' results, freed while the app is open
