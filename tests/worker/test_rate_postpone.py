"""``global_rate_limit``'s postponed calls on real workers: a call never waits in the broker longer
than it can hold it (hops, logged at DEBUG only, counted once), a second copy of a call never runs
and never reserves (dropped, logged, counted), and a revoked or expired call gives its slot back."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

import pytest
import redis
from amqp.exceptions import ChannelError
from celery import Celery

from celery_redislock.contrib.testing import WorkerProcess, poll
from celery_redislock.engine.rate_limiter import decide
from celery_redislock.engine.rates import rate_of
from celery_redislock.integration.runtime import runtime_for

from .conftest import queued_count, restore_visible, stats_of, visibility_redelivery
from .mode_harness import ModeTask, node
from .test_rate_limit import partition_key, starts

BODY = """
import time
coord.rpush("starts:" + account, f"{time.time()!r} {n} {self.request.retries} {self.request.id}")
return n
"""


def queued(app: Celery) -> int:
    """Messages waiting in the queue (a Redis broker has no key for an empty one)."""
    try:
        return queued_count(app)
    except ChannelError:
        return 0


def limited(rate: str, **options: object) -> ModeTask:
    return ModeTask(
        "rate.hops", "account, n", BODY, {"global_rate_limit": rate, "rate_limit_key": ["account"], **options}
    )


def settings(**conf: object) -> str:
    """Worker-module lines: the app's settings, and the gate's DEBUG lines in its log."""
    return (
        "import logging\n"
        'logging.getLogger("celery_redislock.gates").setLevel(logging.DEBUG)\n'
        f"app.conf.update({conf!r})\n"
    )


@visibility_redelivery
def test_postponed_calls_run_once_when_they_wait_longer_than_the_visibility_timeout(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # The reproducer: the last of 12 calls at 1/s waits 11 s, the broker gives out a
    # message unacknowledged for 3 s again.
    transport = {"broker_transport_options": {"visibility_timeout": 3}}
    task = limited("1/s")
    name = node("rate-visibility")
    proc = task.start(worker_process, urls, "-c", "2", "-n", name, module=settings(**transport))
    app = make_app(**transport)
    sender = task.sender(app)
    results = [sender.delay("acme", n) for n in range(12)]

    def done() -> bool:
        # What the transport does every few seconds in each consumer: give out again every
        # message unacknowledged for longer than the visibility timeout.
        restore_visible(app)
        return all(result.ready() for result in results) and queued(app) == 0

    assert poll(done, 60, interval=0.3)
    assert sorted(result.get(timeout=1) for result in results) == list(range(12))
    # Two visibility timeouts more: a copy given out again would run, or be postponed again.
    assert not poll(lambda: done() and coord.llen("starts:acme") > 12, 7, interval=0.3)
    assert sorted(n for _, n, _, _ in starts(coord, "acme")) == list(range(12))
    log = proc.log()
    assert log.count("Rate-limited rate.hops[") == 11, log[-3000:]
    assert "Re-queued rate-limited rate.hops[" in log  # waits past 1.5 s were made of hops
    assert queued(app) == 0
    stats = stats_of(app, name)
    assert stats is not None and stats["counters"]["rate_limited"] == 11


def test_a_wait_longer_than_max_postpone_is_made_of_hops_logged_at_debug(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    task = limited("1/s")
    name = node("rate-hops")
    proc = task.start(
        worker_process, urls, "-c", "2", "-n", name, module=settings(redislock_max_postpone=0.5)
    )
    app = make_app()
    sender = task.sender(app)
    take_slots(app, sender, 2)
    results = [sender.delay("acme", n) for n in range(5)]
    assert sorted(result.get(timeout=40) for result in results) == list(range(5))
    assert sorted(n for _, n, _, _ in starts(coord, "acme")) == list(range(5))
    log = proc.log()
    # Five calls postponed once each; the last waits 6 s in hops of at most 0.5 s (a second on
    # native delayed delivery, which carries nothing shorter).
    assert log.count("Rate-limited rate.hops[") == 5, log[-3000:]
    hops = [line for line in log.splitlines() if "Re-queued rate-limited rate.hops[" in line]
    assert len(hops) >= 5 and all("DEBUG" in line for line in hops), hops
    stats = stats_of(app, name)
    assert stats is not None and stats["counters"]["rate_limited"] == 5


def take_slots(app: Celery, sender: object, count: int) -> None:
    """Take the partition's start and reserve its next ``count - 1`` slots (not calls of the
    worker's): a call sent next waits more than a second, so it is re-published on every broker
    (native delayed delivery carries whole seconds: a shorter wait is waited out in the worker)."""
    key = partition_key(app, sender, "acme", 0)
    decisions = [
        decide(runtime_for(app).scripts, key, rate_of("1/s"), f"filler{n}", reserve=True)
        for n in range(count)
    ]
    assert [decision.allowed or decision.reserved for decision in decisions] == [True] * count


def test_a_second_copy_of_a_call_never_runs_and_never_reserves(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # One process: the copies are decided one after the other, in the order they were sent.
    task = limited("1/s")
    name = node("rate-copies")
    proc = task.start(worker_process, urls, "-c", "1", "-n", name, module=settings())
    app = make_app()
    sender = task.sender(app)
    # A call sent twice (as a broker gives a message out again): the first copy runs, the
    # second finds its attempt started and finished.
    first = [sender.apply_async(("acme", 0), task_id="call-0") for _ in range(2)]
    assert first[0].get(timeout=30) == 0
    # A call postponed, sent twice: the second copy finds the slot held by the first's hop.
    take_slots(app, sender, 2)
    second = [sender.apply_async(("acme", 1), task_id="call-1") for _ in range(2)]
    assert second[0].get(timeout=30) == 1
    assert poll(lambda: proc.log().count("Dropped copy of rate-limited rate.hops[") == 2, 15), proc.log()[
        -3000:
    ]
    assert poll(lambda: queued(app) == 0, 15)
    assert sorted(n for _, n, _, _ in starts(coord, "acme")) == [0, 1]
    log = proc.log()
    assert "Dropped copy of rate-limited rate.hops[call-0]" in log and "it has run already" in log
    assert (
        "Dropped copy of rate-limited rate.hops[call-1]" in log and "another copy of it holds its slot" in log
    )
    stats = stats_of(app, name)
    assert stats is not None
    assert stats["counters"]["rate_copies_dropped"] == 2 and stats["counters"]["rate_limited"] == 1
    # Nothing the calls reserved is left behind.
    key = partition_key(app, sender, "acme", 0)
    assert [m for m in locks.zrange(key, 0, -1) if m.startswith(b"r:call")] == []


def test_a_revoked_postponed_call_gives_its_slot_back(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    task = limited("2/m")
    name = node("rate-revoke")
    # Hops of 1 s: the worker that holds the revoked call's message sees it within a second.
    proc = task.start(worker_process, urls, "-c", "1", "-n", name, module=settings(redislock_max_postpone=1))
    app = make_app()
    sender = task.sender(app)
    key = partition_key(app, sender, "acme", 0)
    assert [sender.delay("acme", n).get(timeout=20) for n in range(2)] == [0, 1]
    [g0] = [score for m, score in locks.zrange(key, 0, 0, withscores=True)]
    waiting = sender.delay("acme", 2)
    assert poll(lambda: locks.zscore(key, f"r:{waiting.id}") is not None, 15)
    waiting.revoke()
    assert poll(lambda: locks.zscore(key, f"r:{waiting.id}") is None, 15), proc.log()[-3000:]
    assert poll(lambda: waiting.state == "REVOKED", 10), waiting.state
    assert f"Gave back the slot of revoked rate-limited rate.hops[{waiting.id}]" in proc.log()
    # The next call is placed where the revoked one was: a period after the first start, not a
    # period and a half.
    later = sender.delay("acme", 3)
    assert poll(lambda: locks.zscore(key, f"r:{later.id}") is not None, 15)
    assert locks.zscore(key, f"r:{later.id}") - g0 <= 60_001
    later.revoke()
    assert poll(lambda: locks.zscore(key, f"r:{later.id}") is None, 15)
    assert sorted(n for _, n, _, _ in starts(coord, "acme")) == [0, 1]


def test_a_revoked_call_waiting_in_the_worker_gives_its_slot_back_as_the_revoke_reaches_it(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # Issue 50 (5): the postponed call waits out its whole wait in the worker's memory (one hop,
    # as by default), so Celery's task_revoked would come only at its slot, a period away.
    # Seen red before the revoke hook: the next call placed half a period after the revoked one.
    if "quorum" in urls["broker_conf"]:
        pytest.skip("native delayed delivery holds the waiting call in the broker, not the worker")
    task = limited("2/m")
    proc = task.start(
        worker_process,
        urls,
        "-c",
        "1",
        "-n",
        node("rate-revoke-waiting"),
        module=settings(redislock_max_postpone=300),
    )
    app = make_app()
    sender = task.sender(app)
    key = partition_key(app, sender, "acme", 0)
    assert [sender.delay("acme", n).get(timeout=20) for n in range(2)] == [0, 1]
    waiting = sender.delay("acme", 2)
    assert poll(lambda: locks.zscore(key, f"r:{waiting.id}") is not None, 15), proc.log()[-3000:]
    slot = float(locks.zscore(key, f"r:{waiting.id}") or 0)
    # Its copy received, so held by the worker as an ETA message (one received later would be
    # discarded, and its slot given back, at its receipt).
    received = f"Task rate.hops[{waiting.id}] received"
    assert poll(lambda: proc.log().count(received) == 2, 15), proc.log()[-3000:]
    waiting.revoke()
    assert poll(lambda: f"Tasks flagged as revoked: {waiting.id}" in proc.log(), 15), proc.log()[-3000:]
    # The worker's parent decides nothing for another call until its revoke command returned.
    later = sender.delay("acme", 3)
    assert poll(lambda: locks.zscore(key, f"r:{later.id}") is not None, 15), proc.log()[-3000:]
    placed = float(locks.zscore(key, f"r:{later.id}") or 0)
    # Decided before the revoked call's slot came: the give-back at its ETA cannot have made room.
    assert server_ms(locks) < slot, "the worker took too long: the revoked call's ETA came first"
    assert placed <= slot + 1, (placed - slot, proc.log()[-3000:])  # its slot, not half a period later
    assert locks.zscore(key, f"r:{waiting.id}") is None
    assert f"Gave back the slot of revoked rate-limited rate.hops[{waiting.id}]" in proc.log()
    later.revoke()
    assert poll(lambda: locks.zscore(key, f"r:{later.id}") is None, 15)
    assert sorted(n for _, n, _, _ in starts(coord, "acme")) == [0, 1]


# The "block" account's call holds the worker until the test lets it go.
HELD_BODY = """
import time
if account == "block":
    coord.rpush("blocking", n)
    while not coord.exists("unblock"):
        time.sleep(0.02)
