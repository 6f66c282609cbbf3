"""How late a postponed call started after the time it was due (its slot, its debounce's end), on
the Redis server's clock: the kinds of wait measured, the histogram's buckets, and the listeners
told of each measure (a worker's shared counters, ``ops.stats``), as ``counting`` hands on counts."""

from __future__ import annotations

import bisect
import logging
from typing import Callable

__all__ = [
    "LATENESS_BUCKETS",
    "MAX_LATENESS_KINDS",
    "add_lateness_kind",
    "add_lateness_listener",
    "bucket_of",
    "late",
    "lateness_kinds",
    "remove_lateness_listener",
]

logger = logging.getLogger(__name__)

#: Kinds of wait at most: a worker's shared table is laid out before it forks its pool.
MAX_LATENESS_KINDS = 4

#: The kinds of wait measured, each registered by what puts calls off so (a mode, a gate).
_kinds: list[str] = []

#: Upper bounds (seconds) of the lateness histogram's buckets; a last one is +Inf. A broker's
#: delayed delivery is late by milliseconds; RabbitMQ's native one, whole seconds up to one.
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

#: Told of each measure: ``(kind, task, seconds late)``.
LatenessListener = Callable[[str, str, float], None]

_listeners: list[LatenessListener] = []


def add_lateness_listener(listener: LatenessListener) -> None:
    """Call ``listener(kind, task, seconds)`` for every measure from now on (once, however often added)."""
    if listener not in _listeners:
        _listeners.append(listener)


def remove_lateness_listener(listener: LatenessListener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def add_lateness_kind(kind: str) -> None:
    """Measure how late calls put off by a wait of ``kind`` start (once, however often added);
    ``ValueError`` past ``MAX_LATENESS_KINDS`` or for a name no metric label can be."""
    if kind in _kinds:
        return
    if not kind.isidentifier() or len(_kinds) == MAX_LATENESS_KINDS:
        raise ValueError(
            f"cannot measure the lateness of {kind!r}: {MAX_LATENESS_KINDS} kinds at most, named as identifiers"
        )
    _kinds.append(kind)


def lateness_kinds() -> tuple[str, ...]:
    """The kinds of wait measured, in their order of registration (a worker's table's columns)."""
    return tuple(_kinds)


def bucket_of(seconds: float) -> int:
    """The index of the bucket ``seconds`` falls in (``len(LATENESS_BUCKETS)``: +Inf)."""
    return bisect.bisect_left(LATENESS_BUCKETS, seconds)


def late(kind: str, task: str, seconds: float) -> None:
    """Task ``task``'s postponed call started ``seconds`` after it was due (an early start counts
    as 0: it waited out the rest). A listener that fails is logged, never raised: this is on a
    call's path."""
    seconds = max(0.0, seconds)
    for listener in _listeners:
        try:
            listener(kind, task, seconds)
        except Exception:
            logger.warning("Not measured: the lateness listener %r failed", listener, exc_info=True)
