"""The one way a call that must run later is put off: re-published under its task id, with the
same arguments, to come back in a given time.

Every wait the package makes goes through ``put_off``: a rate limit's slot or pause, a tenant
over its ``fair_cap``, a fair call whose ETA came (back to its lane), ``on_duplicate="retry"``,
keep_latest's pending call, a redelivered copy waiting for its original, an unreachable lock
Redis. It gives each the same guarantees:

- the countdown the broker can carry (``broker_delay``): bounded by what it holds safely, whole
  seconds on RabbitMQ's native delayed delivery;
- one copy runs, where the broker gives out again the message it came in (its worker died
  after the publish, before acknowledging it): a retry's copy (``request.retries`` > 0) is
  dropped by its result once its call ran, and the lock keeps two from running at once; a
  rate-limited call's copies are told apart by its reservation; any other (``fair_cap``, a fair
  call come due) carries a copy token (``copies``);
- a publish that waits for an unreachable broker as long as it takes (``broker_wait_policy``);
- not bounded by the task's ``max_retries`` (unless ``bounded``: a duplicate's retry), its
  ``request.retries`` unchanged unless it counts as a retry.

What gives a slot back on revoke and expiry, and what is logged and counted, is the caller's:
it knows what it holds.
"""

from __future__ import annotations

import logging
import sys
import uuid
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from celery.exceptions import Ignore
from celery.signals import task_postrun
from celery.states import IGNORED, REJECTED, RETRY

from ..config.settings import AppSettings
from ..engine.counting import add_counters, count
from ..engine.decision_record import COPY_DECISION, Record
from ..engine.keys import copy_key
from ..engine.leases import REDIS_ERRORS
from ..engine.script_runner import ScriptRunner
from .broker_delay import countdown_for
from .copies import COPY_HEADER, STALE, UNKNOWN, claim, confirm, forget, hand_on, record_ttl_ms
from .due import DUE_HEADER

if TYPE_CHECKING:
    from celery import Task

    AnyTask = Task[Any, Any]

__all__ = [
    "BROKER_WAIT_INTERVAL_MAX",
    "CLAIMED_FIELD",
    "COPY_HEADER",
    "Waiting",
    "broker_wait_policy",
    "carried_headers",
    "claim_copy",
    "drop_stale",
    "put_off",
    "requeue",
]

logger = logging.getLogger(__name__)

#: The request attribute holding ``(runtime, record)`` of a delivery that claimed its call's
#: copies: its run deletes the record.
CLAIMED_FIELD = "redislock_claimed_copies"
#: The states of a run that did not end the call (put off again, ignored, rejected).
IGNORE_STATES = frozenset({IGNORED, REJECTED, RETRY})

#: The headers RabbitMQ adds to a dead-lettered message (native delayed delivery dead-letters a
#: countdown through its delay queues). A copy that carried them would come back to a delay queue
#: its ``x-death`` names: RabbitMQ takes that for a cycle and drops it, or, dead-lettering at least
#: once (quorum queues), holds it for ever. Celery strips them from a retry's own headers.
BROKER_HEADERS = frozenset(
    {
        "x-death",
        "x-first-death-exchange",
        "x-first-death-queue",
        "x-first-death-reason",
        "x-last-death-exchange",
        "x-last-death-queue",
        "x-last-death-reason",
        "x-delivery-count",
    }
)

#: The longest pause between two attempts to publish to an unreachable broker. The lock Redis
#: is often the broker too, and then it is down just as long: Celery's default policy gives up
#: within a second and the call would be dropped (``Reject``).
BROKER_WAIT_INTERVAL_MAX = 5.0

add_counters(
    {
        "copies_dropped": "copies of a put-off call dropped as they arrived: the broker gave its message out "
        "again after the call was re-published"
    },
    "waits",
)


class Waiting(Protocol):
    """What ``put_off`` needs of an app's runtime: its scripts on the lock Redis and settings."""

    @property
    def scripts(self) -> ScriptRunner: ...

    @property
    def settings(self) -> AppSettings: ...

    def noted(self, task_id: str, kind: str, *fields: str) -> Record | None: ...


def put_off(
    task: AnyTask,
    runtime: Waiting,
    seconds: float,
    *,
    headers: Mapping[str, Any] | None = None,
    precise: bool = False,
    bounded: bool = False,
    keep_retries: bool = True,
    token: bool = False,
    exc: Exception | None = None,
    noted: Record | None = None,
) -> Any:
    """Re-publish the running call to come back in ``seconds`` (``broker_delay.countdown_for``:
    ``precise``, it may come back up to a second early on native delayed delivery and waits out
    the rest). ``headers``: the copy's own, over the running message's. ``bounded``: a retry
    of the task (counted in ``max_retries``, its RETRY state stored), else a re-queue, not
    bounded, its copy carrying this run's ``request.retries`` unless not ``keep_retries``.
    ``token``: with a copy token, for a copy that keeps its ``request.retries`` and holds no
    rate slot (a retry's copy, ``retries`` > 0, is dropped by its result once its call ran).
    ``noted``: with a copy token, the decision kept in the call's record in the same script call.

    Returns Celery's ``Retry`` (the caller raises it, or ``Ignore``); raises ``Ignore`` if this
    very copy is stale (another copy of the call took over: nothing is published)."""
    request = task.request
    countdown = countdown_for(task.app, seconds, runtime.settings.max_postpone, precise=precise)
    carried = carried_headers(request)
    # Due when the wait it was put off for ends: not when a wait of its earlier copy ended.
    carried.pop(DUE_HEADER, None)
    sent = {**carried, **(headers or {})}
    sent.pop(COPY_HEADER, None)
    record = ""
    if token:
        mine = str(vars(request).get(COPY_HEADER) or "")
        next_token = uuid.uuid4().hex
        record = copy_key(runtime.settings.key_prefix, str(request.id))
        ttl_ms = record_ttl_ms(countdown, 2 * runtime.settings.max_postpone)
        if not hand_on(runtime.scripts, record, mine, next_token, ttl_ms, noted):
            drop_stale(task)
        sent[COPY_HEADER] = next_token
    if bounded:
        retry = task.retry(countdown=countdown, exc=exc, throw=False, headers=sent)
    else:
        retry = requeue(
            task, countdown=countdown, throw=False, keep_retries=keep_retries, exc=exc, headers=sent
        )
    if token:
        try:
            confirm(runtime.scripts, record, sent[COPY_HEADER], ttl_ms)
        except REDIS_ERRORS as exc:
            # The copy published is the pending one: it claims the call as it arrives, and only
            # a redelivery of this message that arrives first would be let through instead.
            count("redis_errors")
            logger.warning("Could not confirm the re-queued copy of %s[%s]: %r", task.name, request.id, exc)
    return retry


