"""RedisLock: a lock for any code, on the engine's scripts and the process's renewal timer."""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Any, Callable, Generic, TypeVar

import redis

from ..errors import LockAcquireError, LockError, LockNotOwnedError
from .checks import check_argument
from .holders import new_holder_id
from .keys import release_channel
from .leases import Lease, LeaseEngine
from .lock_engine import LockEngine, make_engine
from .renewal import get_renewer
from .timing import DEFAULT_RETRY_DELAY, DEFAULT_TIMEOUT, renew_interval, to_ms
from .waiting import wait_for

__all__ = ["HeldInRedis", "PerClient", "RedisLock", "lock_engine_for", "new_holder_id"]

_E = TypeVar("_E", bound=LeaseEngine)

_T = TypeVar("_T")


class PerClient(Generic[_T]):
    """One ``make(client)`` per Redis client: one engine per client, so that the renewal timer
    renews everything held through a client in one batch.

    Kept on the client itself (an attribute named after ``name``), so it lives as long as the
    client and no longer: a cache keyed weakly on the client would hold it through its value
    (an engine holds its client), and neither would ever be freed.
    """

    def __init__(self, name: str, make: Callable[[redis.Redis], _T]) -> None:
        self._make = make
        self._attribute = f"_celery_redislock_{name}"
        self._mutex = threading.Lock()
        # Another thread may hold the mutex at fork time: a child starts with a fresh one.
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._mutex = threading.Lock()

    def __call__(self, client: redis.Redis) -> _T:
        made: _T | None = getattr(client, self._attribute, None)
        if made is None:
            with self._mutex:
                made = getattr(client, self._attribute, None)
                if made is None:
                    made = self._make(client)
                    setattr(client, self._attribute, made)
        return made


#: The lock engine of a client.
lock_engine_for: PerClient[LockEngine] = PerClient("lock_engine", make_engine)


class HeldInRedis(ABC, Generic[_E]):
    """What ``RedisLock`` and ``RedisSemaphore`` share: arguments, one holder id per
    acquisition owned by the object (any thread may release it), renewal, release, extend.

    One object is one holder: acquiring an object that holds already raises ``LockError``;
    threads or processes that contend each make their own.
    """

    #: What errors call it: "lock" or "semaphore".
    kind = "lock"

    def __init__(
        self,
        redis: redis.Redis,
        name: str,
        timeout: float,
        renew: bool,
        blocking: bool,
        acquire_timeout: float | None,
        retry_delay: float,
    ) -> None:
        source = f"{type(self).__name__}({name!r})"
        if not isinstance(name, str) or not name:
            raise LockError(f"{type(self).__name__}: name must be a non-empty str, got {name!r}")
        self.redis = redis
        #: The Redis key, as given.
        self.name = name
        self.timeout: float = check_argument("seconds", "timeout", timeout, source)
        self.renew: bool = check_argument("flag", "renew", renew, source)
        self.blocking: bool = check_argument("flag", "blocking", blocking, source)
        self.acquire_timeout: float | None = (
            None
            if acquire_timeout is None
            else check_argument("seconds or 0", "acquire_timeout", acquire_timeout, source)
        )
        self.retry_delay: float = check_argument("seconds", "retry_delay", retry_delay, source)
        self._source = source
        self._lease: Lease | None = None
        self._acquiring = False
        # Guards _lease and _acquiring; never held across a Redis call.
        self._mutex = threading.Lock()

    # -- what subclasses provide ------------------------------------------------------------

    @property
    @abstractmethod
    def _engine(self) -> _E: ...

    @abstractmethod
    def _take(self, holder: str, blocking: bool, timeout: float | None) -> tuple[bool, tuple[str, ...]]:
        """Try (and wait, if ``blocking``) to get in as ``holder``: (acquired, other holders)."""

    @abstractmethod
    def _lease_for(self, holder: str, ttl_ms: int) -> Lease: ...

    @abstractmethod
    def _holders(self) -> tuple[str, ...]:
        """The ids holding it now (diagnostics and ``owned``)."""

    # -- the interface ----------------------------------------------------------------------

    @property
    def holder(self) -> str | None:
        """The id this object holds it under; None when it does not."""
        lease = self._lease
        return None if lease is None else lease.holder

    def acquire(self, blocking: bool | None = None, acquire_timeout: float | None = None) -> bool:
        """Get in; True when this object holds it now.

        ``blocking`` and ``acquire_timeout`` default to the constructor's. Blocking waits are
        woken by release notices (PUBSUB), re-trying every ``retry_delay`` seconds at most.
        """
        blocking = self.blocking if blocking is None else blocking
        if acquire_timeout is not None:
            acquire_timeout = check_argument("seconds or 0", "acquire_timeout", acquire_timeout, self._source)
        timeout = self.acquire_timeout if acquire_timeout is None else acquire_timeout
        with self._mutex:
            if self._lease is not None or self._acquiring:
                raise LockError(
                    f"{self.kind} {self.name} is already held (or being acquired) by this "
                    f"{type(self).__name__} object; make one object per thread or process that contends"
                )
            self._acquiring = True
        try:
            holder = new_holder_id()
            acquired, self._last_holders = self._take(holder, blocking and timeout != 0, timeout)
            if acquired:
                lease = self._lease_for(holder, to_ms(self.timeout))
                if self.renew:
                    get_renewer().add(self._engine, lease, renew_interval(self.timeout))
                with self._mutex:
                    self._lease = lease
            return acquired
        finally:
            with self._mutex:
                self._acquiring = False

    def release(self) -> None:
        """Give it back. Raises ``LockNotOwnedError`` when it expired (and maybe someone else
        holds it now): whatever it guarded may have run twice."""
        lease = self._take_lease("release")
        if self.renew:
            get_renewer().discard(self._engine, lease)
        if not self._engine.release(lease.key, lease.holder, notify=release_channel(lease.key)):
            raise LockNotOwnedError(lease.key, lease.holder, self._current(), "release", self.kind)

    def extend(self, timeout: float | None = None) -> None:
        """Reset its TTL to ``timeout`` seconds (default: the constructor's ``timeout``; the
        renewal timer, if on, keeps that new TTL). One that expired while nobody took it is
        taken back, as renewal does; one someone else took raises ``LockNotOwnedError``."""
        seconds = (
            self.timeout if timeout is None else check_argument("seconds", "timeout", timeout, self._source)
        )
        with self._mutex:
            lease = self._lease
        if lease is None:
            raise LockError(f"Cannot extend {self.kind} {self.name}: this object does not hold it")
        extended = self._lease_for(lease.holder, to_ms(seconds))
        report = self._engine.renew_many([extended])
        if report.stolen or report.released:  # released: an operator freed it, not to be taken back
            with self._mutex:
                self._lease = None
            if self.renew:
                get_renewer().discard(self._engine, lease)
            current = report.stolen[0][1] if report.stolen else None
            raise LockNotOwnedError(lease.key, lease.holder, current, "extend", self.kind)
        with self._mutex:
            self._lease = extended
        if self.renew:
            get_renewer().add(self._engine, extended, renew_interval(seconds))

    def owned(self) -> bool:
        """Whether this object holds it in Redis now (a snapshot: it may expire next)."""
        holder = self.holder
        return holder is not None and holder in self._holders()

    def locked(self) -> bool:
        """Whether anyone holds it now (a semaphore: whether all its slots are taken)."""
        return bool(self._holders())

    def __enter__(self: _Self) -> _Self:
        if not self.acquire():
            raise LockAcquireError(self.name, self._last_holders, self._waited())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<{self._source} holder={self.holder!r}>"

    # -- helpers ----------------------------------------------------------------------------

    _last_holders: tuple[str, ...] = ()

    def _take_lease(self, action: str) -> Lease:
        with self._mutex:
            lease, self._lease = self._lease, None
        if lease is None:
            raise LockError(f"Cannot {action} {self.kind} {self.name}: this object does not hold it")
        return lease

    def _current(self) -> str | None:
        holders = self._holders()
        return ", ".join(holders) if holders else None

    def _waited(self) -> float | None:
        return self.acquire_timeout if self.blocking else 0.0


