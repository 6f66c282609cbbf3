"""What a running execution sees of its lock (``self.request.redislock``), and how the renewal's
reports of a lost or re-taken lock reach it and the ``lock_lost``/``lock_retaken`` signals."""

from __future__ import annotations

import time
from typing import Any, NoReturn

from ..engine.leases import Client, Lease
from ..engine.renewal import LeaseEvent, add_listener
from ..engine.timing import server_time
from ..errors import RateLimitPaused
from .signals import lock_lost, lock_retaken, send_lease_event

__all__ = ["UNLOCKED", "RedisLockInfo", "Unlocked", "unwatch", "watch"]


class RedisLockInfo:
    """``self.request.redislock`` of a running ``SingletonTask`` (None while it runs unlocked).

    ``key`` and ``holder``: the lock (or semaphore slot) and the id it is held under; ``token``:
    its fencing token (``fencing=True``; else None); ``lost``: True once the renewal found it
    held by someone else (its TTL ran out): a long body checks it before a side effect;
    ``acquired_at``: when it was taken, by the Redis server's clock (seconds since the epoch).
    """

    __slots__ = (
        "_acquired_at",
        "_app",
        "_client",
        "_started",
        "holder",
        "key",
        "lost",
        "task_id",
        "task_name",
        "token",
    )

    def __init__(
        self,
        key: str,
        holder: str,
        task_name: str,
        task_id: str,
        app: Any,
        client: Client,
        token: int | None = None,
        acquired_at: float | None = None,
    ) -> None:
        self.key = key
        self.holder = holder
        self.task_name = task_name
        self.task_id = task_id
        self.token = token
        self.lost = False
        self._app = app
        self._client = client
        self._acquired_at = acquired_at
        self._started = time.monotonic()

    @property
    def acquired_at(self) -> float:
        """The server's time of the acquisition. A fenced acquire script reports it; otherwise
        (the ``SET NX`` fast path reports nothing) it costs one TIME round trip on first
        access, never on the task's path: the server's time then, less the time elapsed here
        since the acquisition (exact to that round trip's duration)."""
        if self._acquired_at is None:
            elapsed = time.monotonic() - self._started
            self._acquired_at = server_time(self._client) - elapsed
        return self._acquired_at

    def pause(self, retry_after: float, limits: list[str] | tuple[str, ...] | None = None) -> NoReturn:
        """The API behind the task's rate limits said "back off" (a 429 with ``Retry-After``):
        its limits (``limits``: some of its named ones; None: all of the call's) admit nothing
        for ``retry_after`` seconds on every worker, and this call is re-queued for after the
        pause. Does not return: it raises ``RateLimitPaused``, which the rate limit handles as
        when the body raises it (logged, counted, signalled; an error on a task without one)."""
        raise RateLimitPaused(retry_after, limits)

    def sender(self) -> Any:
        """The task, as its app knows it by the name the holder's execution ran."""
        return self._app.tasks.get(self.task_name)

    def __repr__(self) -> str:
        return f"<RedisLockInfo key={self.key!r} holder={self.holder!r} token={self.token} lost={self.lost}>"


class Unlocked:
    """``self.request.redislock`` of a task with ``lock=False``: no lock, so no key, holder or
    token, and false in a test (as None is); ``pause`` works as a locked task's, so a body that
    pauses its rate limits runs either way."""

    __slots__ = ()
    key = None
    holder = None
    token = None
    lost = False

    def __bool__(self) -> bool:
        return False

    def pause(self, retry_after: float, limits: list[str] | tuple[str, ...] | None = None) -> NoReturn:
        """As ``RedisLockInfo.pause``: raises ``RateLimitPaused``."""
        raise RateLimitPaused(retry_after, limits)

    def __repr__(self) -> str:
        return "<Unlocked: lock=False>"


#: The one ``Unlocked``: it holds nothing, so every call shares it.
UNLOCKED = Unlocked()


# The executions this process holds a lock for, by (key, holder): renewal reports find them here.
# Plain dict operations, atomic under the GIL, so the renewal thread may read it meanwhile.
_live: dict[tuple[str, str], RedisLockInfo] = {}


def watch(info: RedisLockInfo) -> None:
    _live[(info.key, info.holder)] = info


def unwatch(info: RedisLockInfo) -> None:
    _live.pop((info.key, info.holder), None)


def _on_lease_event(event: LeaseEvent, lease: Lease, other: str | None) -> None:
    # In the renewal thread. A lease of no execution (a RedisLock) is sent with no task.
    info = _live.get((lease.key, lease.holder))
    # Released by an operator: lost, with no new holder (it is no longer renewed either).
    gone = event != "retaken"
    if gone and info is not None:
        info.lost = True
    task = info.sender() if info is not None else None
    task_id = info.task_id if info is not None else None
    signal = lock_lost if gone else lock_retaken
    send_lease_event(signal, task, lease.key, lease.holder, other, task_id)


add_listener(_on_lease_event)
