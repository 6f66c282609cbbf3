"""Per-process counters of lock events, read by `inspect redislock_stats`."""

from __future__ import annotations

import threading

COUNTER_NAMES = (
    "acquired",
    "skipped",
    "retried",
    "waited",
    "lost",
    "retaken",
    "released",
    "redis_errors",
)


class Counters:
    """Thread-safe counters; one instance per process (``counters``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(COUNTER_NAMES, 0)

    def incr(self, name: str, by: int = 1) -> None:
        if name not in self._values:
            raise KeyError(f"unknown counter {name!r}; known: {', '.join(COUNTER_NAMES)}")
        with self._lock:
            self._values[name] += by

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)

    def reset(self) -> None:
        with self._lock:
            self._values = dict.fromkeys(COUNTER_NAMES, 0)


counters = Counters()
