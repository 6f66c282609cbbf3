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
    """Base class of every error this package raises.

    ``args`` are always the constructor's arguments, so a result backend or pickle (a prefork
    child's failure travels to its parent pickled) re-creates the same error; the message is
    ``str()``, and ``repr()`` shows it too rather than the bare arguments.
    """

    def __repr__(self) -> str:
        # What a stored result, `celery events` and a traceback's chained cause display.
        return f"{type(self).__name__}({str(self)!r})"


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
        super().__init__(option, source, problem)

    def __str__(self) -> str:
        return f"{self.source}: option {self.option!r} {self.problem}"


class RedisURLError(ConfigurationError):
    """No usable Redis URL for the locks could be found in the app's configuration."""


class RedisTLSError(ConfigurationError):
    """TLS to the lock Redis failed for a reason of its set-up (a server certificate the client
    does not trust, a handshake the server refused, a certificate file it cannot read).

    ``source`` names the setting the lock client's SSL options came from, ``given`` lists the
    option names it holds (None: it is not set), ``cause`` says what TLS said.
    """

    def __init__(self, url: str, source: str, given: list[str] | None, cause: str) -> None:
        self.url = url
        self.source = source
        self.given = given
        self.cause = cause
        super().__init__(url, source, given, cause)

    def __str__(self) -> str:
        own = (
            ""
            if self.source == "redislock_use_ssl"
            else ", or give the lock client its own in redislock_use_ssl"
        )
        held = f"sets {', '.join(self.given) or 'nothing'}" if self.given is not None else "is not set"
        return (
            f"TLS to the lock Redis at {self.url} failed: {self.cause}. The lock client's SSL options "
            f"come from {self.source}, which {held}: fix them there (ssl_ca_certs: the CA that signed "
            f"the server's certificate){own}. Tasks that need the lock fail until then, whatever "
            f"on_redis_error says."
        )


class LockKeyError(RedisLockError, TypeError):
    """The arguments of a task cannot be turned into a lock key.

    ``task`` is the task name, ``argument`` the argument (or path inside it) at fault.
    """

    def __init__(self, task: str, argument: str, problem: str) -> None:
        self.task = task
        self.argument = argument
        self.problem = problem
        super().__init__(task, argument, problem)

    def __str__(self) -> str:
        return (
            f"task {self.task!r}: argument {self.argument!r} {self.problem}; "
            f"set lock_key to the arguments that identify the task "
            f"(a list of names, or a callable returning a str)"
        )


class DuplicateTaskError(RedisLockError):
    """A task's lock is held by another execution (``on_duplicate="raise"``, or a skip).

    ``task_id`` is the refused task's id, ``holder`` the id of the execution (or of the call,
    ``{task id}@queued``) holding ``key``; ``holder_task_id`` that holder's task id, for
    ``AsyncResult(error.holder_task_id)`` (read from the holder id by whoever raises it).
    """

    def __init__(self, task: str, task_id: str, key: str, holder: str, holder_task_id: str) -> None:
        self.task = task
        self.task_id = task_id
        self.key = key
        self.holder = holder
        self.holder_task_id = holder_task_id
        # args are the constructor's, so result backends can re-create the error.
        super().__init__(task, task_id, key, holder, holder_task_id)

    def __str__(self) -> str:
        return f"Duplicate {self.task}[{self.task_id}]: {self.key} is held by {self.holder}"


class LockUnavailableError(RedisLockError):
    """Redis could not be reached to take a task's lock (``on_redis_error="fail"``)."""

    def __init__(self, task: str, task_id: str, key: str, url: str, cause: BaseException | str) -> None:
        self.task = task
        self.task_id = task_id
        self.key = key
        self.url = url
        # Kept as text: the cause itself may not survive a result backend's round trip. Not its
        # repr: redis-py's is "network:ConnectionError", without the reason.
        self.cause = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
        super().__init__(task, task_id, key, url, self.cause)

    def __str__(self) -> str:
        call = f"{self.task}[{self.task_id}]: Redis at {self.url} is unreachable ({self.cause})"
        if not self.key:  # run without its lock (lock=False): a gate (fair share, a limit) asked
            return f"Cannot run {call}, which its fair share or rate limits ask"
        return f"Cannot lock {call} while taking {self.key}"


class LockError(RedisLockError):
    """A ``RedisLock`` or ``RedisSemaphore`` used the wrong way (released while not acquired,
    acquired twice by one object); the message names the key."""


class LockAcquireError(LockError):
    """A ``with RedisLock(...)`` / ``RedisSemaphore`` block could not get in (non-blocking, or
    ``acquire_timeout`` passed). ``holders`` are the ids that held it at the last attempt."""

    def __init__(self, key: str, holders: tuple[str, ...], waited: float | None) -> None:
        self.key = key
        self.holders = tuple(holders)  # a JSON round trip makes it a list
        self.waited = waited
        super().__init__(key, self.holders, waited)

    def __str__(self) -> str:
        held = ", ".join(self.holders) if self.holders else "nobody (waiters queued first)"
        how = "without blocking" if not self.waited else f"within {self.waited:g}s"
        return f"Could not acquire {self.key} {how}: it is held by {held}"


class LockNotOwnedError(LockError):
    """A lock was released or extended by a holder that no longer owns it."""

    def __init__(
        self, key: str, holder: str, current: str | None, action: str = "release", kind: str = "lock"
    ) -> None:
        self.key = key
        self.holder = holder
        self.current = current
        self.action = action
        self.kind = kind
        super().__init__(key, holder, current, action, kind)

    def __str__(self) -> str:
        now = "has expired" if self.current is None else f"is now held by {self.current}"
        return f"Cannot {self.action} {self.kind} {self.key}: it is not owned by {self.holder}, it {now}"


class RateLimitPaused(RedisLockError):
    """Raised by a rate-limited task's body when the API behind its limits says "back off"
    (a 429 with ``Retry-After``): the limits (``limits``: the names of some of the task's named
    limits; None: every limit of the call) admit nothing for ``retry_after`` seconds, on every
    worker, and this call is re-queued for after the pause, never lost. A bound task may call
    ``self.request.redislock.pause(retry_after, limits)`` instead, which raises it.

    Raised elsewhere (a task with no rate limit, an eager call) it is an error like any other.
    """

    def __init__(self, retry_after: float, limits: list[str] | tuple[str, ...] | None = None) -> None:
        if (
            isinstance(retry_after, bool)
            or not isinstance(retry_after, (int, float))
            or not 0 < retry_after < float("inf")
        ):
            raise OptionError(
                "retry_after",
                "RateLimitPaused",
                f"must be a number of seconds > 0, got {short_repr(retry_after)}",
            )
        if limits is not None and (
            isinstance(limits, str) or not all(isinstance(name, str) and name for name in limits)
        ):
            raise OptionError(
                "limits",
                "RateLimitPaused",
                f"must be None or a list of limit names, got {short_repr(limits)}",
            )
        self.retry_after = float(retry_after)
        self.limits = None if limits is None else tuple(limits)
        super().__init__(retry_after, limits)

    def __str__(self) -> str:
        which = "its rate limits" if self.limits is None else ", ".join(self.limits)
        return f"Paused {which} for {self.retry_after:g}s"
