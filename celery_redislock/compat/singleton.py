"""``Singleton``, ``DuplicateTaskError`` and ``clear_locks``: celery-singleton's task base, on
this package's renewed lock."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from importlib import import_module
from typing import Any, ClassVar

import redis
from celery import Celery

from .. import errors
from ..config.options import APP_CONFIGURATION
from ..engine.holders import held_by_no_execution, queued_id, task_id_of
from ..engine.keys import glob_escape
from ..engine.timing import to_ms
from ..errors import OptionError
from ..integration.runtime import runtime_for
from ..ops.listing import held_locks
from ._common import (
    CompatTask,
    Legacy,
    call_key,
    clear_key,
    flag,
    lock_key_of,
    seconds,
    signature_arguments,
)

__all__ = ["DuplicateTaskError", "Singleton", "SingletonBackend", "clear_locks", "legacy_singleton_key"]

REDIS_BACKEND = "celery_singleton.backends.redis.RedisBackend"
#: celery-singleton's default key prefix.
DEFAULT_PREFIX = "SINGLETONLOCK_"


class DuplicateTaskError(errors.DuplicateTaskError):
    """A call refused at send with ``raise_on_duplicate`` (celery-singleton's exception):
    ``task_id`` is the task id of the queued or running original, as there."""

    def __str__(self) -> str:
        return (
            f"Attempted to queue a duplicate of task ID {self.task_id}: {self.key} is held by {self.holder}"
        )


def _conf(app: Celery, name: str, default: Any = None) -> Any:
    value = app.conf.get(name)
    return default if value is None else value


def _check_backend(app: Celery) -> None:
    backend = _conf(app, "singleton_backend_class", REDIS_BACKEND)
    name = backend if isinstance(backend, str) else f"{backend.__module__}.{backend.__qualname__}"
    if name != REDIS_BACKEND:
        raise OptionError(
            "singleton_backend_class",
            APP_CONFIGURATION,
            f"{name!r} is not supported: celery_redislock keeps its locks in Redis (leave it unset)",
        )
    if _conf(app, "singleton_backend_kwargs", {}):
        raise OptionError(
            "singleton_backend_kwargs",
            APP_CONFIGURATION,
            "is not supported: put the connection options in the URL (redislock_url)",
        )


class Singleton(CompatTask):
    """celery-singleton's ``Singleton``: ``unique_on``, ``raise_on_duplicate``, ``lock_expiry``
    and the ``singleton_*`` app settings. A duplicate returns the original's ``AsyncResult``,
    or raises :class:`DuplicateTaskError` with ``raise_on_duplicate``."""

    abstract = True
    unique_on: ClassVar[Any] = None
    raise_on_duplicate: ClassVar[bool | None] = None
    lock_expiry: ClassVar[float | None] = None
    redislock_consumed_options: ClassVar[frozenset[str]] = frozenset(
        {"unique_on", "raise_on_duplicate", "lock_expiry"}
    )
    compat_family: ClassVar[str] = "singleton"

    @classmethod
    def compat_options(cls, app: Celery, source: str) -> Mapping[str, Any]:
        _check_backend(app)
        if cls.raise_on_duplicate is not None:
            flag(cls.raise_on_duplicate, "raise_on_duplicate", source)
        native: dict[str, Any] = {"lock_key": lock_key_of(cls.unique_on, "unique_on", source)}
        expiry = cls.lock_expiry if cls.lock_expiry is not None else app.conf.get("singleton_lock_expiry")
        if expiry is not None:
            # The TTL while queued; while it runs the lock is renewed (lock_timeout).
            native["queued_timeout"] = seconds(expiry, "lock_expiry", source)
        return native

    @classmethod
    def peer_url(cls, app: Celery) -> str | None:
        # celery-singleton's order: its own setting, a redis:// result backend, the broker
        # (the last is the native default anyway).
        url = app.conf.get("singleton_backend_url")
        if url:
            return str(url)
        backend = app.conf.get("result_backend")
        return backend if isinstance(backend, str) and backend.startswith("redis://") else None

    def raises_on_duplicate(self) -> bool:
        if self.raise_on_duplicate is not None:
            return self.raise_on_duplicate
        return flag(
            _conf(self.app, "singleton_raise_on_duplicate", False),
            "singleton_raise_on_duplicate",
            APP_CONFIGURATION,
        )

    def apply_async(
        self, args: Any = None, kwargs: Any = None, task_id: str | None = None, *rest: Any, **options: Any
    ) -> Any:
        """Send the task unless the same call is queued or running: then return that one's
        ``AsyncResult``, or raise DuplicateTaskError with ``raise_on_duplicate``."""
        result, refusal = self.send(args, kwargs, task_id, rest, options)
        if refusal is not None and self.raises_on_duplicate():
            raise DuplicateTaskError(
                self.name, refusal.holder_task_id, refusal.key, refusal.holder or "", refusal.holder_task_id
            )
        return result

    # -- celery-singleton's methods that projects call by hand ----------------------------------

    @property
    def singleton_backend(self) -> SingletonBackend:
        """celery-singleton's ``task.singleton_backend``: ``lock``, ``unlock``, ``get``, ``clear``."""
        return SingletonBackend(self)

    def generate_lock(self, task_name: str, task_args: Any = None, task_kwargs: Any = None) -> str:
        """celery-singleton's ``generate_lock``: the lock key of a call of ``task_name`` (this
        package's key; ``unique_on`` applies as in ``apply_async``)."""
        return call_key(self, task_args, task_kwargs, task_name)

    def release_lock(self, task_args: Any = None, task_kwargs: Any = None) -> None:
        """celery-singleton's ``release_lock``: free the lock of this call now (within its own
        run: its execution's release, compare-and-delete; elsewhere: deleted, as there)."""
        clear_key(self, self.generate_lock(self.name, task_args, task_kwargs))

    def aquire_lock(self, lock: str, task_id: str) -> bool:
        """celery-singleton's ``aquire_lock`` (its spelling): ``singleton_backend.lock`` with the
        task's ``lock_expiry``."""
        return self.singleton_backend.lock(lock, task_id, expiry=self.lock_expiry)

    def get_existing_task_id(self, lock: str) -> str | None:
        """celery-singleton's ``get_existing_task_id``: the task id holding ``lock``, or None."""
        return self.singleton_backend.get(lock)

    def unlock(self, lock: str) -> None:
        """celery-singleton's ``unlock``: ``singleton_backend.unlock``."""
        self.singleton_backend.unlock(lock)

    # -- the transition: celery-singleton's keys (value: the holder's task id) ---------------

    def legacy_key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        return legacy_singleton_key(self, args, kwargs)

    def legacy_holder(self) -> str | None:
        return str(self.request.id)

    def legacy_holder_task_id(self, value: str) -> str:
        return value


class SingletonBackend:
    """celery-singleton's backend methods that projects call by hand, on this package's lock
    and keys (``task.generate_lock``). A lock taken here for a task id is the one a send of that
    task id takes over, as ``lock_on="enqueue"`` does; its execution releases it."""

    def __init__(self, task: Singleton) -> None:
        self.task = task

    def lock(self, lock: str, task_id: str, expiry: float | None = None) -> bool:
        """Take ``lock`` for ``task_id`` if free; ``expiry``: seconds it lives (celery-singleton's
        None, "never", is the task's queued_timeout here: a lock that cannot outlive its use)."""
        runtime = runtime_for(self.task.app)
        if expiry is None:
            ttl_ms = runtime.plan(self.task, None).options.queued_timeout_ms
        else:
            ttl_ms = to_ms(seconds(expiry, "expiry", f"{self.task.name} singleton_backend.lock"))
        return runtime.engine.take(lock, queued_id(task_id), ttl_ms)

    def unlock(self, lock: str) -> None:
        """Free ``lock``: the running task's own through its release; else deleted, as there."""
        clear_key(self.task, lock)

    def get(self, lock: str) -> str | None:
        """The task id holding ``lock``, or None when it is free."""
        holder = runtime_for(self.task.app).engine.inspect([lock])[0].holder
        return None if holder is None else task_id_of(holder)

    def clear(self, key_prefix: str) -> None:
        """Delete every key starting with ``key_prefix`` on the lock Redis, as celery-singleton
        did (``clear_locks(app)`` frees the Singleton tasks' own locks, sparing running ones)."""
        engine = runtime_for(self.task.app).engine
        for batch in engine.scan_batches(glob_escape(key_prefix) + "*"):
            engine.delete_many(batch)


def legacy_singleton_key(task: Singleton, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """The key celery-singleton 0.3.1 locks a call under: ``<prefix><md5 of name + JSON of the
    arguments>``; with ``unique_on``, the named arguments only (defaults not applied). None
    when it could not have made one (arguments JSON cannot encode, a name it would not find)."""
    app = task.app
    prefix = _conf(app, "singleton_key_prefix", DEFAULT_PREFIX)
    encoder = _conf(app, "singleton_json_encoder_class")  # celery-singleton's unreleased setting
    if isinstance(encoder, str):
        module, _, name = encoder.rpartition(".")
        encoder = getattr(import_module(module), name)
    unique_on = [task.unique_on] if isinstance(task.unique_on, str) else task.unique_on
    try:
        if unique_on:  # 0.3.1: an empty list is falsy, so every argument
            bound = signature_arguments(task, args, kwargs)
            if bound is None:
                return None
            args, kwargs = [], {name: bound[name] for name in unique_on}
        text = json.dumps(list(args or []), sort_keys=True, cls=encoder) + json.dumps(
            dict(kwargs or {}), sort_keys=True, cls=encoder
        )
    except (KeyError, TypeError, ValueError):
        return None
    return str(prefix) + hashlib.md5((task.name + text).encode()).hexdigest()


def clear_locks(app: Celery) -> int:
    """Remove the locks of the app's ``Singleton`` tasks that no execution holds (taken at
    enqueue and not started yet, or handed over to a retry), and celery-singleton's own
    (``singleton_key_prefix``) keys; never a lock a running execution holds: a live worker
    renews it, and a dead one's expires within its lock_timeout. Returns how many went.

    As in celery-singleton, a call sent after this while a cleared one is still queued is
    sent again: it runs after it, or is skipped at execution if they meet.
    """
    runtime = runtime_for(app)
    engine = runtime.engine
    removed = 0
    names = sorted({task.name for task in app.tasks.values() if isinstance(task, Singleton)})
    for name in names:
        for lock in list(held_locks(runtime, name)):
            if held_by_no_execution(lock.holder) and engine.release(
                lock.key, lock.holder, notify=runtime.release_channel(lock.key)
            ):
                removed += 1
    return removed + _clear_legacy(app)


def _clear_legacy(app: Celery) -> int:
    """Delete celery-singleton's keys (``<prefix>*``), as its clear_locks did."""
    url = Singleton.peer_url(app) or runtime_for(app).settings.url
    prefix = str(_conf(app, "singleton_key_prefix", DEFAULT_PREFIX))
    engine = Legacy(url).engine
    client = engine.client
    removed = 0
    try:
        for batch in engine.scan_batches(glob_escape(prefix) + "*"):
            removed += sum(engine.delete_many(batch))
    finally:
        if isinstance(client, redis.Redis):
            client.close()
    return removed
