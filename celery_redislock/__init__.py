"""celery_redislock: singleton Celery tasks guarded by a renewed Redis lock."""

from __future__ import annotations

from .engine import AcquireResult, AcquireStatus, Lease, LockEngine, RenewReport
from .errors import (
    ConfigurationError,
    DuplicateTaskError,
    LockKeyError,
    LockNotOwnedError,
    OptionError,
    RedisLockError,
    RedisURLError,
)

__all__ = [
    "AcquireResult",
    "AcquireStatus",
    "ConfigurationError",
    "DuplicateTaskError",
    "Lease",
    "LockEngine",
    "LockKeyError",
    "LockNotOwnedError",
    "OptionError",
    "RedisLockError",
    "RedisURLError",
    "RenewReport",
]

__version__ = "0.1.0"
