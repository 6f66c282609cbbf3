"""celery_redislock: singleton Celery tasks guarded by a renewed Redis lock."""

from __future__ import annotations

from . import control  # noqa: F401  (importing it registers `inspect redislock_stats`)
from .engine import AcquireResult, AcquireStatus, Lease, LockEngine, RenewReport
from .errors import (
    ConfigurationError,
    DuplicateTaskError,
    LockAcquireError,
    LockError,
    LockKeyError,
    LockNotOwnedError,
    LockUnavailableError,
    OptionError,
    RedisLockError,
    RedisURLError,
)
from .lock import RedisLock
from .semaphore import RedisSemaphore
from .task import SingletonTask
from .worker import consumed_queue  # importing it connects the worker signal handlers

__all__ = [
    "AcquireResult",
    "AcquireStatus",
    "ConfigurationError",
    "DuplicateTaskError",
    "Lease",
    "LockAcquireError",
    "LockEngine",
    "LockError",
    "LockKeyError",
    "LockNotOwnedError",
    "LockUnavailableError",
    "OptionError",
    "RedisLock",
    "RedisLockError",
    "RedisSemaphore",
    "RedisURLError",
    "RenewReport",
    "SingletonTask",
    "consumed_queue",
]

__version__ = "0.1.0"
