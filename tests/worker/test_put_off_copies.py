"""A call put off is re-published under its task id before its running message is acknowledged:
a worker that dies in between leaves two copies of it (``acks_late``: RabbitMQ gives the
original out again at once, a Redis broker after its visibility timeout). Its copy tokens
(``waits.copies``) let exactly one of them run, the other dropped as it arrives.

Shown with ``fair_cap``'s re-queue, which had no token: tenant t's X runs on one worker, t's Y
reaches a solo worker, is over the cap and put off to its lane, and that worker is SIGKILLed
after the publish: before its copy is confirmed, or after."""

from __future__ import annotations

import functools

import pytest
import redis

from celery_redislock.contrib.testing import poll

from .conftest import QUORUM, open_gate, restore_visible, wait_started
from .mode_harness import Deployment, ModeTask, node

BODY = """
coord.rpush("ran:" + name, self.request.id)
if name == "X":
    return hold(self, "X")
return name
"""

#: The killed worker's module: SIGKILL itself once the copy is published (Celery's retry()
#: returned), or once it is confirmed, as ``kill_at`` in the coordination database says.
KILL = """
import os
import signal

from celery.app.task import Task
import celery_redislock.waits.put_off as put_off_module

publish = Task.retry
confirm = put_off_module.confirm


def published(self, *args, **kwargs):
    sent = publish(self, *args, **kwargs)
    if coord.get("kill_at") == b"published":
        os.kill(os.getpid(), signal.SIGKILL)
    return sent


def confirmed(*args, **kwargs):
    done = confirm(*args, **kwargs)
    if coord.get("kill_at") == b"confirmed":
        os.kill(os.getpid(), signal.SIGKILL)
    return done


Task.retry = published
put_off_module.confirm = confirmed
"""

CAPPED = ModeTask(
    "copies.capped",
    "tenant, name",
    BODY,
    {"fair_key": ["tenant"], "fair_lanes": 2, "fair_cap": 1, "acks_late": True},
)


@pytest.mark.parametrize("kill_at", ["published", "confirmed"])
def test_a_capped_call_whose_worker_dies_after_putting_it_off_runs_once(
    deployment: Deployment, coord: redis.Redis, locks: redis.Redis, kill_at: str
) -> None:
    capped_call_runs_once(deployment, coord, locks, kill_at)


@pytest.mark.parametrize("kill_at", ["published", "confirmed"])
def test_on_quorum_queues_a_capped_call_whose_worker_dies_after_putting_it_off_runs_once(
    deployment: Deployment, rabbitmq_url: str, coord: redis.Redis, locks: redis.Redis, kill_at: str
) -> None:
    # The re-check comes back through RabbitMQ's native delayed delivery, to the lane's exchange.
    quorum = Deployment(
        {**deployment.urls, "broker": rabbitmq_url},
        functools.partial(deployment.make_app, broker_url=rabbitmq_url, **QUORUM),
        deployment.worker_process,
    )
    capped_call_runs_once(quorum, coord, locks, kill_at, module=f"app.conf.update({QUORUM!r})\n")


def capped_call_runs_once(
    deployment: Deployment, coord: redis.Redis, locks: redis.Redis, kill_at: str, module: str = ""
) -> None:
    # The caller's own visibility timeout: restore_visible gives Y's message out again at once
    # on a Redis broker (the workers keep the default and give out nothing themselves).
    app = deployment.app(broker_transport_options={"visibility_timeout": 1})
    sender = CAPPED.sender(app)
    runner = deployment.start(
        CAPPED, "-c", "1", "--prefetch-multiplier", "1", "-n", node("copies-runner"), module=module
    )
    x = sender.delay("t", "X")
    wait_started(coord, "X")
    coord.set("kill_at", kill_at)
    doomed = deployment.start(CAPPED, "-n", node("copies-doomed"), pool="solo", module=module + KILL)
    y = sender.delay("t", "Y")
    assert poll(lambda: doomed.process.poll() is not None, 30), doomed.log()
    assert "Capped copies.capped[" in doomed.log()
    coord.delete("kill_at")
    # A worker free to take Y's message given out again while X still holds the cap: it is
    # capped again, its copy put off again, beside the dead worker's copy.
    spare = deployment.start(
        CAPPED, "-c", "1", "--prefetch-multiplier", "1", "-n", node("copies-spare"), module=module
    )
    redis_broker = deployment.urls["broker"].startswith("redis")
    capped_again = f"Capped copies.capped[{y.id}]"

    def given_out_again() -> bool:
        if redis_broker:  # Y's unacknowledged message (RabbitMQ gave it out at the kill)
            restore_visible(app)
        return capped_again in spare.log() or f"Dropped copy of copies.capped[{y.id}]" in spare.log()

    assert poll(given_out_again, 30, interval=0.2), spare.log()
    open_gate(coord, "X")
    assert x.get(timeout=20) == "done X"
    assert y.get(timeout=30) == "Y"
    # Every copy left comes due within a second or two of the cap's recheck: none runs again.
    assert not poll(lambda: coord.llen("ran:Y") > 1, 6, interval=0.2), spare.log() + runner.log()
    assert "Dropped copy of copies.capped[" in spare.log() + runner.log()
    # Its run ended: the record of its copies goes (a copy after it is dropped by its result).
    assert poll(lambda: list(locks.scan_iter("*:copy:*")) == [], 5)
