"""What both drop-ins share: translating a peer's options into native ones, adopting its Redis
URL, telling a refused send from a sent one, and the old-format keys of the transition."""

from __future__ import annotations

import functools
import inspect
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from celery import Celery, Task

from .. import SingletonTask  # through the package: loads what the Celery integration needs
from ..config.arguments import KEY_HEADER, KeyBuilder
from ..config.lock_client import make_client
from ..config.options import APP_CONFIGURATION, LockOptions, source_task
from ..config.urls import resolve_redis_url
from ..engine import LockEngine, LockInfo, make_engine
from ..engine.checks import check_argument
from ..engine.holders import queued_id, task_id_of
from ..engine.leases import REDIS_ERRORS
from ..engine.timing import ttl_seconds
from ..errors import OptionError
from ..integration.mode import Send
from ..integration.runtime import SOCKET_TIMEOUT, reset_runtime, run_function, runtime_for
from ..integration.sending import send_plan
from ..integration.task import HELD_FIELD

__all__ = [
    "LEGACY_SETTING",
    "CompatTask",
    "Legacy",
    "Refusal",
    "call_key",
    "clear_key",
    "constant_key",
    "countdown",
    "lock_key_of",
]

logger = logging.getLogger(__name__)

#: The transition setting: compat tasks also honour (at send) and clear (after a run of a
#: message an old producer sent) the lock keys the old library wrote.
LEGACY_SETTING = "redislock_compat_legacy_keys"


def constant_key(task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """``lock_key`` of a peer's empty key list: one key per task, whatever the arguments."""
    return ""


def lock_key_of(names: Any, option: str, source: str) -> Any:
    """The native ``lock_key`` for a peer's list of argument names (None: every argument)."""
    if names is None:
        return None
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n for n in names):
        raise OptionError(option, source, f"must be None or a list of argument names, got {names!r}")
    # An empty list means "one at a time whatever the arguments", not "every argument".
    return tuple(names) if names else constant_key


def seconds(value: Any, option: str, source: str) -> float:
    """A peer's timeout: seconds > 0 (``OptionError`` naming the option and the task if not)."""
    result: float = check_argument("seconds", option, value, source)
    return result


def flag(value: Any, option: str, source: str) -> bool:
    result: bool = check_argument("flag", option, value, source)
    return result


@dataclass(frozen=True)
class Refusal:
    """A send the enqueue lock refused: the key, who holds it (None: gone since) and its TTL."""

    key: str
    holder_task_id: str
    holder: str | None
    ttl_ms: int

    @property
    def countdown(self) -> float:
        """Seconds the lock has left, as celery-once's ``AlreadyQueued.countdown``."""
        return countdown(self.ttl_ms)


def countdown(ttl_ms: int) -> float:
    """Seconds a lock with PTTL ``ttl_ms`` has left, as celery-once's ``AlreadyQueued.countdown``:
    a number, so 0 for a lock with no TTL or gone since it refused the call."""
    return ttl_seconds(ttl_ms) or 0.0


class Legacy:
    """The old library's lock keys on its Redis, for the transition (``LEGACY_SETTING``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: LockEngine | None = None

    @property
    def engine(self) -> LockEngine:
        """An engine on the old library's Redis (made on first use; the URL forms the peers took)."""
        if self._engine is None:
            url = resolve_redis_url(self.url, None, None)  # redis+socket:// becomes unix://
            self._engine = make_engine(make_client(url, socket_timeout=SOCKET_TIMEOUT))
        return self._engine

    def info(self, key: str) -> LockInfo:
        """The old key's value and PTTL, one round trip."""
        return self.engine.inspect([key])[0]

    def delete(self, key: str, task_id: str | None) -> None:
        """DEL the old key as the old library did after a run; with ``task_id``, only while it
        holds that task id (celery-singleton's value), compare-and-delete."""
        if task_id is None:
            self.engine.delete_many([key])
        else:
            self.engine.release(key, task_id)


