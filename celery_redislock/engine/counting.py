"""Counts of lock events, handed to whoever listens: the engine and the Celery glue count here
and need not know where counts go (a worker's shared counters, ``ops.stats``, listen)."""

from __future__ import annotations

from typing import Callable

__all__ = ["add_count_listener", "count", "remove_count_listener"]

CountListener = Callable[[str, int], None]

_listeners: list[CountListener] = []


def add_count_listener(listener: CountListener) -> None:
    """Call ``listener(name, by)`` for every count from now on (once, however often added)."""
    if listener not in _listeners:
        _listeners.append(listener)


def remove_count_listener(listener: CountListener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def count(name: str, by: int = 1) -> None:
    """``by`` more of ``name`` (a counter name of ``ops.stats.COUNTER_NAMES``)."""
    for listener in _listeners:
        listener(name, by)
