"""An operator's holds (``celery redislock hold``, ``ops.holds``): a gate every call of a
``SingletonTask`` passes, before the rate limits. A call of a held task, or with the argument values
a hold names (one tenant, one account), is not run and not dropped: it is put off
(``waits.put_off``) to look again when the hold ends, or in ``RECHECK`` for a hold until lifted
(both bounded by the broker's safe hold, ``redislock_max_postpone``), as a paused limit's calls
wait. Logged at INFO and counted ``held`` each time it is put off.

Its cost: none in Redis. A call looks at the holds its process read last (``hold_watch``: a
thread of each worker process reads them every ``REFRESH`` seconds, primed as the process
starts), so a call with no hold on its task looks up one dict; one whose task is held by key
value binds its arguments to compare them. A hold reaches every worker within ``REFRESH``; a
call that started before its process saw it runs. An eager call is never held (there is nothing
to re-queue)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from celery.exceptions import Ignore
from celery.utils.dispatch import Signal

from ..config.arguments import KeyBuilder
from ..config.mode_rules import Clash
from ..config.options import LockOptions
from ..config.schema import OptionSpec
from ..engine.counting import count
from ..engine.decision_record import Entry
from ..engine.holds import HoldKey
from ..engine.timing import to_ms, to_seconds
from ..errors import LockKeyError, OptionError
from ..integration.acquisition import Execution
from ..integration.explain_readers import Context, Decision, iso, padded, reader
from ..integration.runtime import Runtime, run_function
from ..waits.put_off import put_off
from .hold_watch import Snapshot, watched

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = ["GATE", "HOLD_DECISION", "RECHECK", "HoldGate"]

logger = logging.getLogger(__name__)

#: Seconds a call held until lifted waits before it looks again (a timed hold: until its end,
#: if sooner). Each look re-publishes it, so a shorter one costs the broker more.
RECHECK = 60.0


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
        # The snapshot of the app last asked for: a worker has one app, and finding a runtime's
        # snapshot in the process's watch costs a call more.
        self._last: Snapshot | None = None
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
        # On every call's path: what the process read last, no Redis; nothing held is one check.
        seen = self._last
        if seen is None or not seen.live or seen.runtime() is not execution.runtime:
            if task.request.is_eager:
                return  # never held: no watch started for it
            seen = self._last = watched(execution.runtime)
        by_task = seen.by_task
        if not by_task:
            return
        held = by_task.get(task.name)
        if not held:
            return
        request = task.request
        if request.is_eager:
            return
        now = time.monotonic()
        for key, ends in held:
            if (ends is None or ends > now) and (not key or self._matches(task, key, request)):
                self._put_off(task, execution.runtime, key, ends, now)

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
        # Kept in the call's record (explain) with the hold's end as ms left (the watch's clock
        # is this process's, the record's the server's) and when it looks again.
        held_ms = "" if ends is None else str(to_ms(ends - now, minimum=0))
        noted = runtime.noted(str(task.request.id), HOLD_DECISION, what, held_ms, str(to_ms(wait, minimum=0)))
        put_off(task, runtime, wait, token=True, noted=noted)
        raise Ignore()


#: The kind of a held call's entries in its record: what holds it, for how long, its next look.
HOLD_DECISION = "hold"


@reader(HOLD_DECISION)
def _held(entry: Entry, context: Context) -> Decision:
    what, held_ms, look_ms = padded(entry.fields, 3)
    at = entry.time
    until = None if at is None or not held_ms else at + to_seconds(int(held_ms))
    look = None if at is None or not look_ms else at + to_seconds(int(look_ms))
    details: dict[str, Any] = {"hold": what, "until": until, "looks_again": look}
    lasts = "until lifted" if not held_ms else f"until {iso(until)}"
    by = f"its task's calls with {what}" if what else "its task"
    return Decision(
        at,
        "held",
        f"held by an operator's hold of {by} {lasts}: re-queued to look again at {iso(look)}",
        details,
    )


GATE = HoldGate()
