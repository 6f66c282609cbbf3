"""Fenced writes: a write that a run which lost its lock cannot make.

A row that a fenced task writes holds two more columns: the fencing token of the last write
applied to it and the lock key that token came from. A fenced write is one ``UPDATE ... WHERE
fence < token AND (fence_key = key OR fence_key = '')``: the database applies it only for a
token larger than every one applied before, from the same key, whatever the writer believes
about its lock. The ORM halves (``.django`` for Django's ORM, ``.sqlalchemy`` for SQLAlchemy)
share what is here: where the key and the token come from, and the errors.

Nothing here imports Django or SQLAlchemy; each half imports its own ORM only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ConfigurationError, RedisLockError, short_repr

__all__ = [
    "Fence",
    "FenceColumnError",
    "FenceKeyError",
    "FencingError",
    "NoFencingTokenError",
    "StaleWriteError",
    "fence_of",
]

#: The longest lock key a fence key column holds (the Django field's and the column's length):
#: a key longer than this is refused before any write, not cut short by the database.
FENCE_KEY_LENGTH = 255


class FencingError(RedisLockError):
    """Base class of the errors of a fenced write."""


class NoFencingTokenError(FencingError, ConfigurationError):
    """The caller has no fencing token: a task without ``fencing=True``, a call outside a
    worker (``task()`` called directly), or a ``RedisLock`` that is not held."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(source, reason)

    def __str__(self) -> str:
        return f"a fenced write needs a fencing token, and {self.source} has none: {self.reason}"


class FenceColumnError(FencingError, ConfigurationError):
    """The model or table written has no fence column (or no fence key column) of that name."""

    def __init__(self, table: str, column: str, how: str) -> None:
        self.table = table
        self.column = column
        self.how = how
        super().__init__(table, column, how)

    def __str__(self) -> str:
        return f"{self.table} has no fence column {self.column!r} for a fenced write: {self.how}"


class FenceKeyError(FencingError):
    """The row is fenced by another lock key: a token of this key says nothing about the order
    of the writes of that one (the two locks never excluded each other)."""

    def __init__(self, row: str, stored_key: str, key: str) -> None:
        self.row = row
        self.stored_key = stored_key
        self.key = key
        super().__init__(row, stored_key, key)

    def __str__(self) -> str:
        return (
            f"{self.row} is fenced by lock key {self.stored_key!r}, not by {self.key!r}: a token of "
            "another key cannot order writes to it (lock both writers on the same lock_key, or "
            "reset the row's fence key to '' to hand it over)"
        )


class StaleWriteError(FencingError):
    """The database refused the write: the row already holds a token at least this one's, so a
    later holder of the lock wrote it (this run lost its lock meanwhile). Nothing was written."""

    def __init__(self, row: str, key: str, token: int, stored_token: int) -> None:
        self.row = row
        self.key = key
        self.token = token
        self.stored_token = stored_token
        super().__init__(row, key, token, stored_token)

    def __str__(self) -> str:
        return (
            f"write to {self.row} refused: it holds token {self.stored_token} of {self.key!r}, "
            f"not below this run's {self.token} (a later holder of the lock wrote it)"
        )


@dataclass(frozen=True)
class Fence:
    """The lock key and the fencing token a fenced write carries."""

    key: str
    token: int


def fence_of(source: Any) -> Fence:
    """The fence of ``source``: a bound ``SingletonTask`` (``self`` in a ``bind=True`` task),
    its ``self.request``, ``self.request.redislock``, or a held ``RedisLock(fencing=True)``.
    Always the key and the token of one acquisition, never a token given apart from its key.
    ``NoFencingTokenError`` says why there is none."""
    if isinstance(source, Fence):
        return source
    info, what = source, short_repr(source)
    request = getattr(source, "request", None)
    if request is not None and isinstance(getattr(source, "name", None), str):
        info, what = getattr(request, "redislock", None), f"task {source.name!r}"  # a bound task
    elif hasattr(source, "redislock") and hasattr(source, "task"):
        info, what = source.redislock, f"the request of task {source.task!r}"  # its request
    if info is None or (hasattr(info, "key") and not info.key):
        raise NoFencingTokenError(
            what,
            "it runs without a lock (called directly rather than by a worker, not a SingletonTask, "
            "or lock=False)",
        )
    if hasattr(info, "key") and hasattr(info, "token"):  # request.redislock
        key, token = info.key, info.token
        if token is None:
            raise NoFencingTokenError(what, "declare the task with fencing=True")
    elif hasattr(info, "name") and hasattr(info, "token"):  # a RedisLock
        key, token, what = info.name, info.token, f"RedisLock {info.name!r}"
        if token is None:
            raise NoFencingTokenError(what, "the lock is not held, or was made without fencing=True")
    else:
        raise NoFencingTokenError(
            what, "pass the bound task (bind=True: self), self.request or a RedisLock(fencing=True)"
        )
    if not isinstance(key, str) or not isinstance(token, int):
        raise NoFencingTokenError(what, f"its key {short_repr(key)} or token {short_repr(token)} is not one")
    if len(key) > FENCE_KEY_LENGTH:
        raise NoFencingTokenError(
            what,
            f"its lock key is {len(key)} characters, more than a fence key column holds ({FENCE_KEY_LENGTH})",
        )
    return Fence(key, token)
