"""An operator's holds (``celery redislock hold``, ``ops.holds``): a gate every call of a
``SingletonTask`` passes, before the rate limits. A call of a held task, or with the argument values
a hold names (one tenant, one account), is not run and not dropped: it is put off
(``waits.put_off``) to look again when the hold ends, or in ``RECHECK`` for a hold until lifted
(both bounded by the broker's safe hold, ``redislock_max_postpone``), as a paused limit's calls
wait. Logged at INFO and counted ``held`` each time it is put off.

Its cost: a worker process reads the app's holds (one script call) at most every ``REFRESH``
seconds and keeps them, so a call with no hold on its task asks no Redis; one whose task is held
by key value binds its arguments to compare them. A hold reaches every worker within ``REFRESH``.
An eager call is never held (there is nothing to re-queue)."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from celery.exceptions import Ignore
from celery.utils.dispatch import Signal

from ..config.arguments import KeyBuilder
from ..config.mode_rules import Clash
from ..config.options import LockOptions
from ..config.schema import OptionSpec
from ..engine.counting import count
from ..engine.holds import HoldKey, read_holds
from ..engine.leases import REDIS_ERRORS
from ..errors import LockKeyError, OptionError
from ..integration.acquisition import Execution
from ..integration.runtime import Runtime, run_function
from ..waits.put_off import put_off

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = ["GATE", "RECHECK", "REFRESH", "HoldGate"]

logger = logging.getLogger(__name__)

#: Seconds a worker process keeps the holds it read: how long a new hold, or a lift, may take
#: to reach it.
REFRESH = 1.0
#: Seconds a call held until lifted waits before it looks again (a timed hold: until its end,
#: if sooner). Each look re-publishes it, so a shorter one costs the broker more.
RECHECK = 60.0

#: A task's holds as a process keeps them: each one's key and its end on this process's
#: ``time.monotonic`` clock (None: until lifted).
_Held = list[tuple[HoldKey, float | None]]


class _Seen:
    """The holds one process read for one app (its ``runtime``, weakly), by task name, and when
    to read them again."""

    __slots__ = ("by_task", "runtime", "until")

    def __init__(self, runtime: Runtime, by_task: dict[str, _Held], until: float) -> None:
        self.runtime = weakref.ref(runtime)
        self.by_task = by_task
        self.until = until


class HoldGate:
    name: ClassVar[str] = "operator_holds"
    options: ClassVar[tuple[OptionSpec, ...]] = ()
    counters: ClassVar[Mapping[str, str]] = {
        "held": "calls put off by an operator's hold of their task or key value (``redislock hold "
        "set``): once as the hold meets them, again at each look while it lasts",
    }
    signals: ClassVar[Mapping[str, Signal]] = {}
    key_suffixes: ClassVar[Mapping[str, str]] = {}

    def __init__(self) -> None:
        self._seen: weakref.WeakKeyDictionary[Runtime, _Seen] = weakref.WeakKeyDictionary()
        # The app's last asked: a worker has one, and a weak dictionary's lookup makes a weak
        # reference of its key every call.
        self._last: _Seen | None = None
        # (task, argument) -> what reads that argument of a call (None: the body has no such one).
        self._readers: dict[tuple[str, str], KeyBuilder | None] = {}
        self._mutex = threading.Lock()

    def describe_key(
        self, runtime: Any, key: str, task_name: str, suffix: str, value: str | None
    ) -> str | None:
        return None

    def selects(self, options: LockOptions) -> bool:
        return True  # any call may be held: the check is a dict lookup while nothing is

    def clash(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
        return None

    def admit(self, task: AnyTask, execution: Execution) -> None:
        """Let the call go on, or put it off while a hold meets it (raises ``Ignore``)."""
        # On every call's path: no hold read lately is a check of what was read, in this frame.
        seen = self._last
        if seen is not None and seen.runtime() is execution.runtime and time.monotonic() < seen.until:
            if not seen.by_task:
                return
            held = seen.by_task.get(task.name)
        else:
            held = self._holds(execution.runtime).get(task.name)
        if not held:
            return
        request = task.request
        if request.is_eager:
            return
        now = time.monotonic()
        for key, ends in held:
            if (ends is None or ends > now) and (not key or self._matches(task, key, request)):
                self._put_off(task, execution.runtime, key, ends, now)

    def _holds(self, runtime: Runtime) -> dict[str, _Held]:
        """The app's holds by task, read at most every ``REFRESH`` seconds. Redis unreachable:
        the holds read last are kept (a hold stops no call for want of Redis), logged."""
        now = time.monotonic()
        seen = self._seen.get(runtime)
        if seen is not None and now < seen.until:
            self._last = seen
            return seen.by_task
        by_task: dict[str, _Held] = {}
        try:
            for hold in read_holds(runtime.scripts, runtime.settings.key_prefix):
                ends = None if hold.left is None else now + hold.left
                by_task.setdefault(hold.task, []).append((hold.key, ends))
        except REDIS_ERRORS as exc:
            count("redis_errors")
            logger.warning("Could not read the holds (keeping those read before): %r", exc)
            by_task = {} if seen is None else seen.by_task
        self._seen[runtime] = self._last = _Seen(runtime, by_task, now + REFRESH)
        return by_task

    def _matches(self, task: AnyTask, key: HoldKey, request: Any) -> bool:
        """Whether the call's arguments have every value ``key`` names (as text, as fair share
        names a tenant: a str or int as is). A call that does not fit its body's signature is
        not held: its run fails as it would."""
        args, kwargs = tuple(request.args or ()), dict(request.kwargs or {})
        for name, value in key:
            reader = self._reader(task, name)
            if reader is None:
                return False
            try:
                if reader.name(args, kwargs, task) != value:
                    return False
            except LockKeyError:
                return False
        return True

    def _reader(self, task: AnyTask, name: str) -> KeyBuilder | None:
        found = self._readers.get((task.name, name), False)
        if found is False:
            try:
                found = KeyBuilder("hold", task.name, run_function(type(task)), [name], option="hold")
            except OptionError:  # this worker's body has no such argument: its calls are not held
                found = None
            with self._mutex:
                self._readers[(task.name, name)] = found
        return found  # type: ignore[return-value]

    def _put_off(
        self, task: AnyTask, runtime: Runtime, key: HoldKey, ends: float | None, now: float
    ) -> NoReturn:
        """Re-publish the call to look again at the hold's end, or in ``RECHECK``, whichever is
        sooner. Raises ``Ignore``."""
        wait = RECHECK if ends is None else min(RECHECK, ends - now)
        what = " ".join(f"{name}={value}" for name, value in key)
        until = "until lifted" if ends is None else f"for {ends - now:.3f}s more"
        count("held", task=task.name)
        logger.info(
            "Held %s[%s]: an operator holds %s%s %s; re-queued to look again in %.3fs",
            task.name,
            task.request.id,
            task.name,
            f" {what}" if what else "",
            until,
            wait,
        )
        put_off(task, runtime, wait, token=True)
        raise Ignore()


GATE = HoldGate()
