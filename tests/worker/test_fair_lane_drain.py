"""A release that removes ``fair_key`` or lowers ``fair_lanes`` strands no call (issue 50,
point 7): calls a fair release queued in lanes the next release's workers would not consume are
found as those workers start and run there, each counted out of its backlog, with the lock. Real
workers on the test's broker (a Redis broker, or RabbitMQ with ``--broker rabbitmq``)."""

from __future__ import annotations

from typing import Any

import redis
from celery import Celery

from celery_redislock.contrib.testing import poll
from celery_redislock.engine.fair_lanes import FairLanes
from celery_redislock.engine.script_runner import ScriptRunner
from celery_redislock.ops.fair import show_fair

from .conftest import lock_keys
from .mode_harness import Deployment, ModeTask, node
from .test_fair_share import lane_sizes

BODY = """
coord.rpush("runs", f"{tenant}:{n}")
return n
"""
#: The task as the release that sent the calls declared it, and as the next releases do.
FAIR = ModeTask("drain.work", "tenant, n", BODY, {"fair_key": ["tenant"], "fair_lanes": 8})
PLAIN = ModeTask("drain.work", "tenant, n", BODY)
FEWER = FAIR.with_options(fair_lanes=2)
TENANTS = [f"t{i}" for i in range(8)]


def backlog(app: Celery, locks: redis.Redis) -> int:
    """Calls the lock Redis counts as queued in the lanes of ``celery``."""
    runner = ScriptRunner(locks)
    return FairLanes(runner, app.conf.get("redislock_key_prefix") or "redislock", "celery").state().queued


def send_in_lanes(app: Celery) -> list[tuple[Any, int]]:
    """20 calls of 8 tenants, each tenant in a lane of its own (the least loaded at its first
    call): lanes 0 to 7 all hold calls."""
    sender = FAIR.sender(app)
    calls = [(TENANTS[n % len(TENANTS)], n) for n in range(20)]
    sent = [(sender.delay(*call), call[1]) for call in calls]
    assert sum(lane_sizes(app, 8)) == 20 and all(lane_sizes(app, 8))
    return sent


def run_all(sent: list[tuple[Any, int]], coord: redis.Redis) -> None:
    # A deadline for a stall: stranded calls never run at all.
    assert poll(lambda: coord.llen("runs") >= len(sent), 60, interval=0.1), coord.lrange("runs", 0, -1)
    assert sorted(result.get(timeout=30) for result, _ in sent) == sorted(n for _, n in sent)
    assert coord.llen("runs") == len(sent)  # each once


def test_a_worker_without_fair_key_runs_the_calls_left_in_the_lanes(
    deployment: Deployment, coord: redis.Redis, locks: redis.Redis
) -> None:
    app = deployment.app()
    sent = send_in_lanes(app)
    assert backlog(app, locks) == 20
    # The next release's view (no fair_key): `fair show` still shows what waits in the lanes.
    plain = deployment.app()
    PLAIN.sender(plain)
    [left] = show_fair(plain)
    assert (left.queue, left.lanes, left.queued, len(left.tenants)) == ("celery", 8, 20, 8)
    in_lane_7 = lane_sizes(app, 8)[7]  # whose calls are there depends on the tenants' hashes
    proc = deployment.start(PLAIN, "-c", "2", "-n", node("plain"))
    run_all(sent, coord)
    assert f"Consuming lane celery.fair.7: {in_lane_7} call(s) wait there" in proc.log()
    assert lane_sizes(app, 8) == [0] * 8
    # Counted out of their backlogs as the worker received them; each lock taken and freed.
    assert poll(lambda: backlog(app, locks) == 0, 10), backlog(app, locks)
    assert show_fair(plain) == []  # nothing left: no queue to show
    assert "Skipped duplicate" not in proc.log()
    assert [key for key in lock_keys(locks) if b"drain.work" in key and b"fair" not in key] == []


def test_a_worker_with_fewer_lanes_runs_the_calls_left_in_the_others(
    deployment: Deployment, coord: redis.Redis, locks: redis.Redis
) -> None:
    app = deployment.app()
    sent = send_in_lanes(app)
    proc = deployment.start(FEWER, "-c", "2", "-n", node("fewer"))
    run_all(sent, coord)
    log = proc.log()
    # Lanes 0 and 1 are its own; 2 to 7 are drained.
    assert "Consuming lane celery.fair.1:" not in log and "Consuming lane celery.fair.2:" in log
    assert lane_sizes(app, 8) == [0] * 8
    assert poll(lambda: backlog(app, locks) == 0, 10), backlog(app, locks)
