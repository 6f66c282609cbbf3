"""``lock=False`` on real workers, on both brokers (this file is in CI's RabbitMQ pass): fair share
without the lock serves a tenant in turn with a flood queued before it as with the lock; two calls
with the same arguments run at once (no lock refuses either); the lock Redis keeps nothing but
fair share's own keys; a rate limit still holds, and ``self.request.redislock.pause`` still
pauses it."""

from __future__ import annotations

from collections import Counter

import redis

from celery_redislock.engine.keys import fair_expiry_key, fair_keys, fair_marks_key
from tests.harness import GrantRecorder

from .conftest import open_gate, stats_of, wait_started
from .mode_harness import Deployment, ModeTask, key_for, node
from .test_fair_share import HELD_BODY
from .test_fair_tenants import FEW, FLOOD, ahead, starts, tenant_task
from .test_rate_limit import check_drain, partition_key

#: Every key fair share keeps for the default queue: all that an unlocked fair task leaves.
FAIR_KEYS = {
    *fair_keys("redislock", "celery"),
    fair_expiry_key("redislock", "celery"),
    fair_marks_key("redislock", "celery"),
}


def test_b_is_served_in_turn_without_the_lock(
    coord: redis.Redis, locks: redis.Redis, deployment: Deployment
) -> None:
    task = tenant_task("fair.unlocked", fair_key=["tenant"], fair_lanes=4, lock=False)
    app = deployment.app()
    sender = task.sender(app)
    calls = [("A", n) for n in range(FLOOD)] + [("B", n) for n in range(FEW)]
    for call in calls:
        sender.delay(*call)
    name = node("fair-unlocked")
    deployment.start(task, "-c", "2", "--prefetch-multiplier", "1", "-n", name)
    order = starts(coord, len(calls))
    assert Counter(order) == Counter(calls)  # every call once
    # The same bound as with the lock (test_fair_tenants): the lanes serve B, not the lock.
    bound = FEW + 4 if deployment.urls["broker"].startswith("redis") else FLOOD // 2
    assert ahead(order, "A") <= bound, order
    # No lock key, no holder: fair share's own keys alone, and each call's record (explain).
    left = {key.decode() for key in locks.keys("*") if not key.endswith(b"}:explain")}
    assert left <= FAIR_KEYS, left
    # Seen red with lock=False ignored (every plan locked): 110 locks acquired and released.
    stats = stats_of(app, name)
    assert stats is not None
    assert (stats["counters"]["acquired"], stats["counters"]["released"]) == (0, 0)


def test_two_calls_with_the_same_arguments_run_at_once(
    coord: redis.Redis, locks: redis.Redis, deployment: Deployment
) -> None:
    # Seen red with lock=False left out: the second call was skipped as a duplicate (one start).
    task = ModeTask("fair.same", "tag", "return hold(self, tag)", {"fair_key": ["tag"], "lock": False})
    deployment.start(task, "-c", "2", "--prefetch-multiplier", "1", "-n", node("fair-same"))
    app = deployment.app()
    sender = task.sender(app)
    results = [sender.delay("t") for _ in range(2)]
    started = wait_started(coord, "t", 2)  # both started, neither has ended (the gate is shut)
    assert len({task_id for _, task_id in started}) == 2
    assert not locks.exists(key_for(app, sender, "t"))
    open_gate(coord, "t")
    assert [result.get(timeout=30) for result in results] == ["done t", "done t"]


#: Records each start as the rate-limit tests do; call 0 pauses its limit once (a 429) by
#: ``self.request.redislock.pause`` when ``pause`` is set.
RATE_BODY = """
import time
if pause and n == 0 and coord.setnx("paused", 1):
    self.request.redislock.pause(0.5)
coord.rpush("starts:" + account, f"{time.time()!r} {n} {self.request.retries} {self.request.id}")
return n
"""

RATE_OPTIONS = {"global_rate_limit": "5/s", "rate_limit_key": ["account"], "acks_late": True, "lock": False}


def test_a_rate_limit_without_the_lock_keeps_its_limit(
    coord: redis.Redis, locks: redis.Redis, deployment: Deployment
) -> None:
    # Seen red with the gates skipped under lock=False: 15 starts in the first second.
    task = ModeTask("rate.unlocked", "account, n, pause", RATE_BODY, RATE_OPTIONS)
    deployment.start(task, "-c", "2", "-n", node("rate-unlocked"))
    app = deployment.app()
    sender = task.sender(app)
    record = GrantRecorder(locks, partition_key(app, sender, "acme", 0, False))
    results = [sender.delay("acme", n, False) for n in range(15)]
    assert sorted(result.get(timeout=60) for result in results) == list(range(15))
    check_drain(coord, "acme", 15, 5, grants=record.stop())
    assert not locks.exists(key_for(app, sender, "acme", 0, False))


def test_request_redislock_pause_pauses_a_rate_limit_without_the_lock(
    coord: redis.Redis, deployment: Deployment
) -> None:
    # Seen red with request.redislock None under lock=False: pause() raised an AttributeError.
    task = ModeTask("rate.unlocked_pause", "account, n, pause", RATE_BODY, RATE_OPTIONS)
    proc = deployment.start(task, "-c", "2", "-n", node("rate-unlocked-pause"))
    sender = task.sender(deployment.app())
    assert sender.delay("acme", 0, True).get(timeout=30) == 0
    assert "raised RateLimitPaused" in proc.log()


def test_the_cap_holds_without_the_lock(
    coord: redis.Redis, locks: redis.Redis, deployment: Deployment
) -> None:
    # Seen red with fair_cap left out: A's calls ran two at once (peaks 1 and 2).
    options = {"fair_key": ["tenant"], "fair_cap": 1, "lock": False}
    task = ModeTask("fair.unlocked_capped", "tenant, n", HELD_BODY, options)
    name = node("fair-unlocked-cap")
    deployment.start(task, "-c", "2", "-n", name)
    app = deployment.app()
    sender = task.sender(app)
    # The same arguments each time: the lock would refuse all but one; the cap runs them in turn.
    results = [sender.delay("A", 0) for _ in range(8)]
    assert [result.get(timeout=120) for result in results] == [0] * 8
    assert [int(peak) for peak in coord.lrange("peaks:A", 0, -1)] == [1] * 8
    stats = stats_of(app, name)
    assert stats is not None and stats["counters"]["acquired"] == 0
