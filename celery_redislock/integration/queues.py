"""Which queue a message was consumed from, and which one a send goes to: what per-queue options
(``redislock_queues``) key on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["LANE_MARK", "QUEUE_FIELD", "base_queue", "consumed_queue", "destination", "lane_name"]

#: The request attribute carrying the queue a message was consumed from: set by the worker's
#: consumer (``worker_handlers``), read where a task's options are resolved (``task``).
QUEUE_FIELD = "redislock_queue"
#: What joins a queue's name and a lane's number in the lane's name (fair share): ``Q.fair.3``, a
#: queue name RabbitMQ and Redis both take, next to ``Q`` in a sorted list.
LANE_MARK = ".fair."


def lane_name(queue: str, lane: int) -> str:
    """The name of lane ``lane`` of ``queue``."""
    return f"{queue}{LANE_MARK}{lane}"


def base_queue(name: str) -> str:
    """The queue whose lane ``name`` is (``lane_name``), or ``name`` itself when it is no lane."""
    head, mark, number = name.rpartition(LANE_MARK)
    return head if mark and head and number.isdigit() else name


def consumed_queue(
    delivery_info: Mapping[str, Any], queues: Iterable[Any], tags: Mapping[str, str]
) -> str | None:
    """The name of the queue a message was consumed from.

    Celery's request ``delivery_info`` has the exchange and routing key, not the queue. AMQP
    deliveries carry the consumer tag, which names the queue exactly; other transports (Redis)
    are matched on the consuming queues' bindings: the queue bound to that exchange with that
    routing key (Celery's default direct routing), preferring one named like the routing key.
    """
    tag = delivery_info.get("consumer_tag")
    if tag:
        for name, active in tags.items():
            if active == tag:
                return base_queue(name)
    exchange = delivery_info.get("exchange")
    routing_key = delivery_info.get("routing_key")
    matches = [
        queue.name
        for queue in queues
        if queue.routing_key == routing_key
        and (not exchange or getattr(queue.exchange, "name", None) == exchange)
    ]
    if not matches:
        return None
    return base_queue(str(routing_key) if routing_key in matches else str(matches[0]))


def destination(task: Any, options: Mapping[str, Any], args: Any, kwargs: Any) -> str:
    """The queue a send goes to, as Celery picks it: the send's ``queue``, else the task's, else
    its route (``task_routes``, the default queue). A retry is sent back by the exchange and
    routing key it came from, which Celery's route does not override: the queue bound so, as the
    worker matches it (``consumed_queue``); a lane's retry names its lane by routing key. A lane
    is named by its queue (``base_queue``), as the worker names the queue it consumed."""
    routing_key = options.get("routing_key")
    if options.get("queue") is None and isinstance(routing_key, str):
        if LANE_MARK in routing_key:
            return base_queue(routing_key)
        if options.get("exchange") is not None:
            bound = consumed_queue(options, task.app.amqp.queues.values(), {})
            if bound is not None:
                return bound
    queue = options.get("queue") or getattr(task, "queue", None)
    if queue is None:
        queue = task.app.amqp.router.route({}, task.name, args or (), kwargs or {}).get("queue")
    return base_queue(str(getattr(queue, "name", queue)))
