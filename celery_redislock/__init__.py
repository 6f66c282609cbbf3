"""celery_redislock: singleton Celery tasks guarded by a renewed Redis lock."""

from __future__ import annotations

import warnings
from typing import Any

# Imported for what importing them does: register `inspect redislock_stats`, connect the worker
# lifecycle handlers. Both must happen in every process that imports the package.
from . import control, signals  # noqa: F401
from .core import AcquireResult, AcquireStatus, Lease, LockEngine, RenewReport
from .core.lock import RedisLock
from .core.semaphore import RedisSemaphore
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
    RedisTLSError,
    RedisURLError,
)
from .task import SingletonTask

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
    "RedisTLSError",
    "RedisURLError",
    "RenewReport",
    "SingletonTask",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Deprecated names, still there for code that imported them.
    if name == "consumed_queue":
        warnings.warn(
            "celery_redislock.consumed_queue is deprecated: import it from celery_redislock.queues",
            DeprecationWarning,
            stacklevel=2,
        )
        from .queues import consumed_queue

        return consumed_queue
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
