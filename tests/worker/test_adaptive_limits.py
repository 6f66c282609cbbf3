"""Adaptive named limits through real workers and a real redis-server, against a real HTTP
partner on loopback (``tests.harness.partner``) that serves C calls a second and answers 429
with Retry-After above that: the limit's rate, one state in Redis shared by every worker, finds
C and follows it. The bounds are loose (a loaded 2-core machine); the benchmark measures the
figures (``benchmarks.adaptive_limit``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock.contrib.testing import poll
from celery_redislock.engine.adaptive_rates import adaptive_key, adaptive_state
from celery_redislock.gates.rate_calls import named_log
from celery_redislock.integration.runtime import runtime_for
from tests.harness.partner import Partner

from .conftest import stats_of
from .mode_harness import Deployment, ModeTask, node

#: The body: one call of the partner; a 429 pauses the limit for its Retry-After (the call is
#: re-queued, never lost); a success is recorded once per call.
BODY = """
import urllib.error, urllib.request
try:
    urllib.request.urlopen(PARTNER + "?n=" + str(n), timeout=30).close()
except urllib.error.HTTPError as exc:
    if exc.code == 429:
        raise RateLimitPaused(float(exc.headers["Retry-After"]))
    raise
coord.rpush("served:" + tag, n)
return n
"""


def partner_task(name: str) -> ModeTask:
    return ModeTask(name, "tag, n", BODY, {"rate_limits": ["partner"], "acks_late": True})


def module(partner: Partner, limit: dict[str, Any]) -> str:
    return (
        "\nfrom celery_redislock import RateLimitPaused\n"
        f"PARTNER = {partner.url!r}\n"
        f"app.conf.redislock_limits = {{'partner': {limit!r}}}\n"
    )


class Load:
    """Keeps ``backlog`` calls sent and not yet served (a partner with more work than capacity),
    topped up each time it is asked; ``served`` reads what the workers recorded."""

    def __init__(self, app: Celery, task: ModeTask, coord: redis.Redis, tag: str, backlog: int) -> None:
        self.send = task.sender(app)
        self.coord, self.tag, self.backlog = coord, tag, backlog
        self.sent = 0
        self.ids: dict[int, str] = {}

    def served(self) -> list[int]:
        return [int(n) for n in self.coord.lrange(f"served:{self.tag}", 0, -1)]

    def top_up(self) -> None:
        wanted = self.coord.llen(f"served:{self.tag}") + self.backlog
        for n in range(self.sent, wanted):
            self.ids[n] = self.send.delay(self.tag, n).id
        self.sent = max(self.sent, wanted)

    def until(self, condition: Callable[[], Any], timeout: float) -> Any:
        """Keep the load up until ``condition()`` holds (its value), or the deadline passes."""

        def check() -> Any:
            self.top_up()
            return condition()

        return poll(check, timeout, 0.05)


def rate_over(partner: Partner, seconds: float) -> tuple[float, float]:
    """The partner's calls served a second, and the share of its answers that were 429s, over
    the last ``seconds``."""
    now = partner.now()
    ok, refused = partner.served(now - seconds, now)
    return ok / seconds, refused / max(1, ok + refused)


def test_an_adaptive_limit_finds_the_partners_capacity_from_a_slow_start_and_follows_it(
    coord: redis.Redis, locks: redis.Redis, deployment: Deployment
) -> None:
    # Seen red with the gate deciding by the declared start (its state not read: the rate stayed
    # at 1/s, the partner at 10/s) and with the reports not sent (no state, no change counted).
    task = partner_task("adaptive.follow")
    limit = {"floor": 1, "ceiling": 40, "start": 1}
    with Partner(capacity=10) as partner:
        names = [node("adapt-a"), node("adapt-b")]
        # Two workers: one state in Redis decides for both.
        workers = [
            deployment.start(task, "-c", "3", "-n", name, module=module(partner, limit)) for name in names
        ]
        app = deployment.app()
        log = named_log(runtime_for(app).settings.key_prefix, "partner")
        load = Load(app, task, coord, "follow", backlog=30)
        reached = load.until(lambda: partner.now() > 5 and rate_over(partner, 5)[0] >= 6, timeout=60)
        assert reached, f"served {rate_over(partner, 5)[0]:.1f}/s over the last 5 s after 60 s, C = 10/s"
        state = adaptive_state(locks, log)
        assert state is not None and state.rate > 1 and 1 <= state.floor <= state.ceiling == 40
        settled = partner.now()
        assert load.until(lambda: partner.now() - settled >= 10, timeout=30)
        assert rate_over(partner, 10)[1] < 0.2, f"{rate_over(partner, 10)[1]:.0%} 429s once converged"

        partner.capacity = 20  # doubled: the limit must find the room
        more = load.until(lambda: rate_over(partner, 5)[0] >= 12, timeout=60)
        assert more, f"served {rate_over(partner, 5)[0]:.1f}/s 60 s after C doubled to 20/s"

        partner.capacity = 4  # below the first C: the limit must come down to it
        halved = partner.now()
        calmer = load.until(
            lambda: partner.now() - halved >= 5 and rate_over(partner, 5)[1] < 0.2, timeout=40
        )
        assert calmer, f"429s were {rate_over(partner, 5)[1]:.0%} of calls 40 s after C fell to 4/s"
        assert adaptive_state(locks, log).rate < 8  # type: ignore[union-attr]
        # Nothing lost, nothing run twice: every call sent is served, once.
        sent = load.sent

        def missing() -> list[int]:
            return sorted(set(range(sent)) - set(load.served()))

        assert poll(lambda: not missing(), 60), (
            f"{missing()} of {sent} not served; the partner's answers to them: "
            f"{[a for a in partner.answers if a.call in {str(n) for n in missing()}]}; "
        ) + "\n".join(
            line
            for w in workers
            for line in w.log().splitlines()
            if any(load.ids[n] in line for n in missing())
        )
        assert sorted(load.served()) == list(range(sent))
        # Each change is one INFO line of the worker that made it.
        assert any("Adaptive limit partner ({" in w.log() and "/s (successes)" in w.log() for w in workers)
        changes = sum(
            (stats_of(app, name) or {"counters": {}})["counters"].get("rate_adapted", 0) for name in names
        )
        assert changes >= 3  # up, up again, then down: each change counted by the worker that made it


def test_the_rate_doubles_a_second_until_the_first_overload_then_grows_gently_near_it(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    # The rule alone, reported by hand to a real redis-server. Seen red with slow start off (a
    # success added 0.1/s from the start: 1.9/s after 9 successes, not 10/s) and with one cut
    # for every overload (80 %, not 90 %, near the peak).
    from celery_redislock import OptionError, declare_limit
    from celery_redislock.engine.adaptive_rates import report_call

    app = make_app(redislock_limits={"partner": {"floor": 1, "ceiling": 100, "start": 1}})
    runtime = runtime_for(app)
    log = named_log(runtime.settings.key_prefix, "partner")
    spec = runtime.settings.limits["partner"].adaptive
    assert spec is not None

    def report(kind: str, elapsed: float = 0.0) -> float:
        report_call(runtime.scripts, log, "partner", spec, kind, elapsed, "429")
        return float(locks.hget(adaptive_key(log), "~rate"))  # type: ignore[arg-type]

    # Slow start: each success adds a call a second (rate r, r successes a second: doubles).
    assert [report("ok") for _ in range(9)][-1] == 10.0
    assert adaptive_state(locks, log).rate == 10.0  # type: ignore[union-attr]
    # The first overload cuts to 80 % and remembers 10/s; a second one from a call started
    # before that cut moves nothing (once per reaction).
    assert report("over") == 8.0
    assert report("over", elapsed=60.0) == 8.0
    # Below 90 % of the peak a success adds 0.1/s, near it 0.02/s: no more doubling.
    assert report("ok") == pytest.approx(8.1)
    for _ in range(9):
        report("ok")
    assert report("ok") == pytest.approx(9.02)
    assert adaptive_state(locks, log).peak == 10.0  # type: ignore[union-attr]
    # An overload at or below the known peak (calls bunched at the partner's capacity, not an
    # overshoot) cuts by less: to 90 % of the published rate.
    published = adaptive_state(locks, log).rate  # type: ignore[union-attr]
    assert published < 10.0
    assert report("over") == pytest.approx(published * 0.9)

    # A rule the package does not know is named, with the ones it does.
    with pytest.raises(
        OptionError, match="a wrong 'rule': rule must be one of 'default', 'aimd', 'gradient'"
    ):
        declare_limit(app, "other", {"floor": 1, "ceiling": 100, "rule": "vegas"})


#: A body whose partner's overload is an exception the limit names, not a RateLimitPaused.
OVERLOAD_BODY = """
import urllib.error, urllib.request
try:
    urllib.request.urlopen(PARTNER + "?n=" + str(n), timeout=30).close()
