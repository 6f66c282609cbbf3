"""``QueueOnce`` and ``AlreadyQueued``: celery-once's task base, on this package's renewed lock."""

from __future__ import annotations

import operator
import warnings
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from celery import Celery, states
from celery.result import EagerResult
from kombu.utils.uuid import uuid

from ..config.options import APP_CONFIGURATION, source_task
from ..engine.holders import queued_id, task_id_of
from ..engine.timing import to_ms
from ..engine.waiting import wait_for
from ..errors import DuplicateTaskError, OptionError
from ..integration.runtime import runtime_for
from ..integration.sending import message_expires, queued_ttl_ms
from ._common import (
    CompatTask,
    Refusal,
    call_key,
    clear_key,
    countdown,
    flag,
    lock_key_of,
    seconds,
    signature_arguments,
)

__all__ = ["AlreadyQueued", "OnceBackend", "QueueOnce", "legacy_once_key"]

#: The one celery-once backend this stands in for (its locks were in Redis too), by every path
#: celery-once's ``import_backend`` finds it under: its package, and its own module.
REDIS_BACKEND = "celery_once.backends.Redis"
REDIS_BACKENDS = frozenset({REDIS_BACKEND, "celery_once.backends.redis.Redis"})
_SETTINGS = "ONCE"
_TASK_KEYS = frozenset({"keys", "graceful", "timeout", "unlock_before_run"})
_CALL_KEYS = frozenset({"graceful", "timeout"})
_SETTING_KEYS = frozenset({"url", "default_timeout", "blocking", "blocking_timeout"})


class AlreadyQueued(DuplicateTaskError):
    """A call refused at send because the same call is queued or running (celery-once's
    exception). ``countdown``: seconds the lock has left; ``task_id``: the holder's task id
    ("" when the old library's key refused it); ``key`` and ``holder`` as DuplicateTaskError's."""

    def __init__(
        self, countdown: float, task: str = "", task_id: str = "", key: str = "", holder: str = ""
    ) -> None:
        super().__init__(task, task_id, key, holder, task_id)
        self.countdown = countdown
        self.message = f"Expires in {countdown} seconds"
        self.args = (countdown, task, task_id, key, holder)  # so it pickles back to itself

    def __str__(self) -> str:
        return f"{self.message}: {self.task} is already queued ({self.key} is held by {self.holder or '?'})"


def _mapping(value: Any, option: str, source: str, known: frozenset[str] | None) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise OptionError(option, source, f"must be a dict, got {value!r}")
    unknown = [] if known is None else sorted(str(k) for k in value if k not in known)
    if unknown and known is not None:
        raise OptionError(option, source, f"has unknown key(s) {unknown}; known: {sorted(known)}")
    return value


def once_settings(app: Celery) -> Mapping[str, Any]:
    """``app.conf.ONCE["settings"]``, checked: the Redis backend only (its URL forms); a key
    celery-once did not read is warned about once per app (celery-once ignored it), not refused."""
    conf = app.conf.get(_SETTINGS)
    if conf is None:
        return {}
    source = APP_CONFIGURATION
    if not isinstance(conf, Mapping):
        raise OptionError(_SETTINGS, source, f"must be a dict with 'backend' and 'settings', got {conf!r}")
    backend = conf.get("backend", REDIS_BACKEND)
    if backend not in REDIS_BACKENDS:
        raise OptionError(
            _SETTINGS,
            source,
            f"backend {backend!r} is not supported: celery_redislock keeps its locks in Redis; "
            f"use {REDIS_BACKEND!r} with a 'url' (or drop ONCE and set redislock_url)",
        )
    settings = _mapping(conf.get("settings"), "ONCE['settings']", source, None)
    unknown = sorted(str(k) for k in settings if k not in _SETTING_KEYS)
    if unknown and app not in _warned:
        _warned.add(app)
        warnings.warn(
            f"ONCE['settings'] has key(s) {unknown} that celery-once ignored and "
            f"celery_redislock ignores too; it reads {sorted(_SETTING_KEYS)}",
            UserWarning,
            stacklevel=2,
        )
    return settings


#: The apps whose ONCE['settings'] were warned about (once an app: they are read at each send).
_warned: weakref.WeakSet[Celery] = weakref.WeakSet()


