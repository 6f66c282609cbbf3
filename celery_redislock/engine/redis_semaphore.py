"""RedisSemaphore: a fair counting semaphore in Redis, and the slot-taking both it and tasks use."""

from __future__ import annotations

import logging

import redis

from .checks import check_argument
from .keys import release_channel
from .leases import REDIS_ERRORS, Lease, SemaphoreLease, SlotResult
from .redis_lock import HeldInRedis, PerClient
from .semaphore_engine import SemaphoreEngine, make_semaphore_engine
from .timing import DEFAULT_RETRY_DELAY, DEFAULT_TIMEOUT, to_ms
from .waiting import wait_for

__all__ = ["RedisSemaphore", "semaphore_engine_for", "take_slot", "waiter_ttl"]

logger = logging.getLogger(__name__)

#: The semaphore engine of a client.
semaphore_engine_for: PerClient[SemaphoreEngine] = PerClient("semaphore_engine", make_semaphore_engine)


def waiter_ttl(retry_delay: float) -> float:
    """Seconds a queued waiter stays queued without calling again. A live one calls at least
    every ``retry_delay``; a dead one (its process killed) is dropped after this, so it never
    blocks the queue for longer."""
    return max(3 * retry_delay, 2.0)


def take_slot(
    engine: SemaphoreEngine,
    key: str,
    holder: str,
    limit: int,
    ttl_ms: int,
    *,
    blocking: bool,
    timeout: float | None,
    retry_delay: float = DEFAULT_RETRY_DELAY,
    siblings: str = "",
) -> SlotResult:
    """Take a slot of ``key`` for ``holder``.

    Not blocking: one attempt, which never takes a slot a queued waiter is owed. Blocking:
    queue with a ticket and wait (woken by releases, re-trying every ``retry_delay`` at most)
    until served in ticket order or ``timeout`` seconds (None: no limit) pass; a waiter that
    gives up (timeout, or an error) leaves the queue, so those behind it move up at once.
    ``siblings``: see :meth:`SemaphoreEngine.acquire`.
    """
    if not blocking:
        return engine.acquire(key, holder, limit, ttl_ms, siblings=siblings)
    wait_ttl_ms = to_ms(waiter_ttl(retry_delay))
    ticket = 0

    def attempt() -> SlotResult:
        nonlocal ticket
        result = engine.acquire(
            key, holder, limit, ttl_ms, wait_ttl_ms=wait_ttl_ms, ticket=ticket, siblings=siblings
        )
        ticket = result.ticket or ticket
        return result

    result = SlotResult(None)
    try:
        result = attempt()
        if not result.acquired:
            result = wait_for(
                engine.client, release_channel(key), attempt, lambda r: r.acquired, timeout, retry_delay
            )
        return result
    finally:
        if not result.acquired:
            _leave_queue(engine, key, holder, waiter_ttl(retry_delay))


def _leave_queue(engine: SemaphoreEngine, key: str, holder: str, dropped_after: float) -> None:
    try:
        # Also gives back a slot an interrupted attempt may have taken without our knowing.
        engine.release(key, holder, notify=release_channel(key))
    except REDIS_ERRORS as exc:
        logger.warning(
            "Could not leave the queue of semaphore %s as %s: %r; it is dropped in %ss",
            key,
            holder,
            exc,
            dropped_after,
        )


class RedisSemaphore(HeldInRedis[SemaphoreEngine]):
    """A fair counting semaphore in Redis: at most ``limit`` holders of ``name`` at once.

    Holders are kept in a sorted set at the key ``name`` (as given), scored by their expiry
    on the Redis server's clock: one whose process died is dropped ``timeout`` seconds after
    its last renewal. Blocking waiters take a ticket (INCR) and are served in ticket order
    (arrival order at the Redis server, whatever the hosts' clocks); a dead waiter is dropped
    after ``waiter_ttl(retry_delay)``. The queue, liveness and counter keys are
    ``{name}:queue``, ``{name}:alive`` and ``{name}:ticket`` (one Redis Cluster slot). Same
    interface as ``RedisLock``; ``locked()`` is True when an ``acquire(blocking=False)``
    would fail now (every slot held or owed to a queued waiter).
    """

    kind = "semaphore"

    def __init__(
        self,
        redis: redis.Redis,
        name: str,
        limit: int,
        timeout: float = DEFAULT_TIMEOUT,
        renew: bool = True,
        blocking: bool = True,
        acquire_timeout: float | None = None,
        retry_delay: float = DEFAULT_RETRY_DELAY,
    ) -> None:
        super().__init__(redis, name, timeout, renew, blocking, acquire_timeout, retry_delay)
        self.limit: int = check_argument("count", "limit", limit, self._source)
        self._semaphore_engine = semaphore_engine_for(redis)

    @property
    def _engine(self) -> SemaphoreEngine:
        return self._semaphore_engine

    def _take(self, holder: str, blocking: bool, timeout: float | None) -> tuple[bool, tuple[str, ...]]:
        result = take_slot(
            self._semaphore_engine,
            self.name,
            holder,
            self.limit,
            to_ms(self.timeout),
            blocking=blocking,
            timeout=timeout,
            retry_delay=self.retry_delay,
        )
        return result.acquired, result.holders

    def _lease_for(self, holder: str, ttl_ms: int) -> Lease:
        return SemaphoreLease(self.name, holder, ttl_ms, self.limit)

    def _holders(self) -> tuple[str, ...]:
        state = self._semaphore_engine.state(self.name)
        return () if state is None else tuple(holder for holder, _ in state.holders)

    def locked(self) -> bool:
        state = self._semaphore_engine.state(self.name)
        return state is None or len(state.holders) + state.waiting >= self.limit
