"""The lock engine: Redis locks and semaphores, their Lua scripts, the renewal timer, waiting,
and ``RedisLock``/``RedisSemaphore``. Nothing here imports Celery."""

from __future__ import annotations

from .leases import (
    AcquireResult,
    AcquireStatus,
    Client,
    Lease,
    LeaseEngine,
    LockInfo,
    RenewReport,
    SemaphoreLease,
    SemaphoreState,
    SlotResult,
)
from .lock_engine import ClusterLockEngine, LockEngine, make_engine
from .semaphore_engine import ClusterSemaphoreEngine, SemaphoreEngine, make_semaphore_engine

__all__ = [
    "AcquireResult",
    "AcquireStatus",
    "Client",
    "ClusterLockEngine",
    "ClusterSemaphoreEngine",
    "Lease",
    "LeaseEngine",
    "LockEngine",
    "LockInfo",
    "RenewReport",
    "SemaphoreEngine",
    "SemaphoreLease",
    "SemaphoreState",
    "SlotResult",
    "make_engine",
    "make_semaphore_engine",
]
