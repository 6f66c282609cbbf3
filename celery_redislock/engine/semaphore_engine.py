"""SemaphoreEngine: the fair counting semaphore of ``max_concurrency`` > 1 and RedisSemaphore."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster

from .decision_record import Record, run_recorded
from .keys import release_channel, released_key, semaphore_keys
from .leases import (
    AcquireStatus,
    Client,
    Lease,
    RenewReport,
    SemaphoreLease,
    SemaphoreState,
    SlotResult,
    as_text,
)
from .script_runner import ScriptRunner, batched_scripts, pipelined_scripts
from .scripts import (
    SEM_ACQUIRE,
    SEM_RELEASE,
    SEM_RENEW,
    SEM_STATE,
    BatchRenewal,
    chunks,
    flatten,
    renew_report,
    ttl_arg,
)

__all__ = ["ClusterSemaphoreEngine", "SemaphoreEngine", "make_semaphore_engine"]


class SemaphoreEngine(BatchRenewal):
    """The Redis side of a fair counting semaphore; every operation is one script call.

    Holders live in a sorted set at the semaphore's key, scored by their expiry on the Redis
    server's clock; waiters in a queue scored by a ticket from a counter (INCR), so they are
    served in arrival order whatever the clocks of their hosts. The auxiliary keys are
    ``keys.semaphore_keys(key)``; a release is published on ``keys.release_channel(key)``.
    Renewal takes a slot that is gone back while the semaphore has one free.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self.runner = ScriptRunner(client)

    def acquire(
        self,
        key: str,
        holder: str,
        limit: int,
        ttl_ms: int,
        *,
        wait_ttl_ms: int = 0,
        ticket: int = 0,
        siblings: str = "",
        record: Record | None = None,
    ) -> SlotResult:
        """Take a slot of ``key`` for ``holder`` if one is free for it.

        With ``wait_ttl_ms`` the caller queues (or keeps its place) and must call again within
        that time to stay queued; ``ticket`` is the one an earlier call gave it. Without, it
        never takes a slot a queued waiter is owed. A holder whose id starts with
        ``siblings`` refuses the caller: it is then the only holder reported. ``record``: the
        decision kept in the call's record too.
        """
        queue, alive, counter = semaphore_keys(key)
        wait_ttl = ttl_arg(wait_ttl_ms) if wait_ttl_ms else "0"
        args = (
            holder,
            str(int(limit)),
            ttl_arg(ttl_ms),
            wait_ttl,
            str(int(ticket)),
            release_channel(key),
            siblings,
        )
        reply = run_recorded(self.runner, SEM_ACQUIRE, (key, queue, alive, counter), args, record)
        if reply[0] != 0:
            return SlotResult(AcquireStatus(reply[0]))
        return SlotResult(None, tuple(as_text(h) for h in reply[2]), int(reply[1]))

    def release(self, key: str, holder: str, *, notify: str | None = None) -> bool:
        """Give back ``holder``'s slot (and its place in the queue); False if it had none."""
        return self.release_holders(key, [holder], notify=notify) > 0

    def release_holders(self, key: str, holders: Sequence[str], *, notify: str | None = None) -> int:
        """Give back the slots of ``holders``; returns how many they held."""
        return self._call_release(key, "0", holders, notify)

    def release_by_operator(self, key: str, holders: Sequence[str], *, notify: str | None = None) -> int:
        """``release_holders`` as an operator's release (the CLI's, the web page's): each holder
        freed, should its task still run, is told at its next renewal and takes no slot back."""
        return self._call_release(key, "2", holders, notify)

    def release_holder_prefix(self, key: str, prefix: str, *, notify: str | None = None) -> bool:
        """Give back every slot whose holder id starts with ``prefix`` (a dead process's)."""
        return self._call_release(key, "1", [prefix], notify) > 0

    def _call_release(self, key: str, mode: str, ids: Sequence[str], notify: str | None) -> int:
        queue, alive, _ = semaphore_keys(key)
        keys = (key, queue, alive, released_key(key))
        return int(self.runner.run(SEM_RELEASE, keys, (mode, notify or "", *ids)))

    def state(self, key: str) -> SemaphoreState | None:
        """The semaphore at ``key`` now, or None when ``key`` holds something else (a lock)."""
        return self.states([key])[0]

    def holders(self, key: str) -> tuple[str, ...]:
        """The ids holding slots of ``key`` now: what a release by holder prefix may then match
        (the removal itself compares on the server)."""
        state = self.state(key)
        return () if state is None else tuple(holder for holder, _ in state.holders)

    def states(self, keys: Sequence[str]) -> list[SemaphoreState | None]:
        """:meth:`state` of each key, in one round trip (a pipeline; on a cluster, one per node)."""
        calls = [((key, semaphore_keys(key)[0]), ()) for key in keys]
        return [_semaphore_state(reply) for reply in batched_scripts(self.runner, SEM_STATE, calls)]

    def _renew_batch(self, batch: Sequence[Lease]) -> RenewReport:
        return renew_report(batch, flatten(self._renew_calls([self._renew_call(c) for c in chunks(batch)])))

    def _renew_call(self, chunk: Sequence[Lease]) -> tuple[Sequence[str], Sequence[str]]:
        args: list[str] = []
        for lease in chunk:
            limit = lease.limit if isinstance(lease, SemaphoreLease) else 1
            args += (lease.holder, ttl_arg(lease.ttl_ms), str(limit), release_channel(lease.key))
        return [key for lease in chunk for key in (lease.key, released_key(lease.key))], args

    def _renew_calls(self, calls: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[Any]:
        assert isinstance(self.client, redis.Redis)
        return pipelined_scripts(self.client, SEM_RENEW, calls)


class ClusterSemaphoreEngine(SemaphoreEngine):
    """A SemaphoreEngine on a Redis Cluster: a semaphore's keys share one slot (hash tags, see
    ``keys.semaphore_keys``), so each operation goes to its node as it is; the batched renewal
    sends one call per slot in use, as ``sem_renew`` names its keys in KEYS."""

    client: RedisCluster

    def _partition(self, leases: Iterable[Lease]) -> Iterator[Sequence[Lease]]:
        by_slot: dict[int, list[Lease]] = {}
        for lease in leases:
            by_slot.setdefault(self.client.keyslot(lease.key), []).append(lease)  # type: ignore[no-untyped-call]
        yield from by_slot.values()

    def _renew_calls(self, calls: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[Any]:
        # One slot's semaphores, more than RENEW_CHUNK of them only at a scale a cluster spreads
        # over slots: the chunks go one by one, through the cluster client (which follows a
        # slot that moved), not in one pipeline (a cluster pipeline refuses EVALSHA).
        return [self.runner.run(SEM_RENEW, keys, args) for keys, args in calls]


def make_semaphore_engine(client: Client) -> SemaphoreEngine:
    """The semaphore engine for ``client``: a ClusterSemaphoreEngine for a RedisCluster."""
    return ClusterSemaphoreEngine(client) if isinstance(client, RedisCluster) else SemaphoreEngine(client)


def _semaphore_state(reply: list[object] | None) -> SemaphoreState | None:
    if not reply:
        return None
    waiting, live = reply
    assert isinstance(waiting, int) and isinstance(live, list)
    pairs = tuple((as_text(live[i]), int(live[i + 1])) for i in range(0, len(live), 2))
    return SemaphoreState(pairs, waiting)