class QueueOnce(CompatTask):
    """celery-once's ``QueueOnce``: ``once={"keys", "graceful", "timeout", "unlock_before_run"}``
    on the task, ``once={"graceful", "timeout"}`` per call, ``app.conf.ONCE``; a duplicate raises
    :class:`AlreadyQueued` at send, or returns a REJECTED ``EagerResult`` with ``graceful``."""

    abstract = True
    once: ClassVar[Mapping[str, Any]] = {"graceful": False, "unlock_before_run": False}
    redislock_consumed_options: ClassVar[frozenset[str]] = frozenset({"once"})
    compat_family: ClassVar[str] = "once"

    @classmethod
    def compat_options(cls, app: Celery, source: str) -> Mapping[str, Any]:
        once = _mapping(cls.once, "once", source, _TASK_KEYS)
        flag(once.get("graceful", False), "once['graceful']", source)
        started = flag(once.get("unlock_before_run", False), "once['unlock_before_run']", source)
        native: dict[str, Any] = {
            "lock_key": lock_key_of(once.get("keys"), "once['keys']", source),
            "lock_until": "started" if started else "finished",
        }
        timeout = once.get("timeout", once_settings(app).get("default_timeout"))
        if timeout is not None:
            native["queued_timeout"] = seconds(timeout, "once['timeout']", source)
        return native

    @classmethod
    def peer_url(cls, app: Celery) -> str | None:
        url = once_settings(app).get("url")
        return url if isinstance(url, str) and url else None

    def get_key(self, args: Any = None, kwargs: Any = None) -> str:
        """celery-once's ``get_key``: the lock key of a call (this package's key, which
        ``once_backend`` takes and clears)."""
        return call_key(self, args, kwargs)

    @property
    def once_backend(self) -> OnceBackend:
        """celery-once's ``task.once_backend``: ``raise_or_lock`` and ``clear_lock`` by hand."""
        return OnceBackend(self)

    def legacy_clear_before_run(self) -> bool:
        return bool(self.once.get("unlock_before_run", False))

    def legacy_key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        arguments = signature_arguments(self, args, kwargs)
        if arguments is None:
            return None
        return legacy_once_key(self.name, arguments, self.once.get("keys"))

    def apply_async(
        self, args: Any = None, kwargs: Any = None, task_id: str | None = None, *rest: Any, **options: Any
    ) -> Any:
        """Send the task unless the same call is queued or running: then raise AlreadyQueued,
        or return ``EagerResult(None, None, "REJECTED")`` with ``graceful``, as celery-once."""
        source = source_task(self.name)
        call = _mapping(options.pop("once", None), "once", f"{source} apply_async", _CALL_KEYS)
        graceful = flag(call.get("graceful", self.once.get("graceful", False)), "once['graceful']", source)
        settings = once_settings(self.app)
        result, refusal = self.send(args, kwargs, task_id, rest, options)
        if refusal is not None and settings.get("blocking", False):
            result, refusal = self._block(refusal, settings, args, kwargs, task_id, rest, options)
        if refusal is None:
            if "timeout" in call and result is not None:
                self._set_queued_ttl(
                    result.id, seconds(call["timeout"], "once['timeout']", source), args, kwargs, options
                )
            return result
        if graceful:
            # What celery-once returns: a result with no task id, state REJECTED.
            return EagerResult(None, None, states.REJECTED)  # type: ignore[arg-type]
        raise AlreadyQueued(
            refusal.countdown, self.name, refusal.holder_task_id, refusal.key, refusal.holder or ""
        )

    def _block(
        self,
        refusal: Refusal,
        settings: Mapping[str, Any],
        args: Any,
        kwargs: Any,
        task_id: str | None,
        rest: tuple[Any, ...],
        options: dict[str, Any],
    ) -> tuple[Any, Refusal | None]:
        """celery-once's ``blocking`` setting: wait up to ``blocking_timeout`` (None: no limit)
        for the holder to release, woken by the release notice, then send."""
        wait = _blocking_timeout(settings)
        runtime = runtime_for(self.app)
        return wait_for(
            runtime.engine.client,
            runtime.release_channel(refusal.key),
            lambda: self.send(args, kwargs, task_id, rest, dict(options)),
            lambda sent: sent[1] is None,
            wait,
        )

    def _set_queued_ttl(
        self, task_id: str, ttl: float, args: Any, kwargs: Any, options: Mapping[str, Any]
    ) -> None:
        """A per-call ``once={"timeout": s}``: the queued lock lives ``s`` seconds. Compare-and-set,
        so a lock a worker has taken over meanwhile keeps its own TTL."""
        runtime = runtime_for(self.app)
        queue = options.get("queue")
        plan = runtime.plan(self, getattr(queue, "name", queue) if queue is not None else None)
        key = plan.key(self, tuple(args or ()), dict(kwargs or {}))
        queued = queued_id(task_id)
        ttl_ms = queued_ttl_ms(to_ms(ttl), message_expires(self, options))
        runtime.engine.transfer(key, queued, queued, ttl_ms)