_Self = TypeVar("_Self", bound="HeldInRedis[Any]")


class RedisLock(HeldInRedis[LockEngine]):
    """A lock in Redis at the key ``name`` (as given, no prefix), usable from any code.

    ``with RedisLock(r, "reports:42"):`` or ``acquire()`` / ``release()``. The value is a
    holder id unique to each acquisition; release deletes the key only if it is still that
    id (one Lua call). While held and ``renew`` is on, the process's renewal timer resets
    its TTL (``timeout`` seconds) every ``timeout / 3``, in the same round trip as every
    other lock it renews on that client. A blocking ``acquire`` waits on the PUBSUB channel
    ``<name>:released`` and re-tries at least every ``retry_delay`` seconds (a lock that
    expired publishes nothing), up to ``acquire_timeout`` seconds (None: no limit).

    ``fencing=True``: each acquisition also gets a fencing token (``token``), a 64-bit integer
    greater than every token issued for ``name`` before, in the same round trip; pass it to
    whatever the lock guards, which refuses a write carrying a smaller one than it has seen.
    """

    def __init__(
        self,
        redis: redis.Redis,
        name: str,
        timeout: float = DEFAULT_TIMEOUT,
        renew: bool = True,
        blocking: bool = True,
        acquire_timeout: float | None = None,
        retry_delay: float = DEFAULT_RETRY_DELAY,
        fencing: bool = False,
    ) -> None:
        super().__init__(redis, name, timeout, renew, blocking, acquire_timeout, retry_delay)
        self.fencing: bool = check_argument("flag", "fencing", fencing, self._source)
        self._lock_engine = lock_engine_for(redis)
        self._token: int | None = None

    @property
    def token(self) -> int | None:
        """The fencing token of the acquisition held now (``fencing=True``); else None."""
        return self._token if self._lease is not None else None

    @property
    def _engine(self) -> LockEngine:
        return self._lock_engine

    def _take(self, holder: str, blocking: bool, timeout: float | None) -> tuple[bool, tuple[str, ...]]:
        engine, ttl, fencing = self._lock_engine, to_ms(self.timeout), self.fencing
        result = engine.acquire(self.name, holder, ttl, fencing=fencing)
        if not result.acquired and blocking:
            result = wait_for(
                engine.client,
                release_channel(self.name),
                # Just seen held: straight to the script (one round trip, not SET NX then it).
                lambda: engine.acquire(self.name, holder, ttl, expect_free=False, fencing=fencing),
                lambda r: r.acquired,
                timeout,
                self.retry_delay,
            )
        self._token = result.token
        return result.acquired, () if result.acquired else (result.holder,)

    def _lease_for(self, holder: str, ttl_ms: int) -> Lease:
        return Lease(self.name, holder, ttl_ms)

    def _holders(self) -> tuple[str, ...]:
        holder = self._lock_engine.holder_of(self.name)
        return () if holder is None else (holder,)
