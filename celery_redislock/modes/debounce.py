"""``debounce=SECONDS`` (``debounce_max=SECONDS``): a burst of calls of one key runs once, with
the last call's arguments, ``SECONDS`` after the last call (at most ``debounce_max`` after the
first).

Each new call is published with that delay (``countdown``) after recording itself as its key's
latest call (``{lock key}:debounce``; the calls not yet due in ``{lock key}:calls``; with a
``debounce_max``, the burst's first-call time in ``{lock key}:burst``, on the server's clock), in
one script. When a message is due, it runs only if it is still the latest; else it ends as a
skipped duplicate naming the call that superseded it (``{id}@debounced``), counted
``debounced``. The last call of a burst to come due deletes the keys. The latest runs under the key's lock as usual; if the previous burst's run
still holds it, the latest is retried (``retry_countdown``) until it is free, never skipped, or
the burst would be lost (``on_refused``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from celery import Task
from celery.utils import uuid

from ..config.mode_rules import Clash
from ..config.options import LockOptions
from ..config.schema import OptionSpec
from ..engine.checks import number_text, optional_seconds
from ..engine.counting import count
from ..engine.decision_record import Entry, Record, run_recorded
from ..engine.holders import tagged_id, task_id_of
from ..engine.keys import slot_key
from ..engine.lateness import add_lateness_kind
from ..engine.leases import REDIS_ERRORS, as_text
from ..engine.script_runner import ScriptRunner, package_script
from ..engine.scripts import ttl_arg
from ..engine.timing import to_ms, to_seconds
from ..errors import DuplicateTaskError
from ..integration.acquisition import Execution
from ..integration.explain_readers import Context, Decision, iso, padded, reader
from ..integration.mode import Send
from ..integration.outcomes import drop_finished, retry_duplicate, skip
from ..integration.plain import PlainMode
from ..integration.sending import keyed_headers, seconds_until, unreachable_at_send
from ..integration.signals import send_duplicate
from ..waits.broker_delay import countdown_for
from ..waits.due import due_headers, started

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = [
    "DEBOUNCE_CALL",
    "DEBOUNCE_RUN",
    "DebounceMode",
    "debounce_call",
    "debounce_keys",
    "debounce_run",
    "debounced_id",
]

logger = logging.getLogger(__name__)

# A burst's last call is due when its debounce ends: how late it starts is measured (waits.due).
add_lateness_kind("debounce")

DEBOUNCE_CALL = package_script(__package__, "debounce_call.lua")
DEBOUNCE_RUN = package_script(__package__, "debounce_run.lua")


class DebounceMode(PlainMode):
    name = "debounce"
    option = "debounce"
    own_send = True
    options: ClassVar[tuple[OptionSpec, ...]] = (
        OptionSpec(
            "debounce",
            None,
            optional_seconds,
            "Seconds: a burst of calls of a key runs once, its last call, this long after it.",
            "float | None",
            "debounce",
        ),
        OptionSpec(
            "debounce_max",
            None,
            optional_seconds,
            "Seconds: a debounced burst runs at most this long after its first call.",
            "float | None",
            "debounce",
        ),
    )
    key_suffixes: ClassVar[Mapping[str, str]] = {
        "debounce": "debounce: latest call {}",
        "burst": "debounce: burst began at {} (server ms)",
    }
    counters: ClassVar[Mapping[str, str]] = {
        "debounced": "debounced calls superseded by a later call of their burst",
        "debounce_lost": "a burst's latest call lost when a ``max_retries`` the task sets ran out",
    }

    def clash(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
        """Each call is delayed in the queue and the burst's latest runs in the worker, after
        the previous burst's run: not locked at enqueue (that would refuse the later calls at
        send, which must replace the first), on one lock (not a semaphore's slots). Its calls'
        ends are its own: a superseded call is skipped, the latest waits out a running one, so
        ``on_duplicate`` "skip" or "raise" set with it ask for what never happens (set in
        another layer, a default for every task there, they do not apply to it).
        ``debounce_max`` bounds a debounce (alone, it does nothing), and must leave room for
        one."""
        debounce, most = options.get("debounce"), options.get("debounce_max")
        if debounce is None:  # a debounce_max alone may be a layer's default for debounced tasks
            return None
        if most is not None and most < debounce:
            return (
                "debounce_max",
                f"must be >= debounce ({number_text(debounce)}), got {number_text(most)}",
                "debounce",
            )
        if options.get("lock_on") == "enqueue":
            problem = "cannot be used with lock_on='enqueue' (every call of a burst is sent, the latest runs)"
            return "debounce", problem, "lock_on"
        if limit > 1:
            problem = f"cannot be used with max_concurrency={limit} (use 1: one run of a key at a time)"
            return "debounce", problem, "max_concurrency"
        strategy = options.get("on_duplicate")
        if not merged and strategy in ("skip", "raise"):
            problem = (
                f"cannot be used with on_duplicate={strategy!r} (a superseded call is skipped and the "
                f"burst's latest waits out a running one: use 'retry', or 'wait' to wait acquire_timeout "
                f"in the worker first)"
            )
            return "debounce", problem, "on_duplicate"
        return None

    def send(self, call: Send) -> Any:
        """A new call is recorded as its key's latest and published with the burst's delay. A
        message whose task id is given (a retry, a re-queued copy) is published as it is: it was
        debounced when first sent."""
        if call.task_id is not None:
            return call.as_is()
        task, runtime, plan, options = call.task, call.runtime, call.plan, call.options
        debounce_ms, most_ms = _debounce_ms(plan.options)
        key, headers = keyed_headers(task, plan, call.args, call.kwargs, options)
        task_id = uuid()
        asked = seconds_until(options.pop("countdown", None), options.pop("eta", None), task.app.timezone)
        queued_ms = plan.options.queued_timeout_ms
        # The keys are deleted when the burst's last call comes due; their TTLs only bound what a
        # lost message leaves. The latest call must be readable until every call of the burst
        # has come due (at most its delay, or the caller's longer countdown, and a wait in the
        # queue, which queued_timeout bounds); the burst's start until its run starts (at most
        # debounce_max after the first call, and a wait in the queue).
        ttl_ms = queued_ms + max(debounce_ms, to_ms(asked, minimum=0))
        burst_ms = queued_ms + most_ms
        try:
            noted = runtime.noted(task_id, DEBOUNCE_DECISION, key, "sent")
            delay_ms, now_ms = debounce_call(
                runtime.scripts, key, task_id, debounce_ms, most_ms, ttl_ms, burst_ms, noted
            )
        except REDIS_ERRORS as exc:
            # Not recorded: it is sent with the full delay and runs when due (a burst then runs
            # more than once, which is better than losing its last call).
            unreachable_at_send(logger, call, task_id, key, exc, "undebounced")
            delay_ms, now_ms = debounce_ms, 0
        # A countdown or eta the caller gave delays it further, never less; whole seconds where
        # the broker carries no less (RabbitMQ's native delayed delivery).
        wait_ms = max(to_ms(asked, minimum=0), delay_ms)
        if now_ms:  # due then on the server's clock: how late it starts is measured (waits.due)
            headers = {**headers, **due_headers("debounce", now_ms + wait_ms)}
        countdown = countdown_for(task.app, to_seconds(wait_ms), math.inf)
        return call.publish(call.args, call.kwargs, task_id, headers=headers, countdown=countdown, **options)

    def before_acquire(self, task: AnyTask, execution: Execution) -> None:
        """A debounced call is due: it goes on if it is its burst's latest call, else ends as a
        skipped duplicate naming the call that superseded it. Raises ``redis.RedisError``."""
        super().before_acquire(task, execution)
        runtime, task_id = execution.runtime, execution.task_id
        noted = runtime.noted(task_id, DEBOUNCE_DECISION, execution.key, "due")
        latest, now_ms = debounce_run(runtime.scripts, execution.key, task_id, noted)
        if latest is True:
            started(task, now_ms)  # the burst's latest: how late after the debounce's end
        if latest is False:
            # Nothing recorded: maybe a copy the broker gave out again after its burst's keys
            # were deleted, whose first delivery was decided (superseded, or run).
            drop_finished(task)
        if not isinstance(latest, str):
            return
        count("debounced")
        holder = debounced_id(latest)
        send_duplicate(task, execution.task_id, execution.key, holder, "skip", "execute")
        error = DuplicateTaskError(task.name, execution.task_id, execution.key, holder, latest)
        skip(task, execution.options, error)

    def on_refused(self, task: AnyTask, options: LockOptions, key: str, holder: str) -> NoReturn:
        """The burst's latest call is due and ``holder`` (the previous burst's run) holds
        ``key``: re-queued every ``retry_countdown`` until the key is free, whatever
        ``on_duplicate`` says and however long the run takes (the previous calls of its burst
        were skipped naming it: skipping it too would lose the burst). Only a ``max_retries``
        the task sets itself bounds the waits: a call out of those is lost, logged as an ERROR
        and counted ``debounce_lost``, its FAILURE stored. Eager, where nothing can be
        re-queued, it ends as a skipped duplicate."""
        request = task.request
        task_id = str(request.id)
        error = DuplicateTaskError(task.name, task_id, key, holder, task_id_of(holder))
        send_duplicate(task, task_id, key, holder, "retry", "execute")
        if request.is_eager:
            skip(task, options, error)
        bound = user_max_retries(task)
        if bound is not None and request.retries >= bound:
            count("debounce_lost")
            logger.error(
                "Lost debounced %s[%s]: %s was still held by %s after %d retries (the task's "
                "max_retries); nothing of its burst runs",
                task.name,
                task_id,
                key,
                holder,
                request.retries,
            )
            skip(task, options, error)
        retry_duplicate(task, options, error, unlimited=True)


def debounced_id(task_id: str) -> str:
    """How a superseded call names the later call ``task_id`` of its burst (never a lock's
    value either)."""
    return tagged_id(task_id, "debounced")


def user_max_retries(task: Task[Any, Any]) -> int | None:
    """The ``max_retries`` the task sets itself (its decorator, a subclass, ``task_annotations``),
    else None: Celery's default (3) is not a bound the user chose, nor is ``None``."""
    for owner in (task, *type(task).__mro__):
        if owner is Task:
            break
        if "max_retries" in vars(owner):
            bound: int | None = vars(owner)["max_retries"]
            return bound
    return None


