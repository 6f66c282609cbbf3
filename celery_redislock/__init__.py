"""celery_redislock: singleton Celery tasks guarded by a renewed Redis lock.

The lock engine (``RedisLock``, ``RedisSemaphore``, ``RedisRateLimiter`` and what they deal in) and the exceptions
import no Celery; the Celery names (``SingletonTask``) are loaded on first use, with what
loading them must do in every process that uses them: register ``inspect redislock_stats``,
connect the worker lifecycle handlers and the counters, register the dedup modes and the
peers' task keywords that the task refuses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .engine import AcquireResult, AcquireStatus, Lease, LockEngine, RenewReport
from .engine.rate_limiter import RedisRateLimiter
from .engine.redis_lock import RedisLock
from .engine.redis_semaphore import RedisSemaphore
from .errors import (
    ConfigurationError,
    DuplicateTaskError,
    LockAcquireError,
    LockError,
    LockKeyError,
    LockNotOwnedError,
    LockUnavailableError,
    OptionError,
    RateLimitPaused,
    RedisLockError,
    RedisTLSError,
    RedisURLError,
)

if TYPE_CHECKING:
    from .config.limits import declare_limit
    from .integration.task import SingletonTask
    from .ops.explain import explain
    from .ops.limits import pause_limit, reset_limit, resume_limit, set_limit, show_limits

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
    "RateLimitPaused",
    "RedisLock",
    "RedisLockError",
    "RedisRateLimiter",
    "RedisSemaphore",
    "RedisTLSError",
    "RedisURLError",
    "RenewReport",
    "SingletonTask",
    "declare_limit",
    "explain",
    "pause_limit",
    "reset_limit",
    "resume_limit",
    "set_limit",
    "show_limits",
]

__version__ = "0.1.0"

#: What loading the Celery integration imports, each for what importing it does (see above).
_CELERY_PARTS = (".ops.control", ".ops.metrics_server", ".integration.worker_handlers", ".modes", ".gates")
#: The named limits' functions (``config.limits``, ``ops.limits``), loaded on first use.
_LIMIT_FUNCTIONS = ("declare_limit", "pause_limit", "reset_limit", "resume_limit", "set_limit", "show_limits")
#: Registers celery-once's and celery-singleton's task keywords with the task's keyword check.
_PEER_KEYWORDS = ".compat.peer_keywords"


def __getattr__(name: str) -> Any:
    if name == "SingletonTask":
        for part in _CELERY_PARTS:
            importlib.import_module(part, __name__)
        task = importlib.import_module(".integration.task", __name__).SingletonTask
        globals()[name] = task
        # After the name is set: importing compat imports SingletonTask through this package.
        importlib.import_module(_PEER_KEYWORDS, __name__)
        return task
    if name in _LIMIT_FUNCTIONS:
        # Named limits are the app's settings' (config), their runtime changes Celery's side
        # (ops): importing the engine loads neither.
        module = ".config.limits" if name == "declare_limit" else ".ops.limits"
        function = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = function
        return function
    if name == "explain":  # the ops layer's: the Celery side loaded first, as for SingletonTask
        __getattr__("SingletonTask")
        function = importlib.import_module(".ops.explain", __name__).explain
        globals()[name] = function
        return function
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
