"""Calls left in lanes no worker consumes any more: a release that removed ``fair_key`` or
lowered ``fair_lanes`` consumes fewer lanes of a queue than the release that sent the calls. As a
worker starts it asks its broker which lanes of the queues it consumes still hold messages, and
consumes those too, for its life."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from typing import Any

from kombu import Exchange, Queue

from ..config.fair import MAX_LANES
from .queues import base_queue, lane_name

__all__ = ["drained_queue", "stranded_lanes"]

logger = logging.getLogger(__name__)


def stranded_lanes(app: Any, queues: Iterable[str], consumed: Collection[str]) -> dict[str, int]:
    """The lanes of ``queues`` (every lane number a release may have used, up to ``MAX_LANES``)
    not in ``consumed`` that hold messages on ``app``'s broker: name -> messages. A passive
    declare answers on RabbitMQ and on a Redis broker alike; a lane that does not exist is an
    error there (RabbitMQ closes the channel: a new one for the next lane)."""
    candidates = [
        lane_name(queue, lane)
        for queue in queues
        if base_queue(queue) == queue  # a lane's lanes are no queue's
        for lane in range(MAX_LANES)
        if lane_name(queue, lane) not in consumed
    ]
    found: dict[str, int] = {}
    if not candidates:
        return found
    with app.connection_for_read() as conn:
        conn.ensure_connection(max_retries=1)
        channel = conn.channel()
        try:
            for name in candidates:
                try:
                    messages = int(channel.queue_declare(name, passive=True).message_count)
                except conn.channel_errors:  # no such lane
                    if not getattr(channel, "is_open", True):
                        channel = conn.channel()
                    continue
                if messages:
                    found[name] = messages
        finally:
            channel.close()
    return found


def drained_queue(name: str) -> Queue:
    """How a worker consumes a lane it drains: not declared (it exists, as it was declared by the
    release that sent to it; declaring it again with other arguments would be refused)."""
    return Queue(name, Exchange(name), name, no_declare=True)
