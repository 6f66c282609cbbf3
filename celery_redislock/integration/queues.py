"""Which queue a message was consumed from, and which one a send goes to: what per-queue options
(``redislock_queues``) key on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kombu import Exchange, Queue

__all__ = [
    "LANE_MARK",
    "QUEUE_FIELD",
    "base_queue",
    "consumed_queue",
    "destination",
    "lane_name",
    "lane_queue",
]

#: The request attribute carrying the queue a message was consumed from: set by the worker's
#: consumer (``worker_handlers``), read where a task's options are resolved (``task``).
QUEUE_FIELD = "redislock_queue"
#: What joins a queue's name and a lane's number in the lane's name (fair share): ``Q.fair.3``, a
#: queue name RabbitMQ and Redis both take, next to ``Q`` in a sorted list.
LANE_MARK = ".fair."


def lane_name(queue: str, lane: int) -> str:
    """The name of lane ``lane`` of ``queue``."""
    return f"{queue}{LANE_MARK}{lane}"


#: The exchange types Celery's native delayed delivery (RabbitMQ, quorum queues) re-publishes a
#: countdown through; it skips a queue bound to a direct exchange (the worker holds the call).
DELAYED_EXCHANGE_TYPES = ("topic", "fanout")
#: What a lane keeps of its queue's declaration (kombu ``Queue`` attributes): not its name,
#: exchange, routing key, bindings or alias, which name the queue itself.
LANE_KEEPS = (
    "queue_arguments",
    "consumer_arguments",
    "durable",
    "exclusive",
    "auto_delete",
    "no_ack",
    "expires",
    "message_ttl",
    "max_length",
    "max_length_bytes",
    "max_priority",
)


def lane_queue(queues: Any, name: str) -> Queue:
    """The declaration of lane ``name`` in ``queues`` (Celery's ``app.amqp.queues``), added there
    as a copy of its queue's the first time: the lane holds that queue's calls, so it keeps what
    the queue was declared with (``queue_arguments``: its type, dead-lettering, TTL, priorities;
    ``durable``, ``auto_delete``, ``max_priority`` ...), where Celery's missing-queue path would
    declare a classic queue with none. A lane declared in ``task_queues`` is taken as it is. Its
    exchange is its own, named after it as Celery names a missing queue's (no binding of the
    queue's own exchange routes to it), of the queue exchange's type when that is topic or
    fanout, so Celery's native delayed delivery reaches it. Raises ``KeyError`` where Celery
    would: the lane is not declared and ``task_create_missing_queues`` is False."""
    declared = dict.get(queues, name)  # dict's own get: Queues.__missing__ would create it
    if declared is not None:
        return declared  # type: ignore[no-any-return]
    base = base_queue(name)
    if base == name or not queues.create_missing:
        return queues[name]  # type: ignore[no-any-return]  # what Celery does: create or KeyError
    template: Queue = queues[base]  # its declaration (task_queues, the default queue, or made so)
    exchange = queues.new_missing(name).exchange
    own_type = getattr(template.exchange, "type", None)
    if own_type in DELAYED_EXCHANGE_TYPES:
        exchange = Exchange(name, type=own_type)
    declared_with = {attr: getattr(template, attr, None) for attr in LANE_KEEPS}
    for attr in ("queue_arguments", "consumer_arguments"):  # its own dict: Celery may add to it
        declared_with[attr] = dict(declared_with[attr] or {}) or None
    lane = Queue(name, exchange, name, **declared_with)
    return queues.add(lane)  # type: ignore[no-any-return]


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
