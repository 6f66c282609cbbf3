"""Per-queue options (``redislock_queues``) of a call routed by ``task_routes``, the send naming no
queue, on real workers: the sender applies the queue layer the worker consuming that queue
resolves. A per-queue ``fair_key`` sends the calls to that queue's lanes and serves its tenants
in turn; a per-queue ``lock_on="enqueue"`` refuses a duplicate at send."""

from __future__ import annotations

from typing import Any

import redis
from amqp.exceptions import ChannelError
from celery import Celery

from celery_redislock.contrib.testing import poll
from celery_redislock.integration.queues import lane_name

from .conftest import queued_count
from .mode_harness import Deployment, ModeTask, node

BODY = """
coord.rpush("starts", tenant)
return n
"""

QUEUE = "bulk"
LANES = 4
FLOOD, FEW = 60, 5


def routed(name: str, layer: dict[str, Any]) -> tuple[ModeTask, dict[str, Any], str]:
    """A task with no options of its own, its calls routed to ``QUEUE`` by ``task_routes``,
    whose queue layer is ``layer``: the task, the sender's settings, the worker module's."""
    task = ModeTask(name, "tenant, n", BODY)
    conf = {"task_routes": {name: {"queue": QUEUE}}, "redislock_queues": {QUEUE: layer}}
    return task, conf, f"\napp.conf.update(redislock_queues={conf['redislock_queues']!r})\n"


def size(app: Celery, queue: str) -> int:
    """How many messages wait in ``queue``."""
    try:
        return queued_count(app, queue)
    except ChannelError:  # a Redis broker keeps no key for an empty queue
        return 0


def lane_sizes(app: Celery) -> list[int]:
    return [size(app, lane_name(QUEUE, lane)) for lane in range(LANES)]


def test_a_per_queue_fair_key_given_only_through_task_routes_makes_the_call_fair(
    deployment: Deployment, coord: redis.Redis
) -> None:
    task, conf, module = routed("routed.fair", {"fair_key": ["tenant"], "fair_lanes": LANES})
    app = deployment.app(**conf)
    sender = task.sender(app)
    calls = [("A", n) for n in range(FLOOD)] + [("B", n) for n in range(FEW)]
    results = [sender.delay(*call) for call in calls]  # all queued before any worker runs
    # Each tenant in a lane of the routed queue, none in the queue itself.
    assert sorted(lane_sizes(app)) == [0, 0, FEW, FLOOD]
    assert size(app, QUEUE) == 0
    worker = ("-c", "1", "--prefetch-multiplier", "1", "-Q", QUEUE, "-n", node("routed"))
    deployment.start(task, *worker, module=module)
    assert poll(lambda: coord.llen("starts") >= len(calls), 300, interval=0.2), coord.llen("starts")
    assert sorted(result.get(timeout=30) for result in results) == sorted(n for _, n in calls)
    order = [entry.decode() for entry in coord.lrange("starts", 0, -1)]
    b_positions = [i for i, tenant in enumerate(order) if tenant == "B"]
    # Two busy lanes served in turn (strictly on a Redis broker, at random on RabbitMQ): all of
    # B's start before A's backlog drains, where FIFO starts them after all of it.
    assert len(b_positions) == FEW and b_positions[-1] < FLOOD, b_positions


def test_a_per_queue_lock_on_enqueue_given_only_through_task_routes_refuses_at_send(
    deployment: Deployment, coord: redis.Redis
) -> None:
    task, conf, module = routed("routed.enqueue", {"lock_on": "enqueue", "lock_key": ["tenant"]})
    app = deployment.app(**conf)
    sender = task.sender(app)
    first = sender.delay("acme", 0)
    again = sender.delay("acme", 1)  # its key is queued already: not sent, answered with the first
    assert again.id == first.id
    assert size(app, QUEUE) == 1
    deployment.start(task, "-c", "1", "-Q", QUEUE, "-n", node("routed-enqueue"), module=module)
    assert first.get(timeout=30) == 0
    assert [entry.decode() for entry in coord.lrange("starts", 0, -1)] == ["acme"]
    assert size(app, QUEUE) == 0
