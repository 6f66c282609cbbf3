"""Checking a rate limit from outside: the starts a partition's log records (each scored by its
server time), collected while it runs; the most of them any window of one period holds, and how
many a period a drain had."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["GrantRecorder", "contend", "most_in_a_window", "starts_per_period"]


def most_in_a_window(times: Sequence[float], period: float) -> int:
    """The most of ``times`` (sorted) any closed window of ``period`` seconds holds."""
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] > period:
            first += 1
        most = max(most, last - first + 1)
    return most


def starts_per_period(times: Sequence[float], period: float) -> float:
    """The mean number of ``times`` (sorted) in each whole period of a drain, counted from the
    first: the periods ``[first + k * period, first + (k + 1) * period)`` that end before the
    last start (one at least). A limit used to the full gives N in each."""
    whole = max(1, int((times[-1] - times[0]) // period))
    end = times[0] + whole * period
    return sum(1 for at in times if at < end) / whole


class GrantRecorder:
    """Collects every start the rate limiter's log at ``key`` records, reading it (``client``, a
    Redis or cluster client) more often than its entries leave it: a thread, named, stopped by
    ``stop()``, which returns the starts' server times in seconds, sorted."""

    def __init__(self, client: Any, key: str, interval: float = 0.05) -> None:
        self._client = client
        self._key = key
        self._interval = interval
        # (member, score): a member granted again later is another start.
        self._seen: set[tuple[bytes, float]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"grant-recorder:{key}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        entries = self._client.zrange(self._key, 0, -1, withscores=True)
        self._seen.update((member, score) for member, score in entries if member.startswith(b"g:"))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            self._stop.wait(self._interval)

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(5)
        self._read()
        # A grant's score is its server time in ms, the time the limiter decides by
        # (lua/rate_limit.lua); its member's text is the limiter's own business.
        return sorted(score / 1000 for _, score in self._seen)


def contend(limiter_of: Callable[[], Any], threads: int, seconds: float, cost: int = 1) -> int:
    """``threads`` threads acquiring ``cost`` units (blocking, each its own limiter object, a
    ``RedisRateLimiter``) for ``seconds``; returns how many calls they were granted."""
    granted: list[int] = []
    deadline = time.monotonic() + seconds

    def run() -> None:
        limiter = limiter_of()
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not limiter.acquire(timeout=left, cost=cost):
                return
            granted.append(1)

    workers = [threading.Thread(target=run, name=f"contend-{n}") for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(seconds + 30)
    assert not any(worker.is_alive() for worker in workers)
    return len(granted)