def carried_headers(request: Any) -> dict[str, Any]:
    """The headers of the running message that a copy of it carries: not those the broker added
    (``BROKER_HEADERS``)."""
    return {name: value for name, value in (request.headers or {}).items() if name not in BROKER_HEADERS}


def claim_copy(task: AnyTask, runtime: Waiting, request: Any) -> bool:
    """A delivery that may be one of several copies of a put-off call (it carries a copy token,
    or the broker gave it out again): go on if it is the live copy, else drop it (raises
    ``Ignore``). One script call; none for a first delivery. Returns True when the glue must
    ask the result backend before it runs: a copy whose call has no record any more (its run
    ended and deleted it). Raises ``redis.RedisError``."""
    fields = vars(request)
    mine = fields.get(COPY_HEADER)
    if mine is None and not (request.delivery_info or {}).get("redelivered"):
        return False
    key = copy_key(runtime.settings.key_prefix, str(request.id))
    noted = runtime.noted(str(request.id), COPY_DECISION, str(mine or ""))
    answer = claim(
        runtime.scripts, key, str(mine or ""), record_ttl_ms(0, 2 * runtime.settings.max_postpone), noted
    )
    if answer == STALE:
        drop_stale(task)
    if answer == UNKNOWN:
        return mine is not None
    fields[CLAIMED_FIELD] = (runtime, key)  # a record to delete once the call has run
    if task not in _claiming:  # followed from its first claim on: other tasks' runs pay nothing
        _claiming.add(task)
        task_postrun.connect(_forget_copies, sender=task, weak=False)
    return False


#: The tasks whose runs ``_forget_copies`` follows (each connected once, on its first claim).
_claiming: weakref.WeakSet[Any] = weakref.WeakSet()


def _forget_copies(sender: Any = None, task: Any = None, state: str | None = None, **_: Any) -> None:
    """The run of a call that claimed its copies ended and Celery stored its result: delete
    their record (a copy that comes later finds none, and the result). Not for a call put off
    again, or ignored: its record names its next copy. Logged, not raised, if Redis fails: the
    record expires with its TTL."""
    request = getattr(task, "request", None)
    if request is None or state in IGNORE_STATES:
        return
    claimed = vars(request).pop(CLAIMED_FIELD, None)
    if claimed is None:
        return
    runtime, key = claimed
    try:
        forget(runtime.scripts, key)
    except REDIS_ERRORS as exc:
        count("redis_errors")
        logger.warning("Could not forget the copies of %s[%s]: %r", task.name, request.id, exc)


def drop_stale(task: AnyTask) -> Any:
    """Not run: a stale copy of a call put off (its live copy runs it). One INFO line, counted."""
    count("copies_dropped")
    logger.info(
        "Dropped copy of %s[%s]: the call was re-queued and another copy of it is the live one",
        task.name,
        task.request.id,
    )
    raise Ignore()


def requeue(task: AnyTask, *, keep_retries: bool = False, **retry: Any) -> Any:
    """Re-publish the running call like a retry (same task id, waiting for the broker as long as
    it takes), not bounded by the task's ``max_retries``: it has not run, and running out of
    retries would drop it (these retries still count in ``request.retries``, unless
    ``keep_retries``: the copy carries this run's count, as a call postponed, not retried).
    ``retry``: more of Celery's ``retry()`` arguments. Returns or raises what ``retry()`` does.

    Celery's ``retry()`` leaves the bound it is given on the task object
    (``override_max_retries``), where ``autoretry_for`` would read it for this task's later runs
    in this process: the task is left as it was found."""
    own = vars(task)
    had, before = "override_max_retries" in own, own.get("override_max_retries")
    request = task.request
    retries = request.retries
    if keep_retries:
        request.retries = retries - 1  # retry() publishes request.retries + 1
    try:
        return task.retry(max_retries=sys.maxsize, retry_policy=broker_wait_policy(task), **retry)
    finally:
        request.retries = retries
        if had:
            own["override_max_retries"] = before
        else:
            own.pop("override_max_retries", None)


def broker_wait_policy(task: AnyTask) -> dict[str, Any]:
    """A publish retry policy that waits for an unreachable broker until it is back."""
    name, task_id = task.name, str(task.request.id)

    def errback(exc: BaseException, interval: float) -> None:
        logger.warning(
            "Could not re-queue %s[%s]: the broker is unreachable (%r); trying again in %.1fs",
            name,
            task_id,
            exc,
            interval,
        )

    return {
        "max_retries": None,  # kombu's Connection.ensure: retry for ever
        "interval_start": 0.2,
        "interval_step": 0.5,
        "interval_max": BROKER_WAIT_INTERVAL_MAX,
        "errback": errback,
    }
