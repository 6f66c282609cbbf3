"""Exception types of celery_redislock; every message names what is wrong and where."""

from __future__ import annotations

import reprlib
from typing import Any

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60


def short_repr(value: Any) -> str:
    """A short repr for a message: a value from a config file may be huge or have a broken __repr__."""
    try:
        return _repr.repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"


class RedisLockError(Exception):
    """Base class of every error this package raises."""


class ConfigurationError(RedisLockError, ValueError):
    """The configuration cannot be used (a bad option, no Redis URL, ...)."""


class OptionError(ConfigurationError):
    """An option has an unknown name, a wrong type or an out-of-range value.

    ``option`` is the option's name, ``source`` where it came from
    (``task 'proj.add'``, ``redislock_queues['reports']``, ``redislock_options``).
    """

    def __init__(self, option: str, source: str, problem: str) -> None:
        self.option = option
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: option {option!r} {problem}")


class RedisURLError(ConfigurationError):
    """No usable Redis URL for the locks could be found in the app's configuration."""


class LockKeyError(RedisLockError, TypeError):
    """The arguments of a task cannot be turned into a lock key.

    ``task`` is the task name, ``argument`` the argument (or path inside it) at fault.
    """

    def __init__(self, task: str, argument: str, problem: str) -> None:
        self.task = task
        self.argument = argument
        self.problem = problem
        super().__init__(
            f"task {task!r}: argument {argument!r} {problem}; "
            f"set lock_key to the arguments that identify the task "
            f"(a list of names, or a callable returning a str)"
        )


class DuplicateTaskError(RedisLockError):
    """A task's lock is held by another execution (``on_duplicate="raise"``, or a skip)."""

    def __init__(self, task: str, task_id: str, key: str, holder: str) -> None:
        self.task = task
        self.task_id = task_id
        self.key = key
        self.holder = holder
        # args are the constructor's, so result backends can re-create the error.
        super().__init__(task, task_id, key, holder)

    def __str__(self) -> str:
        return f"Duplicate {self.task}[{self.task_id}]: {self.key} is held by {self.holder}"


class LockUnavailableError(RedisLockError):
    """Redis could not be reached to take a task's lock (``on_redis_error="fail"``)."""

    def __init__(self, task: str, task_id: str, key: str, url: str, cause: BaseException) -> None:
        self.task = task
        self.task_id = task_id
        self.key = key
        self.url = url
        super().__init__(task, task_id, key, url, repr(cause))

    def __str__(self) -> str:
        return (
            f"Cannot lock {self.task}[{self.task_id}]: Redis at {self.url} is unreachable "
            f"({self.args[4]}) while taking {self.key}"
        )


class LockError(RedisLockError):
    """A ``RedisLock`` or ``RedisSemaphore`` used the wrong way (released while not acquired,
    acquired twice by one object); the message names the key."""


class LockAcquireError(LockError):
    """A ``with RedisLock(...)`` / ``RedisSemaphore`` block could not get in (non-blocking, or
    ``acquire_timeout`` passed). ``holders`` are the ids that held it at the last attempt."""

    def __init__(self, key: str, holders: tuple[str, ...], waited: float | None) -> None:
        self.key = key
        self.holders = holders
        self.waited = waited
        held = ", ".join(holders) if holders else "nobody (waiters queued first)"
        how = "without blocking" if not waited else f"within {waited:g}s"
        super().__init__(f"Could not acquire {key} {how}: it is held by {held}")


class LockNotOwnedError(LockError):
    """A lock was released or extended by a holder that no longer owns it."""

    def __init__(
        self, key: str, holder: str, current: str | None, action: str = "release", kind: str = "lock"
    ) -> None:
        self.key = key
        self.holder = holder
        self.current = current
        now = "has expired" if current is None else f"is now held by {current}"
        super().__init__(f"Cannot {action} {kind} {key}: it is not owned by {holder}, it {now}")
