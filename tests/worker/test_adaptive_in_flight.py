"""Adaptive in-flight limits (a named limit's ``in_flight``): at most N calls of a partition run
at once across every worker, N read from the partition's one state in Redis and moved by what the
calls report. The rule against a real redis-server, and real workers against a real HTTP partner
on loopback (``tests.harness.partner``) that serves at most K calls at once and answers 429 above
that. The bounds are loose (a loaded 2-core machine)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import OptionError, declare_limit, explain
from celery_redislock.contrib.testing import WorkerProcess, poll
from celery_redislock.engine.adaptive_in_flight import flight_state, in_flight_key, report_flight, take_flight
from celery_redislock.gates.rate_calls import named_log
from celery_redislock.integration.runtime import runtime_for
from tests.harness.partner import Partner

from .conftest import stats_of, worker_module
from .mode_harness import Deployment, node
from .test_adaptive_limits import Load, module, partner_task


def test_n_calls_at_once_read_from_the_shared_state_cut_by_an_overload_grown_by_successes(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    # Seen red with the slot taken whatever N is (a fifth holder got a slot at N = 4) and with an
    # overload of a call started before the last cut cutting again (3, then 2).
    limit = {"floor": 1, "ceiling": 50, "start": 10, "in_flight": {"floor": 2, "ceiling": 4, "start": 4}}
    app = make_app(redislock_limits={"partner": limit})
    runtime = runtime_for(app)
    log = named_log(runtime.settings.key_prefix, "partner")
    adaptive = runtime.settings.limits["partner"].adaptive
    assert adaptive is not None and adaptive.in_flight is not None
    spec = adaptive.in_flight

    def take(holder: str, ttl_ms: int = 60_000) -> bool:
        return take_flight(runtime.scripts, log, holder, ttl_ms, spec).taken

    # N = its start (no report yet): four at once, not five; a holder asking again keeps its slot.
    assert [take(f"h{i}") for i in range(5)] == [True, True, True, True, False]
    assert take("h0") is True
    # An overload cuts N to 3 (75 %), once per reaction: a call started before that cut says
    # nothing more; N is never cut below the floor.
    change = report_flight(runtime.scripts, log, spec, "over", 0.0, "429")
    assert change is not None and (change.old, change.new, change.reason) == (4, 3, "429")
    assert report_flight(runtime.scripts, log, spec, "over", 60.0, "429") is None
    assert report_flight(runtime.scripts, log, spec, "over", 0.0, "429").new == 2  # type: ignore[union-attr]
    assert report_flight(runtime.scripts, log, spec, "over", 0.0, "429") is None  # at the floor
    state = flight_state(locks, log)
    assert state is not None and (state.limit, state.floor, state.ceiling, state.reason) == (2, 2, 4, "429")
    assert state.changes == 2 and state.running == 4
    # Four hold slots: a new call waits until two are given back (N = 2 now).
    locks.zrem(in_flight_key(log), "h0", "h1")
    assert take("new") is False
    locks.zrem(in_flight_key(log), "h2")
    assert take("new") is True
    # Successes grow N by a quarter of a slot a window of N: one slot after 8 successes at N = 2.
    grown = [report_flight(runtime.scripts, log, spec, "ok", 0.0) for _ in range(8)]
    assert [c for c in grown if c is not None] == [grown[-1]]
    assert (grown[-1].old, grown[-1].new, grown[-1].reason) == (2, 3, "successes")  # type: ignore[union-attr]
    for _ in range(100):
        report_flight(runtime.scripts, log, spec, "ok", 0.0)
    assert flight_state(locks, log).limit == 4  # type: ignore[union-attr]  # never above the ceiling
    # A crashed worker's slot comes back by its lease.
    locks.delete(in_flight_key(log))
    assert all(take(f"d{i}", ttl_ms=200) for i in range(4))
    assert take("after") is False
    assert poll(lambda: take("after"), 10)


@pytest.mark.parametrize(
    ("in_flight", "says"),
    [
        ({"floor": 5, "ceiling": 2}, "a floor (5) above its ceiling (2)"),
        ({"floor": 1, "ceiling": 4, "start": 9}, "a start (9) outside its floor and ceiling (1 to 4)"),
        ({"floor": 0, "ceiling": 4}, "'floor' must be an int >= 1"),
        ({"ceiling": 4}, "no 'floor'"),
        ({"floor": 1, "ceiling": 4, "begin": 2}, "unknown key 'begin'"),
        (4, "must be a dict of floor, ceiling, start"),
    ],
)
def test_wrong_in_flight_bounds_name_the_limit_and_the_key_and_declare_nothing(
    make_app: Callable[..., Celery], in_flight: Any, says: str
) -> None:
    app = make_app()
    with pytest.raises(OptionError) as raised:
        declare_limit(app, "partner", {"floor": 1, "ceiling": 10, "in_flight": in_flight})
    text = str(raised.value)
    assert "adaptive limit 'partner'" in text and "'in_flight'" in text and says in text, text
    assert "partner" not in runtime_for(app).settings.limits


def test_an_in_flight_limit_finds_the_partners_cap_across_workers_and_serves_each_call_once(
    coord: redis.Redis, locks: redis.Redis, deployment: Deployment
) -> None:
    # Seen red with the slots not taken (take_in_flight a no-op): N came down but six processes
    # still called at once, 33 % of the answers 429s (12 % with the slots taken).
    task = partner_task("adaptive.in_flight")
    cap = 2
    limit = {"floor": 50, "ceiling": 200, "start": 100, "in_flight": {"floor": 1, "ceiling": 8, "start": 8}}
    with Partner(capacity=200, concurrency=cap, service=0.3) as partner:
        names = [node("flight-a"), node("flight-b")]
        # Two workers, six processes: more than the partner serves at once; one N for both.
        workers = [
            deployment.start(task, "-c", "3", "-n", name, module=module(partner, limit)) for name in names
        ]
        app = deployment.app()
        log = named_log(runtime_for(app).settings.key_prefix, "partner")
        load = Load(app, task, coord, "flight", backlog=20)

        def settled() -> bool:
            state = flight_state(locks, log)
            return state is not None and 1 <= state.limit <= cap + 1

        assert load.until(settled, timeout=60), flight_state(locks, log)
        start = partner.now()
        assert load.until(lambda: partner.now() - start >= 15, timeout=40)
        ok, refused = partner.served(start, partner.now())
        share = refused / max(1, ok + refused)
        assert ok > 0 and share < 0.25, (
            f"{ok} served, {share:.0%} 429s once N settled at {flight_state(locks, log)}"
        )
        state = flight_state(locks, log)
        assert state is not None and 1 <= state.limit <= 8 and state.changes >= 2
        # Nothing lost, nothing run twice.
        sent = load.sent
        assert poll_served(load, sent), sorted(set(range(sent)) - set(load.served()))
        assert sorted(load.served()) == list(range(sent))
        assert any(
            "Adaptive limit partner ({" in w.log() and "in flight 8 -> 6 at once" in w.log() for w in workers
        )
        changes = sum(
            (stats_of(app, name) or {"counters": {}})["counters"].get("in_flight_adapted", 0)
            for name in names
        )
        assert changes >= 2
        waited = sum(
            (stats_of(app, name) or {"counters": {}})["counters"].get("in_flight_waited", 0) for name in names
        )
        assert waited >= 1  # calls over N were put off, and served once all the same
        # explain tells such a call why it waited (seen red with no record kept at the put-off).
        found = re.search(r"adaptive\.in_flight\[([0-9a-f-]+)\] waits: in-flight limit", workers[0].log())
        found = found or re.search(r"adaptive\.in_flight\[([0-9a-f-]+)\] waits: in-flight", workers[1].log())
        assert found is not None
        told = [d for d in explain(app, found.group(1)).decisions if d.kind == "in_flight"]
        assert told and "waited: in-flight limit partner ran " in told[-1].text, told


#: A call of the tenant's partition: the first one's process dies mid-run, holding its slot.
DYING = """
import signal

