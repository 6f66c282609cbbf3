"""Calls left in lanes no worker consumes any more: a release that removed ``fair_key`` or
lowered ``fair_lanes`` consumes fewer lanes of a queue than the release that sent the calls. As a
worker starts it asks its broker which lanes of the queues it consumes still hold messages, and
consumes those too, for its life."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from kombu import Exchange, Queue

from ..config.fair import MAX_LANES
from .queue_sizes import queue_sizes
from .queues import base_queue, lane_name

__all__ = ["drained_queue", "stranded_lanes"]


def stranded_lanes(app: Any, queues: Iterable[str], consumed: Collection[str]) -> dict[str, int]:
    """The lanes of ``queues`` (every lane number a release may have used, up to ``MAX_LANES``)
    not in ``consumed`` that hold messages on ``app``'s broker: name -> messages
    (``queue_sizes``)."""
    candidates = [
        lane_name(queue, lane)
        for queue in queues
        if base_queue(queue) == queue  # a lane's lanes are no queue's
        for lane in range(MAX_LANES)
        if lane_name(queue, lane) not in consumed
    ]
    return {name: messages for name, messages in queue_sizes(app, candidates).items() if messages}


def drained_queue(name: str) -> Queue:
    """How a worker consumes a lane it drains: not declared (it exists, as it was declared by the
    release that sent to it; declaring it again with other arguments would be refused)."""
    return Queue(name, Exchange(name), name, no_declare=True)
