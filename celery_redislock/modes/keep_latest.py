"""``keep_latest=True``: at most one running and one pending call per key.

Every call records itself as the key's latest (``{lock key}:latest``, its task id): when it is
sent (``send``), so that calls queued while every worker process is busy replace each other
too; or, for a message sent otherwise (``send_task``, a producer without this package), when a
worker takes it. At execution a call takes the lock if it is free and it is still the latest,
in one script (``keep_latest.lua``). A call that finds the lock held is the pending one: it is
re-queued (same task id, like a retry) and checks again every ``PENDING_POLL`` seconds; it runs
once the lock is free, unless a later call has become the latest meanwhile: then it ends as a
skipped duplicate naming that call (``{task id}@latest``), its result stored, so its caller is
answered. Only the latest call can ever take the lock after the running one, so nothing called
after the last run started is lost, and the latest arguments win.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from celery.exceptions import Ignore
from celery.utils import uuid

from ..config.mode_rules import Clash
from ..config.options import LockOptions
from ..config.schema import OptionSpec
from ..engine import Lease
from ..engine.checks import check_flag
from ..engine.counting import count
from ..engine.decision_record import Entry, Record, run_recorded
from ..engine.holders import any_delivery_prefix, tagged_id, task_id_of
from ..engine.keys import slot_key
from ..engine.leases import REDIS_ERRORS, as_text
from ..engine.script_runner import ScriptRunner, package_script
from ..engine.scripts import ttl_arg
from ..engine.timing import DEFAULT_RETRY_DELAY, to_ms
from ..integration.acquisition import Execution, Outcome, Refused, hold
from ..integration.explain_readers import Context, Decision, padded, reader
from ..integration.mode import Send
from ..integration.outcomes import on_duplicate
from ..integration.plain import PlainMode
from ..integration.sending import keyed_headers, unreachable_at_send
from ..waits.put_off import put_off

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = [
    "KEEP_LATEST",
    "KEEP_LATEST_SENT",
    "PENDING_HEADER",
    "PENDING_POLL",
    "KeepLatestMode",
    "LatestReply",
    "latest_id",
    "latest_key",
    "step",
]

logger = logging.getLogger(__name__)

KEEP_LATEST = package_script(__package__, "keep_latest.lua")
KEEP_LATEST_SENT = package_script(__package__, "keep_latest_sent.lua")

#: The message header (a request attribute in the worker) marking a call recorded as the latest
#: already (when sent, or a re-queued pending call): it only checks whether it is still the
#: latest, where a call never recorded makes itself the latest.
PENDING_HEADER = "redislock_pending"
#: Seconds between two checks of a pending call (how long after the running call ends, at most,
#: the pending one starts, if a worker process is free).
PENDING_POLL = DEFAULT_RETRY_DELAY


class KeepLatestMode(PlainMode):
    name = "keep_latest"
    option = "keep_latest"
    own_send = True
    options: ClassVar[tuple[OptionSpec, ...]] = (
        OptionSpec(
            "keep_latest",
            False,
            check_flag,
            "True: one running and one pending call per key, the pending one the latest sent.",
            "bool",
            "keep_latest",
        ),
    )
    key_suffixes: ClassVar[Mapping[str, str]] = {"latest": "keep_latest: latest call {}"}
    counters: ClassVar[Mapping[str, str]] = {
        "replaced": "pending ``keep_latest`` calls replaced by a later one"
    }

    def selected_by(self, value: Any) -> bool:
        return bool(value)

    def clash(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
        """A refused call is the pending one (re-queued until the key is free or a later call
        replaces it; ``on_duplicate`` only says whether a replaced call is skipped or, with
        "raise", fails): decided in the worker (not at enqueue), on one lock (not a semaphore),
        taken without a fencing token."""
        if not options.get("keep_latest"):
            return None
        if options.get("fencing") is True:
            problem = "True cannot be used with fencing (keep_latest takes its lock without a token)"
            return "keep_latest", problem, "fencing"
        if limit > 1:
            problem = f"True cannot be used with max_concurrency={limit} (one running, one pending)"
            return "keep_latest", problem, "max_concurrency"
        if options.get("lock_on") == "enqueue":
            problem = "True cannot be used with lock_on='enqueue' (the pending call is chosen in the worker)"
            return "keep_latest", problem, "lock_on"
        return None

    def send(self, call: Send) -> Any:
        """A new call is recorded as its key's latest before it is published, so a call sent
        earlier and still queued is replaced by it even when no worker process is free to take
        either (one solo worker, ``-c 1`` busy). A message whose task id is given (a retry, a
        re-queued copy) is published as it is."""
        if call.task_id is not None:
            return call.as_is()
        task, runtime, plan, options = call.task, call.runtime, call.plan, call.options
        key, headers = keyed_headers(task, plan, call.args, call.kwargs, options)
        task_id = uuid()
        recorded = _record(call, key, task_id)
        if recorded:
            headers[PENDING_HEADER] = "1"
        try:
            return call.publish(call.args, call.kwargs, task_id, headers=headers, **options)
        except BaseException:
            if recorded:
                # Never sent: a call that names it as the latest would be replaced by nothing.
                # Forget it (if still the latest), so the calls queued before it run.
                try:
                    runtime.engine.release(latest_key(key), task_id)
                except REDIS_ERRORS:
                    logger.warning(
                        "Could not forget %s as the latest of %s; it expires on its TTL", task_id, key
                    )
            raise

    def acquire(self, task: AnyTask, execution: Execution) -> Outcome:
        """Run (a Holding), be replaced (a Refused naming the latest call), be another delivery
        of the running message (a redelivered Refused), or be the pending call: re-queued here
        (raises ``Ignore``). Raises ``redis.RedisError`` when Redis is unreachable."""
        recheck = bool(getattr(task.request, PENDING_HEADER, None))
        reply = _step(execution, recheck)
        if reply.status == "pending" and execution.take_over_dead((reply.other,)):
            reply = _step(execution, recheck=True)
        if reply.status == "run":
            lease = Lease(execution.key, execution.holder, execution.options.timeout_ms)
            return hold(execution, execution.runtime.engine, lease)
        if reply.status == "replaced":
            count("replaced")
            return Refused(latest_id(reply.other), redelivered=False)
        if task_id_of(reply.other) == execution.task_id:
            return Refused(reply.other, redelivered=True)
        return _pend(task, execution, reply.other)

    def on_refused(self, task: AnyTask, options: LockOptions, key: str, holder: str) -> NoReturn:
        # Replaced (or pending, eager): a retry would find it so again, so it is skipped, or
        # with "raise", fails.
        on_duplicate(task, options, key, holder, "raise" if options.on_duplicate == "raise" else "skip")


def _record(call: Send, key: str, task_id: str) -> bool:
    """Record ``task_id`` as ``key``'s latest call, before its publish (a worker may take the
    message at once, and must find it the latest); False when Redis is unreachable: its worker
    records it when it takes it (it replaces fewer calls queued meanwhile, but loses none)."""
    try:
        ttl_ms = latest_ttl(call.plan.options)
        call.runtime.scripts.run(KEEP_LATEST_SENT, [latest_key(key)], [task_id, ttl_arg(ttl_ms)])
        return True
    except REDIS_ERRORS as exc:
        unreachable_at_send(logger, call, task_id, key, exc, "unrecorded as the latest")
        return False


def latest_id(task_id: str) -> str:
    """How a replaced call names the later call ``task_id`` that replaced it (never a lock's
    value: the holder a replaced call's DuplicateTaskError names)."""
    return tagged_id(task_id, "latest")


def latest_ttl(options: LockOptions) -> int:
    """Milliseconds the latest key lives from its last refresh (every call, every check of a
    pending call): until a call sent then reaches a worker, or a pending call checks again (a
    ``PENDING_POLL`` on, each a wait in the queue that queued_timeout bounds). A run needs none
    of it: a call made while it runs records itself."""
    return options.queued_timeout_ms + to_ms(PENDING_POLL)


def _step(execution: Execution, recheck: bool) -> LatestReply:
    options = execution.options
    return step(
        execution.runtime.scripts,
        execution.key,
        execution.holder,
        options.timeout_ms,
        execution.task_id,
        latest_ttl(options),
        recheck=recheck,
        deliveries=any_delivery_prefix(execution.task_id),
        record=execution.runtime.noted(execution.task_id, KEEP_LATEST_DECISION, execution.key),
    )


def _pend(task: AnyTask, execution: Execution, holder: str) -> Outcome:
    request = task.request
    if request.is_eager:  # nothing can be re-queued: it ends as a duplicate of the running one
        return Refused(holder, redelivered=False)
    logger.info(
        "Pending %s[%s]: %s is held by %s; it runs next unless a later call replaces it",
        task.name,
        request.id,
        execution.key,
        holder,
    )
    # No RETRY state is stored: the call has not failed, it waits its turn.
    put_off(task, execution.runtime, PENDING_POLL, keep_retries=False, headers={PENDING_HEADER: "1"})
    raise Ignore()


# --- its Redis calls ------------------------------------------------------------------------


def latest_key(key: str) -> str:
    """Where keep_latest records the latest call of lock ``key``, in its cluster slot."""
    return slot_key(key, "latest")


@dataclass(frozen=True)
class LatestReply:
    """``keep_latest.lua``'s answer: ``"run"``, ``"replaced"`` (``other`` is the task id of the
    latest call) or ``"pending"`` (``other`` holds the lock)."""

    status: str
    other: str


_STATUS = {0: "replaced", 1: "run", 2: "pending"}


def step(
    scripts: ScriptRunner,
    key: str,
    holder: str,
    ttl_ms: int,
    task_id: str,
    latest_ttl_ms: int,
    *,
    recheck: bool,
    deliveries: str,
    record: Record | None = None,
) -> LatestReply:
    """Record ``task_id`` as the latest call of ``key`` (a ``recheck``: only if it still is) and
    take the lock for ``holder`` if it is free. A lock held by another delivery of this very
    message (a holder id starting with ``deliveries``) leaves the latest call alone. ``record``:
    the answer kept in the call's record of decisions too."""
    args = [holder, ttl_arg(ttl_ms), task_id, ttl_arg(latest_ttl_ms), "1" if recheck else "0", deliveries]
    code, other = run_recorded(scripts, KEEP_LATEST, [key, latest_key(key)], args, record)
    return LatestReply(_STATUS[int(code)], as_text(other))


#: The kind of keep_latest's entries in a call's record: each look at its key.
KEEP_LATEST_DECISION = "keep_latest"


_LATEST = {"1": "latest", "0": "replaced", "2": "pending"}


@reader(KEEP_LATEST_DECISION)
def _keep_latest(entry: Entry, context: Context) -> Decision:
    (key,) = padded(entry.fields, 1)
    reply = entry.reply if isinstance(entry.reply, list) else [entry.reply, ""]
    status = _LATEST.get(str(reply[0]), "?")
    other = str(reply[1] or "")
    details: dict[str, Any] = {"key": key, "status": status}
    if status == "latest":
        return Decision(entry.time, "acquired", f"the latest call of {key}: took its lock", details)
    if status == "replaced":
        details["replaced_by"] = other
        return Decision(
            entry.time,
            "replaced",
            f"replaced by a newer call {other} ({context.state_of(task_id_of(other))}): skipped",
            details,
        )
    details["holder"] = other
    return Decision(
        entry.time, "pending", f"the latest call of {key}, pending while {other} holds it", details
    )


MODE = KeepLatestMode()
