"""Waiting for a lock or a semaphore slot: woken by the release notices on a PUBSUB channel."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

import redis
from redis.cluster import RedisCluster

from .timing import DEFAULT_RETRY_DELAY

__all__ = ["wait_for"]

_R = TypeVar("_R")


def wait_for(
    client: redis.Redis | RedisCluster,
    channel: str,
    attempt: Callable[[], _R],
    done: Callable[[_R], bool],
    timeout: float | None,
    retry_delay: float = DEFAULT_RETRY_DELAY,
) -> _R:
    """Call ``attempt()`` until ``done`` says it succeeded or ``timeout`` seconds (None: no
    limit) have passed; returns the last result.

    Between attempts it blocks on ``channel`` (each message wakes it for one more attempt),
    for at most ``retry_delay`` seconds: never a tight loop. The first attempt is made after
    subscribing, so a release between a caller's failed attempt and the wait is not missed.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    try:
        pubsub.subscribe(channel)
        while True:
            result = attempt()
            remaining = retry_delay if deadline is None else deadline - time.monotonic()
            if done(result) or remaining <= 0:
                return result
            pubsub.get_message(timeout=min(remaining, retry_delay))
    finally:
        pubsub.close()