def debounce_keys(key: str) -> list[str]:
    """Where debounce records the latest call of lock ``key``, its burst's first-call time and
    the calls not yet due, in its cluster slot."""
    return [slot_key(key, "debounce"), slot_key(key, "burst"), slot_key(key, "calls")]


def debounce_call(
    scripts: ScriptRunner,
    key: str,
    task_id: str,
    delay_ms: int,
    max_ms: int,
    ttl_ms: int,
    burst_ttl_ms: int,
    record: Record | None = None,
) -> tuple[int, int]:
    """Record ``task_id`` as the latest call of ``key``'s burst: the delay (ms) to send it with,
    and the server's time (ms) it counts from. ``ttl_ms``: how long the call may take to come
    due; ``burst_ttl_ms``: the burst's run to start. ``record``: the delay kept in the call's
    record of decisions too."""
    args = [task_id, str(delay_ms), str(max_ms), ttl_arg(ttl_ms), ttl_arg(burst_ttl_ms)]
    delay, now = run_recorded(scripts, DEBOUNCE_CALL, debounce_keys(key), args, record)
    return int(delay), int(now)


def debounce_run(
    scripts: ScriptRunner, key: str, task_id: str, record: Record | None = None
) -> tuple[str | bool, int]:
    """``task_id`` came due: True, it runs (its burst's latest); False, it runs (nothing is
    recorded for its key); else the task id that superseded it. With the server's time (ms) it
    was decided at."""
    reply, now = run_recorded(scripts, DEBOUNCE_RUN, debounce_keys(key), [task_id], record)
    return (reply == 1 if isinstance(reply, int) else as_text(reply)), int(now)


