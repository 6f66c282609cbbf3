"""What the engines deal in: leases (who holds a key, for how long), acquire results, renewal
reports, what a key is found holding; and the protocol every engine answers."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, Union

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

__all__ = [
    "REDIS_ERRORS",
    "AcquireResult",
    "AcquireStatus",
    "Client",
    "Lease",
    "LeaseEngine",
    "LockInfo",
    "RenewReport",
    "SemaphoreLease",
    "SemaphoreState",
    "SlotResult",
    "as_text",
]


#: A client of one Redis (or of a Sentinel-managed master), or of a Redis Cluster.
Client = Union[redis.Redis, RedisCluster]

#: What a Client raises when Redis fails it: redis-py's RedisError, and the cluster client's
#: RedisClusterException (a slot map it cannot read, keys of many slots), which is not one.
#: Every handler of Redis' failures (on_redis_error, renewal, release) catches these.
REDIS_ERRORS = (redis.RedisError, RedisClusterException)


class AcquireStatus(enum.IntEnum):
    """How a successful acquire got the lock; the values are the script's return codes."""

    TAKEN = 1
    REENTERED = 2
    TAKEN_OVER = 3


@dataclass(frozen=True)
class AcquireResult:
    """Outcome of one acquire: ``status`` is None when ``holder`` (someone else) has the lock."""

    status: AcquireStatus | None
    holder: str
    #: the fencing token issued with it (a fenced acquire only), and the server's time then
    token: int | None = None
    server_time: float | None = None

    @property
    def acquired(self) -> bool:
        return self.status is not None


@dataclass(frozen=True)
class Lease:
    """A lock this process holds: what the renewal timer needs to keep it alive."""

    key: str
    holder: str
    ttl_ms: int


@dataclass
class RenewReport:
    """Per-key outcome of a batch renewal."""

    renewed: list[Lease] = field(default_factory=list)
    #: were gone (expired, Redis restarted) and free: taken back for their holder
    retaken: list[Lease] = field(default_factory=list)
    #: held by another holder now: (lease, that holder's id)
    stolen: list[tuple[Lease, str]] = field(default_factory=list)
    #: released by an operator (``redislock release``, the web page): not taken back
    released: list[Lease] = field(default_factory=list)

    def merge(self, other: RenewReport) -> None:
        self.renewed += other.renewed
        self.retaken += other.retaken
        self.stolen += other.stolen
        self.released += other.released


@dataclass(frozen=True)
class LockInfo:
    """A lock key as found: its holder id (None: gone, or not a lock) and Redis' PTTL."""

    key: str
    holder: str | None
    ttl_ms: int


def as_text(value: bytes | str) -> str:
    """A reply as str, whether the client decodes responses or not."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class LeaseEngine(Protocol):
    """What the renewal timer and the release paths need of an engine (locks or semaphores)."""

    def renew_many(self, leases: Iterable[Lease]) -> RenewReport: ...

    def release(self, key: str, holder: str, *, notify: str | None = None) -> bool: ...

    def release_holder_prefix(self, key: str, prefix: str, *, notify: str | None = None) -> bool: ...

    def holders(self, key: str) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class SemaphoreLease(Lease):
    """A slot of a semaphore this process holds: renewal also needs the semaphore's limit."""

    limit: int = 1


@dataclass(frozen=True)
class SlotResult:
    """Outcome of one semaphore acquire: ``status`` is None when no slot was free for the
    caller; then ``holders`` hold the slots and ``ticket`` is its place in the queue (0: none)."""

    status: AcquireStatus | None
    holders: tuple[str, ...] = ()
    ticket: int = 0

    @property
    def acquired(self) -> bool:
        return self.status is not None


@dataclass(frozen=True)
class SemaphoreState:
    """A semaphore by the server's clock: live holders with milliseconds left, waiters queued."""

    holders: tuple[tuple[str, int], ...]
    waiting: int
