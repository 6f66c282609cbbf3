"""The durations every part of the package shares, seconds as Redis' milliseconds and back, and
the Redis server's clock: the one place either is converted."""

from __future__ import annotations

from typing import Any

from .leases import Client

__all__ = [
    "DEFAULT_RETRY_DELAY",
    "DEFAULT_TIMEOUT",
    "NO_KEY",
    "NO_TTL",
    "renew_interval",
    "server_time",
    "time_of",
    "to_ms",
    "to_seconds",
    "to_us",
    "ttl_seconds",
    "us_seconds",
]

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


def to_us(seconds: float) -> int:
    """``seconds`` in whole microseconds, the nearest: a duration summed in a 64-bit integer."""
    return round(seconds * 1e6)


def us_seconds(us: int) -> float:
    """``us`` microseconds in seconds."""
    return us / 1e6


#: PTTL's replies that are no time left: the key has no TTL, the key does not exist.
NO_TTL = -1
NO_KEY = -2


def to_seconds(ms: int) -> float:
    """``ms`` milliseconds (a wait or a time left that Redis or a script reported) in seconds."""
    return ms / 1000


def ttl_seconds(pttl_ms: int) -> float | None:
    """The seconds a key has left by its PTTL reply; None when it has none to tell: no TTL
    (``NO_TTL``) or no key (``NO_KEY``). A caller that needs a number says what None means to
    it."""
    return None if pttl_ms < 0 else to_seconds(pttl_ms)


def time_of(seconds: Any, microseconds: Any) -> float:
    """Seconds since the epoch of a TIME reply's two parts (as TIME, or a script, returns them)."""
    return int(seconds) + int(microseconds) / 1e6


def server_time(client: Client) -> float:
    """The Redis server's clock (TIME), in seconds since the epoch."""
    reply: Any = client.time()
    if isinstance(reply, dict):  # a cluster client asks one node, keyed by its name
        reply = next(iter(reply.values()))
    return time_of(*reply)


def micros_time(micros: int) -> float:
    """Seconds since the epoch of a time in microseconds (a fencing token seeded from TIME)."""
    return micros / 1e6
