"""The countdown a call that must wait is published with, as the app's broker can carry it.

Most brokers' countdowns are held by the worker that takes the message (an ETA request in its
memory): any length up to the broker's safe hold (``redislock_max_postpone``), which a longer
wait is cut into hops of. With quorum queues on RabbitMQ (Celery 5.5 and later, a topic or
fanout exchange) Celery sends a countdown through RabbitMQ's native delayed delivery instead,
where kombu cuts it to whole seconds and refuses one under a second: a call put off there waits
a whole number of seconds, at least one, rounded up (never early) or, for a call that waits out
the rest in the worker (``precise``), down.
"""

from __future__ import annotations

import math
from typing import Any

from ..config.postpone import broker_transport

__all__ = ["AMQP_TRANSPORTS", "countdown_for", "shortest_broker_wait", "whole_seconds"]

#: The transports of RabbitMQ, where Celery may send a countdown by native delayed delivery.
AMQP_TRANSPORTS = frozenset({"amqp", "amqps", "pyamqp", "librabbitmq"})
#: Seconds a call waits in the worker rather than re-published, where the broker takes any
#: countdown: a re-published call comes back only as exactly as the broker and the worker's
#: timer deliver it.
IN_PROCESS = 0.2


def whole_seconds(app: Any) -> bool:
    """Whether Celery may send ``app``'s countdowns through native delayed delivery: a RabbitMQ
    broker, and a quorum queue among the app's queues (Celery's own test; a direct exchange
    falls back to the worker's memory, where a whole second costs a little waiting only)."""
    if broker_transport(app.conf) not in AMQP_TRANSPORTS:
        return False
    try:
        from celery.utils.quorum_queues import detect_quorum_queues
    except ImportError:  # Celery before 5.5: every countdown waits in the worker
        return False
    return bool(detect_quorum_queues(app, "amqp")[0])


def shortest_broker_wait(app: Any) -> float:
    """The shortest wait worth a re-publish on ``app``'s broker: shorter ones are waited out in
    the worker (a whole second on native delayed delivery, which carries nothing shorter)."""
    return 1.0 if whole_seconds(app) else IN_PROCESS


def countdown_for(app: Any, seconds: float, max_hop: float, *, precise: bool = False) -> float:
    """The countdown of a call that must wait ``seconds``: at most ``max_hop`` (what the broker
    holds safely); on native delayed delivery a whole number of seconds, at least one, rounded
    up, or down when ``precise`` (its caller waits out the rest in the worker). 0: at once."""
    wait = min(max(0.0, float(seconds)), max_hop)
    if wait <= 0 or not whole_seconds(app):
        return wait
    return float(max(1, math.floor(wait) if precise else math.ceil(wait)))
