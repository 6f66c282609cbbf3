"""Fair share's calls sent with ``expires``, on a real worker and both brokers (this file is in
CI's RabbitMQ pass): a call that expires before it runs leaves its tenant's backlog by itself.
RabbitMQ drops such a message in the broker, where no worker sees it to count it out; the lock
Redis keeps each such call's expiry and a sweep (at each assign, each count-out batch and
``fair show``) counts out those whose expiry passed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import redis
from celery import Celery

from celery_redislock.contrib.testing import WorkerProcess, poll
from celery_redislock.ops.fair import show_fair

from .mode_harness import ModeTask, node

BODY = """
coord.rpush("ran", f"{tenant} {n}")
return n
"""


def test_a_call_expired_in_the_broker_leaves_its_backlog(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # Seen red on RabbitMQ before expiries were kept: acme's 3 calls stayed counted for good.
    task = ModeTask("fair.expiry", "tenant, n", BODY, {"fair_key": ["tenant"], "fair_lanes": 2})
    app = make_app()
    sender = task.sender(app)
    gone = datetime.now(timezone.utc) - timedelta(seconds=1)
    for n in range(3):
        sender.apply_async(("acme", n), expires=gone)
    sender.delay("bravo", 0)
    # The lanes this process declared as it sent are no fair queues of their own.
    assert [info.queue for info in show_fair(app)] == ["celery"]
    task.start(worker_process, urls, "-c", "1", "-n", node("fair-expiry"))
    assert poll(lambda: coord.llen("ran") >= 1, 60)

    def tenants() -> list[str]:
        return [tenant.tenant for info in show_fair(app) for tenant in info.tenants]

    # Counted out by the worker that dropped them (a Redis broker gives them out), else by the
    # sweep once their expiry passed.
    assert poll(lambda: tenants() == [], 30), show_fair(app)
    assert [entry.decode() for entry in coord.lrange("ran", 0, -1)] == ["bravo 0"]  # none ran