app.conf.redislock_limits = {
    "api": {"floor": 1, "ceiling": 100, "start": 100, "in_flight": {"floor": 1, "ceiling": 1}},
}


@app.task(base=SingletonTask, bind=True, name="flight.dying", lock=False, rate_limits={"api": ["tenant"]},
          lock_timeout=120)
def dying(self, tenant, n):
    coord.rpush("ran:" + tenant, n)
    if n == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return n
"""


def test_a_dead_childs_in_flight_slot_is_given_back_by_its_parent_not_at_the_end_of_its_lease(
    urls: dict[str, str],
    worker_process: Callable[..., WorkerProcess],
    make_app: Callable[..., Celery],
    coord: redis.Redis,
    locks: redis.Redis,
) -> None:
    # Seen red without the gate's held_slots: the dead child's slot was held for its 120 s lease,
    # the next call of the tenant put off again and again.
    proc = worker_process(worker_module(urls, "flight", DYING), "-c", "1")
    client = make_app()
    first = client.send_task("flight.dying", args=["t1", 0])
    assert poll(lambda: coord.llen("ran:t1") >= 1, 30)
    second = client.send_task("flight.dying", args=["t1", 1])
    assert second.get(timeout=40) == 1, proc.log()
    assert "Gave back in_flight slot" in proc.log()
    assert first.state == "FAILURE"  # its process died: WorkerLostError, not run again
    assert [int(n) for n in coord.lrange("ran:t1", 0, -1)] == [0, 1]


def poll_served(load: Load, sent: int) -> bool:
    return bool(poll(lambda: set(range(sent)) <= set(load.served()), 90))


def test_limit_show_the_page_and_the_gauge_say_calls_at_once_their_bounds_and_last_reason(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    # Seen red before they read the in-flight state: show, the page and the gauge said the rate
    # alone.
    import json

    from celery.bin.base import CLIContext
    from click.testing import CliRunner
    from prometheus_client import generate_latest

    from celery_redislock.engine.adaptive_rates import report_call
    from celery_redislock.ops.limit_cli import limit as limit_command
    from celery_redislock.ops.metrics import lock_registry
    from celery_redislock.ops.web import create_app

    limit = {"floor": 1, "ceiling": 40, "start": 10, "in_flight": {"floor": 1, "ceiling": 8, "start": 8}}
    app = make_app(redislock_limits={"partner": limit})
    runtime = runtime_for(app)
    log = named_log(runtime.settings.key_prefix, "partner")
    adaptive = runtime.settings.limits["partner"].adaptive
    assert adaptive is not None and adaptive.in_flight is not None
    why = "RateLimitPaused (retry after 1s)"
    report_call(runtime.scripts, log, "partner", adaptive, "over", 0.0, why)
    change = report_flight(runtime.scripts, log, adaptive.in_flight, "over", 0.0, why)
    assert change is not None and (change.old, change.new) == (8, 6)
    assert take_flight(runtime.scripts, log, "h1", 60_000, adaptive.in_flight).taken

    def run(*args: str) -> Any:
        return CliRunner().invoke(
            limit_command, list(args), obj=CLIContext(app=app, no_color=True, workdir=".", quiet=False)
        )

    shown = run("show").output
    assert "adaptive 1/s to 40/s, start 10/s; in flight 1 to 8 at once, start 8  [redislock_limits]" in shown
    assert f"in flight 6 at once, 1 running (1 change(s), the last: {why})" in shown
    (listed,) = [each for each in json.loads(run("show", "--json").output) if each["name"] == "partner"]
    assert listed["adaptive"]["in_flight"] == {"floor": 1, "ceiling": 8, "start": 8}
    flight = listed["partitions"][0]["adaptive"]["in_flight"]
    assert (flight["limit"], flight["running"], flight["reason"]) == (6, 1, why)

    page = create_app(app, poll_interval=60)
    try:
        html = page.test_client().get("/").get_data(as_text=True)
    finally:
        page.extensions["redislock"].stop()
    assert "(adaptive, 1/s to 40/s; in flight 1 to 8 at once)" in html
    assert (
        f'<span class="adaptive">6 at once</span> <span class="note">(1 running; last change: {why})' in html
    )

    metrics = generate_latest(lock_registry(app=app)).decode()
    assert f'redislock_adaptive_in_flight{{limit="partner",partition="{log}"}} 6.0' in metrics
    assert 'redislock_adaptive_in_flight_ceiling{limit="partner"} 8.0' in metrics
