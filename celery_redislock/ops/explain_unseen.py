"""What can be told of a call the package never saw: the result backend's state of it, and,
on a Redis broker, whether the broker still holds it ahead of the workers (a bounded look
through the queues' lists) or has given it to a worker that has not acknowledged it yet."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from celery import Celery

__all__ = ["LOOK_AT_MOST", "unseen"]

#: Messages looked at per queue, from the end workers take from: a look that stays short on a
#: queue of millions (a call further back is reported as not found among them).
LOOK_AT_MOST = 10_000
_CHUNK = 1000


def unseen(app: Celery, task_id: str) -> Iterator[str]:
    """Lines saying what is known of ``task_id`` outside the package's record."""
    yield _backend_state(app, task_id)
    yield from _broker(app, task_id)


def _backend_state(app: Celery, task_id: str) -> str:
    try:
        state = str(app.AsyncResult(task_id).state)
    except Exception as exc:  # the backend is not ours to fail on: say it
        return f"result backend: could not ask ({type(exc).__name__}: {exc})"
    if state == "PENDING":
        return "result backend: PENDING (it knows nothing of this id: not run, or not sent)"
    return f"result backend: {state}"


def _broker(app: Celery, task_id: str) -> Iterator[str]:
    transport = app.conf.broker_url.split("://", 1)[0] if app.conf.broker_url else ""
    if transport not in ("redis", "rediss", "sentinel"):
        yield f"broker ({transport or 'unknown'}): cannot tell whether it still holds the call (only a Redis broker's queues can be looked through)"
        return
    try:
        with app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1)
            channel: Any = conn.default_channel
            yield from _redis_broker(app, channel, task_id)
    except Exception as exc:  # an unreachable broker: say so, the rest stands
        yield f"broker: could not look ({type(exc).__name__}: {exc})"


def _redis_broker(app: Celery, channel: Any, task_id: str) -> Iterator[str]:
    client = channel.client
    needle = task_id.encode()
    names = {app.conf.task_default_queue or "celery", *app.amqp.queues.keys()}
    for name in sorted(names):
        for pri in channel.priority_steps:
            list_key = channel._q_for_pri(name, pri)
            length = int(client.llen(list_key))
            # Workers take from the right end: the message at -1 is delivered next.
            for start in range(0, min(length, LOOK_AT_MOST), _CHUNK):
                chunk = client.lrange(list_key, -(start + _CHUNK), -(start + 1))
                for offset, message in enumerate(reversed(chunk)):
                    if needle in message:
                        ahead = start + offset
                        yield (
                            f"broker: still holds the call in queue {name!r}, not yet given to a worker, "
                            f"{ahead} message(s) ahead of it"
                        )
                        return
    unacked = getattr(channel, "unacked_key", "unacked")
    # Delivered, not acknowledged: a hash by delivery tag, of what workers hold (a few each).
    for looked_at, (_, message) in enumerate(client.hscan_iter(unacked, count=_CHUNK)):
        if needle in message:
            yield "broker: given to a worker that has not acknowledged it yet (prefetched, or running)"
            return
        if looked_at >= LOOK_AT_MOST:
            break
    yield f"broker: not found among the next {LOOK_AT_MOST} messages of each of its queues ({', '.join(sorted(names))})"