except urllib.error.HTTPError as exc:
    raise TimeoutError(f"partner answered {exc.code}") from None
coord.rpush("served:" + tag, n)
return n
"""


@pytest.mark.parametrize(
    ("signal", "limit", "capacity", "service", "says"),
    [
        pytest.param(
            "exception",
            {"floor": 1, "ceiling": 20, "start": 20, "overload": ["TimeoutError"]},
            4,
            0.01,
            "TimeoutError: partner answered 429",
            id="named-exception",
        ),
        pytest.param(
            "latency",
            {"floor": 1, "ceiling": 20, "start": 20, "latency_target": 0.05},
            100,  # no 429: the latency alone speaks
            0.2,
            "latency",
            id="latency-target",
        ),
    ],
)
def test_a_named_exception_or_a_slow_success_brings_the_rate_down(
    signal: str,
    limit: dict[str, Any],
    capacity: float,
    service: float,
    says: str,
    coord: redis.Redis,
    locks: redis.Redis,
    deployment: Deployment,
) -> None:
    # Seen red with no exception matched as an overload (the rate stayed at its start, 20/s) and
    # with the latency not compared (likewise).
    task = ModeTask(f"adaptive.{signal}", "tag, n", OVERLOAD_BODY, {"rate_limits": ["partner"]})
    with Partner(capacity=capacity, service=service) as partner:
        deployment.start(task, "-c", "4", "-n", node(f"adapt-{signal}"), module=module(partner, limit))
        app = deployment.app()
        log = named_log(runtime_for(app).settings.key_prefix, "partner")
        load = Load(app, task, coord, signal, backlog=20)

        def came_down() -> bool:
            state = adaptive_state(locks, log)
            return state is not None and state.rate < 15

        assert load.until(came_down, timeout=40), adaptive_state(locks, log)
        state = adaptive_state(locks, log)
        assert state is not None and says in state.reason


def test_limit_show_the_page_and_the_gauge_say_the_rate_its_bounds_and_last_reason(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    # Seen red before they read the adaptive state: show gave the start's wire form
    # ("36000/h burst 1"), the page and the gauge no rate, bounds or reason.
    from celery.bin.base import CLIContext
    from click.testing import CliRunner
    from prometheus_client import generate_latest

    from celery_redislock import OptionError, reset_limit, set_limit
    from celery_redislock.engine.adaptive_rates import report_call
    from celery_redislock.ops.limit_cli import limit as limit_command
    from celery_redislock.ops.metrics import lock_registry
    from celery_redislock.ops.web import create_app

    app = make_app(redislock_limits={"partner": {"floor": 1, "ceiling": 40, "start": 10}, "fixed": "5/s"})
    runtime = runtime_for(app)
    log = named_log(runtime.settings.key_prefix, "partner")
    spec = runtime.settings.limits["partner"].adaptive
    assert spec is not None
    change = report_call(
        runtime.scripts, log, "partner", spec, "over", 0.0, "RateLimitPaused (retry after 1s)"
    )
    assert change is not None and (change.old, change.new) == (10.0, 8.0)

    def run(*args: str) -> Any:
        return CliRunner().invoke(
            limit_command, list(args), obj=CLIContext(app=app, no_color=True, workdir=".", quiet=False)
        )

    shown = run("show").output
    assert "partner  adaptive 1/s to 40/s, start 10/s  [redislock_limits]" in shown
    assert "rate 8.000/s (1 change(s), the last: RateLimitPaused (retry after 1s))" in shown
    (listed,) = [each for each in json.loads(run("show", "--json").output) if each["name"] == "partner"]
    assert listed["adaptive"]["floor"] == 1 and listed["adaptive"]["ceiling"] == 40
    assert listed["partitions"][0]["adaptive"]["rate"] == 8.0

    page = create_app(app, poll_interval=60)
    try:
        html = page.test_client().get("/").get_data(as_text=True)
    finally:
        page.extensions["redislock"].stop()
    assert "(adaptive, 1/s to 40/s)" in html
    assert (
        '<span class="adaptive">8.000/s</span> <span class="note">(last change: RateLimitPaused (retry after 1s))'
        in html
    )

    metrics = generate_latest(lock_registry(app=app)).decode()
    assert f'redislock_adaptive_rate{{limit="partner",partition="{log}"}} 8.0' in metrics
    assert 'redislock_adaptive_ceiling{limit="partner"} 40.0' in metrics

    # Bad input changes nothing: an adaptive limit's rate is not set by hand, an unknown one is named.
    with pytest.raises(OptionError, match="names an adaptive limit"):
        set_limit(app, "partner", "50/s")
    refused = run("set", "partnr", "5/s")
    assert refused.exit_code != 0 and "did you mean 'partner'?" in refused.output
    assert adaptive_state(locks, log).rate == 8.0  # type: ignore[union-attr]
    # A reset forgets what it learnt: the start again.
    assert reset_limit(app, "partner") is True
    assert adaptive_state(locks, log) is None
    assert "Adaptive limit partner had learnt nothing yet" in run("reset", "partner").output


def test_a_report_that_fails_never_changes_the_calls_outcome(
    make_app: Callable[..., Celery], worker: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    # The report reads the call's cost again: one that raises then (its first reading, at the
    # decision, went well) is logged. Seen red before: the call that had run ended FAILURE.
    app = make_app(redislock_limits={"api": {"floor": 1, "ceiling": 100, "start": 50}})
    readings: list[int] = []

    def cost(task: Any, args: Any, kwargs: Any) -> int:
        readings.append(1)
        if len(readings) > 1:
            raise LookupError("the cost's source is gone")
        return 1

    from celery_redislock import SingletonTask

    @app.task(base=SingletonTask, shared=False, name="adaptive.reported", rate_limits=["api"], rate_cost=cost)
    def reported() -> str:
        return "done"

    caplog.set_level(logging.WARNING, logger="celery_redislock")
    with worker(app, pool="solo"):
        assert reported.delay().get(timeout=30) == "done"
    assert len(readings) >= 2, readings
    assert any("Could not report how adaptive.reported" in record.getMessage() for record in caplog.records)