coord.rpush("starts:" + account, f"{time.time()!r} {n} {self.request.retries} {self.request.id}")
return n
"""


def server_ms(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds * 1000 + micros / 1000


def test_a_postponed_call_that_expires_in_the_worker_gives_its_slot_back(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    task = ModeTask(
        "rate.expiry", "account, n", HELD_BODY, {"global_rate_limit": "1/s", "rate_limit_key": ["account"]}
    )
    # Solo: one call at a time, and a due message's timer waits while a call runs.
    proc = task.start(worker_process, urls, "-n", node("rate-expiry"), pool="solo")
    app = make_app()
    sender = task.sender(app)
    key = partition_key(app, sender, "acme", 1)
    scripts = runtime_for(app).scripts
    # The second's start and the next three slots are taken here (by callers that never come
    # back): the call is placed about four seconds ahead, whatever the worker's pace.
    assert decide(scripts, key, rate_of("1/s"), "filler", reserve=True).allowed
    for n in range(3):
        assert not decide(scripts, key, rate_of("1/s"), f"slot{n}", reserve=True).allowed
    slot = float(locks.zscore(key, "r:slot2") or 0) + 1000
    # After its slot (so it is postponed, not ended at once), and early in the period after it,
    # while its reservation still counts in the window: what the give-back frees.
    expires_ms = slot + 150
    expires = datetime.fromtimestamp(expires_ms / 1000, tz=timezone.utc)
    call = sender.apply_async(("acme", 1), expires=expires)
    assert poll(lambda: locks.zscore(key, f"r:{call.id}") is not None, 15), proc.log()[-3000:]
    # The worker is held from before the call's message comes due until after it expires.
    blocker = sender.delay("block", 0)
    assert poll(lambda: coord.llen("blocking") == 1, 15), proc.log()[-3000:]
    assert server_ms(locks) < slot - 100, "held too late: the call's message came due first"
    assert poll(lambda: server_ms(locks) > expires_ms, 15)
    coord.set("unblock", 1)
    assert blocker.get(timeout=15) == 0
    assert poll(lambda: locks.zscore(key, f"r:{call.id}") is None, 15), proc.log()[-3000:]
    assert poll(lambda: call.state == "REVOKED", 10), call.state
    assert poll(
        lambda: f"Gave back the slot of expired rate-limited rate.expiry[{call.id}]" in proc.log(), 10
    ), proc.log()[-2000:]
    assert coord.llen("starts:acme") == 0
