"""``throttle=SECONDS``: at most one run of a key starts per window. The run holds the key as a
lock (renewed, so two never overlap however long it runs); when it ends, the key is kept as
``{task id}@throttled`` until ``SECONDS`` after the run started, so calls inside the window are
duplicates (``on_duplicate``), and at send (``lock_on="enqueue"``) are answered with that run's
AsyncResult."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ..engine.counting import count
from ..engine.holders import task_id_of, throttled_id
from ..engine.timing import to_ms

if TYPE_CHECKING:
    from ..integration.acquisition import Holding

__all__ = ["end_throttle"]

logger = logging.getLogger(__name__)


def end_throttle(held: Holding) -> None:
    """The run ended: keep its key for the rest of its window (released if none is left).

    The window is measured from the run's start on this process's monotonic clock and handed to
    Redis as a TTL (PX), so it ends on the server's clock whatever the hosts' wall clocks say.
    Raises ``redis.RedisError`` (the caller logs it: the key then expires on its lock TTL)."""
    lease, runtime = held.lease, held.runtime
    elapsed_ms = to_ms(time.monotonic() - held.started, minimum=0)
    left_ms = held.options.throttle_ms - elapsed_ms
    keep_as = throttled_id(task_id_of(lease.holder))
    reply = runtime.modes.end_throttle(
        lease.key, lease.holder, keep_as, left_ms, runtime.release_channel(lease.key)
    )
    if reply == 1:
        count("released")
    elif reply != 2:
        logger.error(
            "Lock %s was no longer held by %s at release (expired or taken)", lease.key, lease.holder
        )
