"""The durations every part of the package shares, seconds as Redis' milliseconds, and the
Redis server's clock."""

from __future__ import annotations

from typing import Any

from .leases import Client

__all__ = ["DEFAULT_RETRY_DELAY", "DEFAULT_TIMEOUT", "renew_interval", "server_time", "to_ms"]

#: Seconds a lock lives without renewal, unless told otherwise (``RedisLock``'s ``timeout``,
#: a task's ``lock_timeout``).
DEFAULT_TIMEOUT = 30.0

#: Seconds between attempts when no release notice arrives: a holder that died publishes
#: nothing when its lock expires, so a waiter re-tries at least this often.
DEFAULT_RETRY_DELAY = 1.0


def renew_interval(timeout: float) -> float:
    """Seconds between renewals of a lock that lives ``timeout`` seconds, unless told otherwise:
    two renewals can fail before it expires."""
    return timeout / 3


def to_ms(seconds: float, minimum: int = 1) -> int:
    """``seconds`` in whole milliseconds, the nearest, at least ``minimum``: Redis TTLs are
    whole milliseconds and ``PX 0`` is an error, hence the floor of 1 for a TTL."""
    return max(minimum, round(seconds * 1000))


def server_time(client: Client) -> float:
    """The Redis server's clock (TIME), in seconds since the epoch."""
    reply: Any = client.time()
    if isinstance(reply, dict):  # a cluster client asks one node, keyed by its name
        reply = next(iter(reply.values()))
    seconds, microseconds = reply
    return int(seconds) + int(microseconds) / 1e6