class CompatTask(SingletonTask):
    """A SingletonTask that takes a peer's task options (translated into native ones when the
    task is bound) and its app settings; duplicates are refused at send (``lock_on="enqueue"``)."""

    #: The peer's task keywords this base consumes: SingletonTask's check of unknown keywords
    #: must let them through.
    redislock_consumed_options: ClassVar[frozenset[str]] = frozenset()

    #: Which peer this base stands in for (the old keys of one app are cached per peer).
    compat_family: ClassVar[str] = ""
    #: The native options on_bound set from the peer's (a subclass re-translates its own).
    _compat_translated: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def on_bound(cls, app: Celery) -> None:
        source = source_task(str(cls.name or cls.__name__))
        translated = dict(cls.compat_options(app, source))
        translated.setdefault("lock_on", "enqueue")
        done: set[str] = set(cls.__dict__.get("_compat_translated", ()))
        for name, value in translated.items():
            # A native option given on the task itself wins over the translated one.
            if name in cls.__dict__ and name not in done:
                continue
            setattr(cls, name, value)
            done.add(name)
        cls._compat_translated = frozenset(done)
        cls._adopt_url(app)
        super().on_bound(app)

    @classmethod
    def compat_options(cls, app: Celery, source: str) -> Mapping[str, Any]:
        """The native options the peer's options on this task (and its app settings) mean."""
        raise NotImplementedError

    @classmethod
    def peer_url(cls, app: Celery) -> str | None:
        """The Redis URL the peer's settings name, if any."""
        raise NotImplementedError

    @classmethod
    def _adopt_url(cls, app: Celery) -> None:
        # The locks go where the peer's locks went unless redislock_url says otherwise (a
        # project on RabbitMQ named its lock Redis only in the peer's settings).
        url = cls.peer_url(app)
        if url is None or app.conf.get("redislock_url"):
            return
        # Set as if configured (add_defaults would lose to an explicit None), so the first
        # peer setting adopted stays and redislock_url's resolution sees one value.
        app.conf["redislock_url"] = url
        reset_runtime(app)  # a runtime made before this saw no URL

    # -- the transition: old-format keys -------------------------------------------------------

    def legacy(self) -> Legacy | None:
        """The old library's Redis when ``redislock_compat_legacy_keys`` is on, else None."""
        app = self.app
        cached = _legacy.setdefault(app, {})
        if self.compat_family not in cached:
            enabled = app.conf.get(LEGACY_SETTING, False)
            if not isinstance(enabled, bool):
                problem = f"must be True or False, got {enabled!r}"
                raise OptionError(LEGACY_SETTING, APP_CONFIGURATION, problem)
            url = type(self).peer_url(app) or runtime_for(app).settings.url
            cached[self.compat_family] = Legacy(url) if enabled else None
        return cached[self.compat_family]

    def legacy_key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """The key the old library locked this call under (None: it could not have sent it)."""
        raise NotImplementedError

    def legacy_holder(self) -> str | None:
        """What the old library stored as the value of the running task's key, if it says whose."""
        return None

    def legacy_clear_before_run(self) -> bool:
        """Whether the old library cleared its key before the body (else after it)."""
        return False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        legacy = None if self.request.called_directly else self.legacy()
        # A message a new producer sent carries the new key and took no old one; one without
        # it came from an old producer, whose old key this run must clear as the old worker did.
        if legacy is None or getattr(self.request, KEY_HEADER, None):
            return super().__call__(*args, **kwargs)
        old = self.legacy_key(args, kwargs)
        if old is not None and self.legacy_clear_before_run():
            self._clear_legacy(legacy, old)
        try:
            return super().__call__(*args, **kwargs)
        finally:
            if old is not None and not self.legacy_clear_before_run():
                self._clear_legacy(legacy, old)

    def _clear_legacy(self, legacy: Legacy, key: str) -> None:
        try:
            legacy.delete(key, self.legacy_holder())
        except REDIS_ERRORS as exc:
            logger.warning(
                "Could not clear the old lock %s of %s[%s]: %r", key, self.name, self.request.id, exc
            )

    def legacy_refusal(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Refusal | None:
        """A refusal when the old library holds this call's old key (the transition)."""
        legacy = self.legacy()
        old = None if legacy is None else self.legacy_key(args, kwargs)
        if legacy is None or old is None:
            return None
        info = legacy.info(old)
        if info.holder is None:
            return None
        return Refusal(old, self.legacy_holder_task_id(info.holder), info.holder, info.ttl_ms)

    def legacy_holder_task_id(self, value: str) -> str:
        """The task id an old key's value names ("" when it names none: celery-once's token)."""
        return ""

    # -- sending ---------------------------------------------------------------------------

    def apply_async(
        self, args: Any = None, kwargs: Any = None, task_id: str | None = None, *rest: Any, **options: Any
    ) -> Any:
        """Publish the task as Celery does, without the lock: what a call past the peer's base
        (``super(QueueOnce, self).apply_async(...)``) did there. Its worker still takes the
        lock when it runs it. The compat bases' own ``apply_async`` lock at send."""
        return Task.apply_async(self, args, kwargs, task_id, *rest, **options)

    def send(
        self, args: Any, kwargs: Any, task_id: str | None, rest: tuple[Any, ...], options: dict[str, Any]
    ) -> tuple[Any, Refusal | None]:
        """Send through the plan's mode, locked at send as the peers locked (eager calls and a
        caller's own ``task_id`` too); returns ``(result, None)``, or ``(holder's result,
        refusal)`` when the enqueue lock (or, in the transition, the old key) refused the call."""
        call_args, call_kwargs = tuple(args or ()), dict(kwargs or {})
        refusal = self.legacy_refusal(call_args, call_kwargs)
        if refusal is not None:
            return self.AsyncResult(refusal.holder_task_id) if refusal.holder_task_id else None, refusal
        if rest:  # apply_async's own positional parameters: Celery's, published as it does
            return Task.apply_async(self, args, kwargs, task_id, *rest, **options), None
        runtime, plan, queue = send_plan(self, options, args, kwargs)
        if task_id is not None and _own_task_id(plan, options):
            refusal = self._refuse_own_task_id(runtime, plan, call_args, call_kwargs, task_id)
            if refusal is not None:
                return self.AsyncResult(refusal.holder_task_id), refusal
        publish = functools.partial(Task.apply_async, self)
        # Through the plan's mode in eager mode too (SingletonTask publishes eager calls as they
        # are): the peers locked an eager call at send, and a nested duplicate was refused there.
        sent = plan.mode.send(Send(self, runtime, plan, publish, args, kwargs, task_id, options, queue))
        if not isinstance(sent, _RefusedSend):
            return sent, None
        return self._refusal(runtime, sent.key, sent.holder)

    def _refusal(self, runtime: Any, key: str, holder: str) -> tuple[Any, Refusal]:
        info = runtime.engine.inspect([key])[0]
        result = self.AsyncResult(task_id_of(holder))
        return result, Refusal(key, result.id, info.holder, info.ttl_ms)

    def _refuse_own_task_id(
        self, runtime: Any, plan: Any, args: tuple[Any, ...], kwargs: dict[str, Any], task_id: str
    ) -> Refusal | None:
        """Take the key for ``task_id`` before the send (which then re-enters it), so a duplicate
        sent under the caller's own task id is refused as the peers refused it."""
        key = plan.key(self, args, kwargs)
        queued = queued_id(task_id)
        result = runtime.engine.acquire(key, queued, plan.options.queued_timeout_ms)
        if result.acquired:
            return None
        return self._refusal(runtime, key, result.holder)[1]

    def _refused_at_send(self, options: LockOptions, key: str, task_id: str, holder: str) -> Any:
        # A value, not an exception: nothing of it can reach the caller's code.
        return _RefusedSend(key, holder)


def _own_task_id(plan: Any, options: Mapping[str, Any]) -> bool:
    """Whether a send with a given task id is the caller's own id for a new call (which both
    peers refused as a duplicate), not a retry or a re-published message (always published:
    someone waits on that id, and the lock is already theirs)."""
    headers = options.get("headers") or {}
    return bool(
        plan.options.lock_on == "enqueue" and not options.get("retries") and KEY_HEADER not in headers
    )


@dataclass(frozen=True)
class _RefusedSend:
    """What the plan's send returns to ``CompatTask.send`` for a refused call (through
    ``_refused_at_send``)."""

    key: str
    holder: str


#: Per app and peer: the old library's Redis when the transition setting is on, else None.
_legacy: weakref.WeakKeyDictionary[Celery, dict[str, Legacy | None]] = weakref.WeakKeyDictionary()


def signature_arguments(task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The call's arguments by name, without defaults, as the peers bound them (None: they do
    not fit the signature, so the old library could not have sent the call)."""
    func: Callable[..., Any] = run_function(type(task))
    try:
        return dict(inspect.signature(func).bind(*args, **kwargs).arguments)
    except TypeError:
        return None


def call_key(task: Any, args: Any = None, kwargs: Any = None, name: str | None = None) -> str:
    """This package's lock key of ``task(*args, **kwargs)``: what the peers' ``get_key`` and
    ``generate_lock`` give on the compat bases (no queue's options applied). ``name``: the key
    under another task name, as celery-singleton's ``generate_lock`` hashed the name it was
    given: that task's own key if the app has it, else this task's arguments under that name."""
    if name is not None and name != task.name:
        other = task.app.tasks.get(name)
        if isinstance(other, SingletonTask):
            return call_key(other, args, kwargs)
    plan = runtime_for(task.app).plan(task, None)
    keys = plan.keys
    if name is not None and name != task.name:
        keys = KeyBuilder(keys.prefix, name, run_function(type(task)), plan.options.lock_key)
    key: str = keys.key(tuple(args or ()), dict(kwargs or {}), task)
    return key


def clear_key(task: Any, key: str, holder: str | None = None) -> bool:
    """Release ``key`` as the peers' by-hand unlocks did, the safest way the holder allows: the
    running execution's own lock through its release (renewal stopped, compare-and-delete);
    a ``holder`` the caller knows, compare-and-delete; else deleted whoever holds it, as the
    peers did. Waiters are told. True when a lock went."""
    held = getattr(task.request, HELD_FIELD, None)
    if held is not None and held.lease.key == key:
        task._release_held()
        return True
    runtime = runtime_for(task.app)
    notice = runtime.release_channel(key)
    if holder is not None:
        return runtime.engine.release(key, holder, notify=notice)
    # An empty prefix matches every holder: a delete of whoever holds it, with the notice.
    return runtime.engine.release_holder_prefix(key, "", notify=notice)
