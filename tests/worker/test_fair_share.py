"""Fair share on real workers, on a Redis broker (kombu rotates the lanes it BRPOPs after each
message) and on RabbitMQ (one channel's consumers of the lanes, served by credit): with tenant
A's calls queued first, tenant B's calls start before A's backlog drains, where a plain task
makes B wait for all of it; the cap holds across two workers; a weighted tenant gets more of the
starts. Orders and counts are asserted, never time.

RabbitMQ's turns are random, not strict: each time a channel's credit frees, its limiter wakes
the lane queues waiting on it in a random rotation (rabbit_limiter's notify_queues: "each queue
has an equal chance of being notified first"), so each start goes to one of the k busy lanes,
each as likely. A tenant's count of starts is then binomial: on RabbitMQ the bounds asserted are
those it keeps but for odds far below one in ten thousand runs."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from amqp.exceptions import ChannelError
from celery import Celery

from celery_redislock.contrib.testing import poll
from celery_redislock.contrib.testing.servers import free_port
from celery_redislock.engine.counting import add_count_listener, remove_count_listener
from celery_redislock.engine.fair_lanes import FairLanes, hashed_lane
from celery_redislock.engine.script_runner import ScriptRunner
from celery_redislock.integration.queues import lane_name

from .conftest import queued_count, stats_of
from .mode_harness import Deployment, ModeTask, node

#: A short body: the tenant's start, in the order the worker starts calls.
BODY = """
coord.rpush("starts", tenant)
return n
"""

#: A body that holds while the test counts how many of a tenant run at once.
HELD_BODY = """
import time
running = coord.incr("running:" + tenant)
coord.rpush("peaks:" + tenant, running)
coord.rpush("starts", tenant)
time.sleep(0.05)  # the body's work: long enough that starts overlap if the cap let them
coord.decr("running:" + tenant)
return n
"""

FLOOD = 300
FEW = 10


def fair(**options: Any) -> ModeTask:
    return ModeTask("fair.work", "tenant, n", BODY, {"fair_key": ["tenant"], **options})


def starts(coord: redis.Redis) -> list[str]:
    return [entry.decode() for entry in coord.lrange("starts", 0, -1)]


def drain(coord: redis.Redis, results: list[Any], total: int) -> list[str]:
    # A deadline for a stall, not a pace: a loaded machine with RabbitMQ and solo runs a few a second.
    assert poll(lambda: coord.llen("starts") >= total, 600, interval=0.2), len(starts(coord))
    assert sorted(result.get(timeout=30) for result in results) == sorted(r.args[1] for r in results)
    return starts(coord)


class Sent:
    """A sent call with the arguments it was sent with (AsyncResult does not keep them)."""

    def __init__(self, result: Any, args: tuple[str, int]) -> None:
        self.result, self.args = result, args

    def get(self, timeout: float) -> Any:
        return self.result.get(timeout=timeout)


def lane_sizes(app: Celery, lanes: int) -> list[int]:
    """How many messages wait in each lane of the queue ``celery``."""
    sizes = []
    for lane in range(lanes):
        try:
            sizes.append(queued_count(app, lane_name("celery", lane)))
        except ChannelError:  # a Redis broker keeps no key for an empty queue
            sizes.append(0)
    return sizes


def send_flood_then_few(sender: Any) -> list[Sent]:
    calls = [("A", n) for n in range(FLOOD)] + [("B", n) for n in range(FEW)]
    return [Sent(sender.delay(*call), call) for call in calls]


@pytest.mark.parametrize("pool", ["prefork", "solo", "threads"])
def test_b_starts_before_a_flood_queued_first_drains(
    pool: str, request: pytest.FixtureRequest, deployment: Deployment, coord: redis.Redis
) -> None:
    task = fair(fair_lanes=4)
    app = deployment.app()
    sent = send_flood_then_few(task.sender(app))  # all queued before any worker runs
    # A's calls fill one lane, B's another: what the worker then serves in turn.
    assert sorted(lane_sizes(app, 4)) == [0, 0, FEW, FLOOD]
    deployment.start(task, "-c", "1", "--prefetch-multiplier", "1", "-n", node("fair"), pool=pool)
    order = drain(coord, sent, FLOOD + FEW)
    b_positions = [i for i, tenant in enumerate(order) if tenant == "B"]
    assert len(b_positions) == FEW and order.count("A") == FLOOD
    # Two busy lanes served in turn: B's calls start among the first few dozen, each before A's
    # next few, where FIFO (below) starts them after all of A's. RabbitMQ picks one of the two
    # lanes at random for each start: B's tenth among the first 60 but for odds below 1e-6.
    rabbitmq = request.config.getoption("broker").startswith("rabbitmq")
    assert b_positions[-1] < (6 if rabbitmq else 4) * FEW, b_positions


@pytest.mark.redis_broker("the plain task's FIFO order, the contrast to the fair one")
def test_a_plain_task_makes_b_wait_for_the_whole_flood(deployment: Deployment, coord: redis.Redis) -> None:
    task = ModeTask("fair.plain", "tenant, n", BODY)
    sent = send_flood_then_few(task.sender(deployment.app()))
    deployment.start(task, "-c", "1", "--prefetch-multiplier", "1", "-n", node("plain"))
    order = drain(coord, sent, FLOOD + FEW)
    assert [i for i, tenant in enumerate(order) if tenant == "B"] == list(range(FLOOD, FLOOD + FEW))


def test_the_cap_holds_across_two_workers(deployment: Deployment, coord: redis.Redis) -> None:
    task = ModeTask("fair.capped", "tenant, n", HELD_BODY, {"fair_key": ["tenant"], "fair_cap": 1})
    names = [node("cap1"), node("cap2")]
    for name in names:
        deployment.start(task, "-c", "2", "-n", name)
    app = deployment.app()
    sender = task.sender(app)
    calls = [("A", n) for n in range(12)] + [("B", n) for n in range(4)]
    sent = [Sent(sender.delay(*call), call) for call in calls]
    drain(coord, sent, len(calls))
    # Four processes, at most one of A's calls at once: the cap, not the pool, bounded them.
    assert {int(peak) for peak in coord.lrange("peaks:A", 0, -1)} == {1}
    assert coord.llen("peaks:A") == 12 and coord.llen("peaks:B") == 4
    capped = 0
    for name in names:
        stats = stats_of(app, name)
        assert stats is not None
        capped += stats["counters"]["fair_capped"]
    assert capped > 0  # calls came to a worker over the cap and waited, none was lost


def test_a_weighted_tenant_gets_more_of_the_starts(
    request: pytest.FixtureRequest, deployment: Deployment, coord: redis.Redis
) -> None:
    task = fair(fair_lanes=8, fair_weights={"heavy": 3})
    app = deployment.app()
    sender = task.sender(app)
    calls = [("heavy", n) for n in range(60)] + [("light", n) for n in range(60)]
    sent = [Sent(sender.delay(*call), call) for call in calls]
    # The weight, as fair share applies it: heavy's calls over three lanes, light's in one.
    assert sorted(lane_sizes(app, 8)) == [0, 0, 0, 0, 20, 20, 20, 60]
    deployment.start(task, "-c", "1", "--prefetch-multiplier", "1", "-n", node("weights"))
    order = drain(coord, sent, len(calls))
    first = order[:60]
    # Four busy lanes, three of them heavy's: about three of every four starts while both last.
    heavy, light = first.count("heavy"), first.count("light")
    if request.config.getoption("broker").startswith("rabbitmq"):
        # Each start from one of the four lanes at random, so light's count is binomial around
        # a quarter, with no floor near it: light is not held behind heavy's backlog (FIFO
        # gives it none of these) and heavy gets more.
        assert 1 <= light < heavy, first
    else:
        assert light >= 10, first
        assert heavy >= 2 * light, first


def test_redis_unreachable_at_send_sends_to_the_hashed_lane(
    deployment: Deployment, coord: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    task = fair(fair_lanes=4)
    app = deployment.app(redislock_url=f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    sender = task.sender(app)
    counted: list[str] = []
    listener = lambda name, *_: counted.append(name)  # noqa: E731
    add_count_listener(listener)
    try:
        with caplog.at_level(logging.WARNING, logger="celery_redislock.gates.fair_share"):
            sent = [Sent(sender.delay("acme", n), ("acme", n)) for n in range(3)]
    finally:
        remove_count_listener(listener)
    sizes = lane_sizes(app, 4)
    assert sizes[hashed_lane("acme", 4)] == 3 and sum(sizes) == 3  # all sent, to the tenant's lane
    assert counted.count("fair_unassigned") == 3
    warnings = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warnings) == 1 and "hashed lanes of celery" in warnings[0]
    # The worker (its own lock Redis up) runs them: nothing was lost.
    deployment.start(task, "-c", "1", "-n", node("fair-down"))
    assert drain(coord, sent, 3) == ["acme"] * 3


@pytest.mark.redis_broker(
    "RabbitMQ drops an expired message in the broker: no worker revokes it (test_fair_expiry.py)"
)
def test_an_expired_call_is_counted_out_of_its_backlog(deployment: Deployment, coord: redis.Redis) -> None:
    task = fair(fair_lanes=2)
    app = deployment.app()
    sender = task.sender(app)
    gone = datetime.now(timezone.utc) - timedelta(seconds=1)
    expired = [sender.apply_async(("acme", n), expires=gone) for n in range(3)]
    sent = [Sent(sender.delay("bravo", 0), ("bravo", 0))]
    lanes = FairLanes(ScriptRunner(redis.Redis.from_url(deployment.urls["locks"])), "redislock", "celery")
    # Each send sweeps a few calls whose expiry passed: some of the three may be counted out already.
    assert lanes.state().backlog("bravo") == 1 and lanes.state().queued >= 1
    deployment.start(task, "-c", "1", "-n", node("fair-expired"))
    drain(coord, sent, 1)
    assert all(result.get(timeout=15, propagate=False) is not None for result in expired)  # revoked
    assert poll(lambda: lanes.state().queued == 0, 15), lanes.state()
    assert lanes.state().tenants == {}


def test_a_call_refused_at_send_is_counted_in_no_backlog(deployment: Deployment) -> None:
    task = fair(lock_on="enqueue", lock_key=["tenant"])
    sender = task.sender(deployment.app())
    first = sender.delay("acme", 0)
    again = sender.delay("acme", 1)  # its key is queued already: answered with the first's result
    assert again.id == first.id
    lanes = FairLanes(ScriptRunner(redis.Redis.from_url(deployment.urls["locks"])), "redislock", "celery")
    assert lanes.state().queued == 1 and lanes.state().backlog("acme") == 1


def test_a_capped_call_keeps_its_rate_limit_slot_and_runs_once(
    deployment: Deployment, coord: redis.Redis
) -> None:
    # Both gates on one tenant: calls postponed for their rate slot, then over the cap as they
    # come back. Each must run once: none dropped as a second copy, none run twice.
    options = {
        "fair_key": ["tenant"],
        "fair_cap": 2,
        "global_rate_limit": "2/s",
        "rate_limit_key": ["tenant"],
    }
    # Two at once of a body longer than the rate's spacing: more starts than the rate allows,
    # and calls back for their slot find the cap taken.
    task = ModeTask("fair.rated", "tenant, n", HELD_BODY.replace("0.05", "0.5"), options)
    names = [node("rated1"), node("rated2")]
    for name in names:
        deployment.start(task, "-c", "2", "-n", name)
    app = deployment.app()
    sender = task.sender(app)
    sent = [Sent(sender.delay("A", n), ("A", n)) for n in range(10)]
    assert drain(coord, sent, 10) == ["A"] * 10
    assert {int(peak) for peak in coord.lrange("peaks:A", 0, -1)} <= {1, 2}
    assert not poll(lambda: coord.llen("starts") > 10, 3)  # no copy runs later
    counters = [stats["counters"] for stats in (stats_of(app, name) for name in names) if stats]
    assert len(counters) == 2, counters
    # (Which calls were postponed for a slot or capped depends on the machine's pace: not asserted.)
    assert sum(c["rate_copies_dropped"] for c in counters) == 0