def _debounce_ms(options: LockOptions) -> tuple[int, int]:
    """``debounce`` and ``debounce_max`` (0: no bound) in whole milliseconds."""
    most = options.value("debounce_max")
    return to_ms(options.value("debounce")), 0 if most is None else to_ms(most)


#: The kind of debounce's entries in a call's record: its delay at send, its turn when due.
DEBOUNCE_DECISION = "debounce"


@reader(DEBOUNCE_DECISION)
def _debounce(entry: Entry, context: Context) -> Decision:
    key, step = padded(entry.fields, 2)
    details: dict[str, Any] = {"key": key}
    # The scripts answer {their answer, the server's ms} (debounce_call.lua, debounce_run.lua).
    answer = entry.reply[0] if isinstance(entry.reply, list) and entry.reply else entry.reply
    if step == "sent":
        due = None if entry.time is None else entry.time + to_seconds(int(answer))
        details["due"] = due
        return Decision(
            entry.time, "debounced", f"debounced until {iso(due)} (the latest call of {key})", details
        )
    if answer in ("1", False, None, "0"):  # its burst's latest, or nothing recorded: it ran
        return Decision(
            entry.time, "debounce_due", f"came due as its burst's latest call of {key}: runs", details
        )
    newer = str(answer)
    details["replaced_by"] = newer
    return Decision(
        entry.time,
        "replaced",
        f"replaced by a newer call {newer} ({context.state_of(newer)}): skipped",
        details,
    )


MODE = DebounceMode()
