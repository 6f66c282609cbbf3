"""How many messages wait in named queues of an app's broker: a passive declare of each, which
answers on RabbitMQ and on a Redis broker alike, and declares nothing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["queue_sizes"]


def queue_sizes(app: Any, names: Iterable[str]) -> dict[str, int]:
    """Each of ``names`` that exists on ``app``'s broker -> the messages ready there (not those
    a consumer holds unacknowledged). A queue that does not exist is an error there (RabbitMQ
    closes the channel: a new one for the next queue) and is left out; a Redis broker keeps no
    key for an empty queue, so there an empty queue is left out too."""
    wanted = list(names)
    found: dict[str, int] = {}
    if not wanted:
        return found
    with app.connection_for_read() as conn:
        conn.ensure_connection(max_retries=1)
        channel = conn.channel()
        try:
            for name in wanted:
                try:
                    found[name] = int(channel.queue_declare(name, passive=True).message_count)
                except conn.channel_errors:  # no such queue
                    if not getattr(channel, "is_open", True):
                        channel = conn.channel()
        finally:
            channel.close()
    return found