class OnceBackend:
    """celery-once's backend methods that projects call by hand, on this package's lock: keys
    from ``task.get_key``; a lock taken here refuses identical sends (``AlreadyQueued``) until
    ``clear_lock`` or its timeout, and a worker running that call takes it over and releases it
    at the end, as celery-once's worker cleared it."""

    def __init__(self, task: QueueOnce) -> None:
        self.task = task

    def raise_or_lock(self, key: str, timeout: float) -> None:
        """Take ``key`` for ``timeout`` seconds, or raise AlreadyQueued (``countdown``: what its
        lock has left). Waits for it first with ``ONCE["settings"]["blocking"]``, as celery-once."""
        task = self.task
        ttl_ms = to_ms(seconds(timeout, "timeout", f"{source_task(task.name)} once_backend.raise_or_lock"))
        holder = queued_id(uuid())
        runtime = runtime_for(task.app)
        settings = once_settings(task.app)
        result = runtime.engine.acquire(key, holder, ttl_ms)
        if not result.acquired and settings.get("blocking", False):
            wait = _blocking_timeout(settings)
            result = wait_for(
                runtime.engine.client,
                runtime.release_channel(key),
                lambda: runtime.engine.acquire(key, holder, ttl_ms),
                lambda taken: taken.acquired,
                wait,
            )
        if result.acquired:
            _by_hand.setdefault(task.app, {})[key] = holder
            return
        info = runtime.engine.inspect([key])[0]
        raise AlreadyQueued(countdown(info.ttl_ms), task.name, task_id_of(result.holder), key, result.holder)

    def clear_lock(self, key: str) -> int:
        """Release ``key``: compare-and-delete when this process took it with ``raise_or_lock``
        or the running task holds it; else deleted, as celery-once did. 1 when a lock went."""
        holder = _by_hand.get(self.task.app, {}).pop(key, None)
        return int(clear_key(self.task, key, holder))


def _blocking_timeout(settings: Mapping[str, Any]) -> float | None:
    timeout = settings.get("blocking_timeout", 1)
    if timeout is None:
        return None
    return seconds(timeout, "ONCE['settings']['blocking_timeout']", APP_CONFIGURATION)


#: Per app: the locks this process took by hand (``raise_or_lock``), key to holder id.
_by_hand: weakref.WeakKeyDictionary[Celery, dict[str, str]] = weakref.WeakKeyDictionary()


# -- celery-once 3.0.1's key format (celery_once/helpers.py), for the transition ------------------


def _force_string(value: Any) -> Any:
    if isinstance(value, dict):
        pairs = [
            (_force_string(k), _force_string(v)) for k, v in sorted(value.items(), key=operator.itemgetter(0))
        ]
        return "{" + ", ".join(str({k: v}).strip("{}") for k, v in dict(pairs).items()) + "}"
    if isinstance(value, list):
        return [_force_string(item) for item in value]
    return value


def legacy_once_key(name: str, arguments: Mapping[str, Any], keys: Any = None) -> str | None:
    """The Redis key celery-once 3.0.1 locks a call under: ``qo_<name>_<arg>-<value>_...``,
    arguments by name (defaults not applied), sorted, values through ``str()``. None when
    celery-once could not have made it (a key it would not find, arguments it cannot sort)."""
    try:
        if keys is not None:
            arguments = {key: arguments[key] for key in keys}
        items = sorted(arguments.items(), key=operator.itemgetter(0))
        return "_".join(["qo", name, *(f"{k}-{_force_string(v)}" for k, v in items)])
    except (KeyError, TypeError):
        return None
