"""``fair_key`` (the tenant of a call, in the forms ``lock_key`` takes): fair share per tenant.
A gate beside the modes: it composes with the lock, any mode and the rate limit.

Each queue that carries fair calls has ``fair_lanes`` lane queues (``Q.fair.0`` ...) which every
worker consuming the queue consumes too, in turn. As a call is published, one script call on the
lock Redis picks its lane (``engine.fair_lanes``): a tenant keeps its lane while it has a
backlog (its calls stay in order), a tenant without one gets the least-loaded lane, and a tenant
of weight w (``fair_weights``) spreads over up to w lanes. So a flooding tenant fills its own
lane, and another tenant's calls wait behind at most the lanes' turns, not the flood. The
message carries its queue, tenant and a ticket (``FAIR_HEADER``); its receipt by a worker counts
it out of the backlog, once per ticket, off its path (``gates.fair_receipt``); a call sent with
``expires`` is also counted out once its expiry passed (a broker may drop it unseen). Redis
unreachable at send: the tenant's lane is hashed, nothing lost.

``fair_cap``: the most calls of one tenant running at once across all workers, a counting
semaphore per tenant taken as the call starts (renewed while it runs). A call over it is put off
to its lane for a moment later (``CAP_RECHECK``, ``waits.put_off``), not run and not dropped. A
fair call sent with a countdown or an ETA waits in a worker's memory, outside its lane: when it
comes due it is put back in its lane (``due``) and waits its turn there.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
import weakref
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from celery.signals import task_postrun, task_revoked
from celery.utils.dispatch import Signal

from ..config.arguments import KeyBuilder, digest
from ..config.fair import Weights, check_lanes, check_weights, weight_of
from ..config.mode_rules import Clash
from ..config.options import LockOptions, check_lock_key, source_task
from ..config.schema import OptionSpec
from ..engine.checks import BadValue, check_count, or_none
from ..engine.counting import count
from ..engine.fair_lanes import FairLanes, hashed_lane
from ..engine.keys import format_key, slot_key
from ..engine.leases import REDIS_ERRORS, SemaphoreLease
from ..engine.renewal import get_renewer
from ..errors import OptionError
from ..integration.acquisition import Execution
from ..integration.mode import Send
from ..integration.queues import destination, lane_name, lane_queue
from ..integration.runtime import Runtime, app_layers_ask, run_function, runtime_for
from . import fair_heal as _fair_heal  # noqa: F401  # connects its worker signals
from .fair_explain import FAIR_CAP_DECISION, FAIR_DECISION
from .fair_receipt import FAIR_HEADER
from .fair_requeue import CAP_RECHECK, came_due, capped, due

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = ["CAP_RECHECK", "CAP_SUFFIX", "FAIR_HEADER", "GATE", "FairShareGate"]

logger = logging.getLogger(__name__)

#: The request attribute holding the cap's slot a running call holds: ``(key, lease)``.
CAP_FIELD = "redislock_fair_slot"
#: Beside a tenant's key (``KeyBuilder.key`` of ``fair_key``): the semaphore of its ``fair_cap``.
CAP_SUFFIX = "fair_cap"
#: The options that apply to a call's tenant (``fair_key`` first).
TENANTED = ("fair_key", "fair_cap", "fair_weights")
#: Seconds past a call's expiry before a sweep counts it out: the broker's clock and the lock
#: Redis's may differ a little, and a call a worker may still receive is counted out there.
EXPIRY_GRACE = 1.0
#: Lanes a queue has unless ``fair_lanes`` says otherwise.
DEFAULT_LANES = 16


class FairShareGate:
    name: ClassVar[str] = "fair_share"
    options: ClassVar[tuple[OptionSpec, ...]] = (
        OptionSpec(
            "fair_key",
            None,
            check_lock_key,
            "The tenant of a call, in the forms ``lock_key`` takes: a list of argument names or "
            "``(task, args, kwargs) -> str``. Calls of different tenants are served in turn.",
            "list[str] | callable | None",
            "fair_share",
            names_arguments=True,
        ),
        OptionSpec(
            "fair_lanes",
            DEFAULT_LANES,
            check_lanes,
            "Lane queues of a queue carrying fair calls (``Q.fair.0`` ...): tenants with a backlog "
            "share them. Give it per queue or app-wide: senders and workers must agree.",
            "int",
            "fair_share",
        ),
        OptionSpec(
            "fair_weights",
            None,
            check_weights,
            "Tenant name -> int, or ``(tenant) -> int``: a tenant of weight w spreads over up to w "
            "lanes, so gets up to w shares.",
            "dict[str, int] | callable | None",
            "fair_share",
        ),
        OptionSpec(
            "fair_cap",
            None,
            or_none(check_count),
            "The most calls of one tenant running at once across all workers; more wait in their lane.",
            "int | None",
            "fair_share",
        ),
    )
    counters: ClassVar[Mapping[str, str]] = {
        "fair_assigned": "fair calls sent to the lane Redis assigned them",
        "fair_unassigned": "fair calls sent to a hashed lane: Redis was unreachable at send",
        "fair_capped": "fair calls over their tenant's ``fair_cap``, re-queued to their lane",
        "fair_due": "fair calls whose countdown or ETA came, re-queued to their lane to wait their turn",
        "fair_healed": "lanes whose count a worker set right by what the broker holds there",
    }
    key_suffixes: ClassVar[Mapping[str, str]] = {CAP_SUFFIX: "fair share cap"}
    signals: ClassVar[Mapping[str, Signal]] = {}

    def __init__(self) -> None:
        self._builders: dict[tuple[str, str, Any], KeyBuilder] = {}
        self._unreachable_told = False

    # --- the plan -----------------------------------------------------------------------------

    def selects(self, options: LockOptions) -> bool:
        return options.value("fair_key") is not None

    def sends_through(self, task: Any) -> bool:
        """Whether a call of ``task`` may be fair (so its send must pick a lane)."""
        own = getattr(task, "fair_key", None)
        if own is not None:
            return True
        return app_layers_ask(task.app, "fair_key", lambda value: value is not None)

    def clash(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
        """Debounce and keep_latest re-publish a call their own way, where no lane would be picked
        for it; a weight or a cap needs a tenant (asked of the layers merged: a cap may be given
        app-wide for the tasks that have a tenant)."""
        fair = next((name for name in TENANTED if options.get(name) is not None), None)
        if fair is None:
            return None
        for mode in ("debounce", "keep_latest"):
            if options.get(mode):
                why = f"{mode} re-publishes calls outside the fair-share lanes"
                return mode, f"cannot be used with {fair} ({why})", fair
        if merged and fair != "fair_key":
            return fair, "needs fair_key (the tenant it applies to)", "fair_key"
        return None

    def describe_key(
        self, runtime: Runtime, key: str, task_name: str, suffix: str, value: str | None
    ) -> str | None:
        return "fair_cap: the running calls of one tenant"

    def consumes(self, task: Any, options: LockOptions, queue: str) -> list[str]:
        """The lanes of ``queue`` a worker consuming it consumes too, for ``task``'s calls."""
        return [lane_name(queue, lane) for lane in range(options.value("fair_lanes"))]

    # --- sending ------------------------------------------------------------------------------

    def on_send(self, call: Send) -> Send:
        """``call`` as it is published: to the lane Redis assigns its tenant, carrying its
        queue, tenant and ticket (``FAIR_HEADER``). Assigned as it is published, not before: a
        call the lock refuses at send publishes nothing and is counted in no backlog."""
        publish = call.publish

        def to_lane(args: Any, kwargs: Any, task_id: str | None, **options: Any) -> Any:
            task_id = task_id or str(uuid.uuid4())  # its id now, as Celery gives one: its record is by it
            options, lanes, ticket = self._route(call, args, kwargs, task_id, options)
            try:
                return publish(args, kwargs, task_id, **options)
            except BaseException:
                if lanes is not None:  # nothing was queued: count nothing
                    lanes.started(ticket)
                raise

        return dataclasses.replace(call, publish=to_lane)

    def _route(
        self, call: Send, args: Any, kwargs: Any, task_id: str, options: dict[str, Any]
    ) -> tuple[dict[str, Any], FairLanes | None, str]:
        task, runtime, plan = call.task, call.runtime, call.plan
        headers = dict(options.pop("headers", None) or {})
        given = headers.get(FAIR_HEADER)
        # A re-published call keeps its tenant: JSON may have changed its arguments' types since.
        tenant = str(given[1]) if given else self._tenant(runtime, task, plan.options, args, kwargs)
        if given and given[0]:
            # A re-published call keeps its queue too: a retry's own routing may not name it
            # (one that came through RabbitMQ's native delayed delivery names the delay's).
            queue = str(given[0])
        elif call.queue is not None:  # routed once a send: send_plan asked the router already
            queue = call.queue
        else:
            queue = destination(task, options, args, kwargs)
        count_of = plan.options.value("fair_lanes")
        weight = self._weight(task, plan.options, tenant)
        ticket = uuid.uuid4().hex
        lanes = FairLanes(runtime.scripts, runtime.settings.key_prefix, queue)
        try:
            record = runtime.noted(task_id, FAIR_DECISION, queue, tenant)
            lane = lanes.assign(tenant, ticket, count_of, weight, expires_at(task, options), record)
            count("fair_assigned")
            self._unreachable_told = False
        except REDIS_ERRORS as exc:
            lane = hashed_lane(tenant, count_of)
            count("fair_unassigned")
            count("redis_errors")
            if not self._unreachable_told:  # once until Redis answers again: a flood would flood the log
                self._unreachable_told = True
                logger.warning(
                    "Sending fair calls of %s to hashed lanes of %s: the lock Redis is unreachable (%r)",
                    task.name,
                    queue,
                    exc,
                )
            headers[FAIR_HEADER] = [queue, tenant, ""]  # counted in no backlog: nothing to count out
            return {**options, **lane_route(task, queue, lane), "headers": headers}, None, ""
        headers[FAIR_HEADER] = [queue, tenant, ticket]
        return {**options, **lane_route(task, queue, lane), "headers": headers}, lanes, ticket

    def _tenant(self, runtime: Runtime, task: Any, options: LockOptions, args: Any, kwargs: Any) -> str:
        builder = self._builder(runtime, task, options.value("fair_key"))
        return builder.name(tuple(args or ()), dict(kwargs or {}), task)

    def _tenant_of(self, runtime: Runtime, task: Any, options: LockOptions, request: Any) -> str:
        """The tenant of the running call ``request``: its message's (``FAIR_HEADER``), else, sent
        by a sender without fair share (or eager), from its arguments."""
        header = vars(request).get(FAIR_HEADER)
        if header:
            return str(header[1])
        return self._tenant(runtime, task, options, request.args, request.kwargs)

    def _weight(self, task: Any, options: LockOptions, tenant: str) -> int:
        weights: Weights = options.value("fair_weights")
        try:
            return weight_of(weights, tenant, f"task {task.name!r}")
        except BadValue as bad:
            raise OptionError("fair_weights", source_task(task.name), str(bad)) from None

    def _builder(self, runtime: Runtime, task: Any, spec: Any) -> KeyBuilder:
        prefix = runtime.settings.key_prefix
        cache_key = (prefix, task.name, spec)
        builder = self._builders.get(cache_key)
        if builder is None:
            builder = KeyBuilder(prefix, task.name, run_function(type(task)), spec, option="fair_key")
            self._builders[cache_key] = builder
        return builder

    # --- the start ----------------------------------------------------------------------------

    def admit(self, task: AnyTask, execution: Execution) -> None:
        """Take a slot of the call's tenant's cap, or re-queue it to its lane for later (raises
        ``Ignore``)."""
        runtime, options = execution.runtime, execution.options
        # The running request as the glue passed it (task.request walks Celery's request stack).
        request = task.request if execution.request is None else execution.request
        if came_due(request) and not request.is_eager:
            due(task, runtime)
        cap = options.value("fair_cap")
        if cap is None:  # nothing to do at the start: counted out as the worker received it
            return
        tenant = self._tenant_of(runtime, task, options, request)
        key = self.cap_key(runtime, task, options, tenant)
        lease = SemaphoreLease(key, execution.holder, options.timeout_ms, cap)
        record = runtime.noted(execution.task_id, FAIR_CAP_DECISION, key, str(cap), tenant)
        result = runtime.semaphores.acquire(key, lease.holder, cap, lease.ttl_ms, record=record)
        if result.status is None:
            capped(task, runtime, key, cap, tenant)
        get_renewer().add(runtime.semaphores, lease, options.renew_interval_s)
        vars(request)[CAP_FIELD] = (runtime, lease)
        if task not in _capping:  # connected for capped tasks only: other tasks' runs pay nothing
            _capping.add(task)
            task_postrun.connect(_release_cap, sender=task, weak=False)

    def held_slots(
        self, runtime: Runtime, task: Any, options: LockOptions, context: Any
    ) -> list[tuple[str, str]]:
        """``(key, name)`` of the slot a running call of ``task`` (its request's ``context``) holds
        by its execution's holder id: its tenant's ``fair_cap``, which the worker's parent gives
        back for a child that died holding it (``parent_release``), as it frees its lock."""
        if options.value("fair_cap") is None:
            return []
        tenant = self._tenant_of(runtime, task, options, context)
        return [(self.cap_key(runtime, task, options, tenant), CAP_SUFFIX)]

    def capped_key(self, runtime: Runtime, task: Any, options: LockOptions, tenant: str) -> str | None:
        """``cap_key`` where ``task``'s options cap its tenants, else None (no count is kept)."""
        if options.value("fair_key") is None or options.value("fair_cap") is None:
            return None
        return self.cap_key(runtime, task, options, tenant)

    def cap_key(self, runtime: Runtime, task: Any, options: LockOptions, tenant: str) -> str:
        """The semaphore of ``tenant``'s cap: beside the lock key the task would have for the
        tenant's name (a digest: any name fits a key and its slot); ``celery redislock list``
        shows it."""
        return slot_key(format_key(runtime.settings.key_prefix, task.name, digest(tenant)), CAP_SUFFIX)


def expires_at(task: Any, options: Mapping[str, Any]) -> float | None:
    """When a call sent with ``options`` expires (Unix seconds; Celery's ``expires``: seconds from
    now or a datetime, else the task's own), plus ``EXPIRY_GRACE``; None if never."""
    expires = options.get("expires", getattr(task, "expires", None))
    if expires is None:
        return None
    if isinstance(expires, str):
        try:
            expires = datetime.fromisoformat(expires)
        except ValueError:  # Celery refuses it as it sends, saying why
            return None
    if isinstance(expires, datetime):
        aware = expires if expires.tzinfo else expires.replace(tzinfo=task.app.timezone)
        return aware.timestamp() + EXPIRY_GRACE
    return time.time() + float(expires) + EXPIRY_GRACE


def lane_route(task: Any, queue: str, lane: int) -> dict[str, Any]:
    """The ``queue``, ``exchange`` and ``routing_key`` of a send to lane ``lane`` of ``queue``: by
    the default (nameless) exchange to the lane by name, as Celery sends to a direct queue, so no
    binding is needed (one lost with a broker's data would drop the message on a Redis broker)
    and neither the task's own ``exchange`` / ``routing_key`` nor a retry's sends it elsewhere.
    The lane is declared as a copy of ``queue``'s declaration (``lane_queue``: its arguments,
    durability, priorities), the same in senders and workers; with
    ``task_create_missing_queues=False`` the lanes must be declared in ``task_queues``."""
    name = lane_name(queue, lane)
    try:
        lane_queue(task.app.amqp.queues, name)
    except KeyError:
        raise OptionError(
            "fair_lanes",
            source_task(task.name),
            f"sends to lane {name!r}, which task_queues does not declare (task_create_missing_queues "
            f"is False): declare {lane_name(queue, 0)!r} and the other lanes of {queue!r} there",
        ) from None
    return {"queue": name, "exchange": "", "routing_key": name}


#: The tasks whose runs ``_release_cap`` follows (each connected once, on its first capped call).
_capping: weakref.WeakSet[Any] = weakref.WeakSet()


def _release_cap(sender: Any = None, task: Any = None, **_: Any) -> None:
    """The run ended (whatever its outcome): give its tenant's slot back."""
    request = getattr(task, "request", None)
    held = vars(request).pop(CAP_FIELD, None) if request is not None else None
    if held is None:
        return
    runtime, lease = held
    get_renewer().discard(runtime.semaphores, lease)
    try:
        runtime.semaphores.release(lease.key, lease.holder)
    except REDIS_ERRORS as exc:  # it expires with its TTL
        count("redis_errors")
        logger.warning("Could not give back the fair_cap slot %s of %s: %r", lease.key, lease.holder, exc)


@task_revoked.connect(weak=False)
def _revoked(sender: Any = None, request: Any = None, **_: Any) -> None:
    """A fair call revoked or expired before it ran: count it out of its backlog, or its lane and
    tenant would look busy for good (one discarded as it arrives never reaches ``task_received``)."""
    header = vars(request).get(FAIR_HEADER) if request is not None else None
    if not header or sender is None:
        return
    queue, _tenant, ticket = (str(part) for part in header)
    if not ticket:
        return
    runtime = runtime_for(sender.app)
    try:
        FairLanes(runtime.scripts, runtime.settings.key_prefix, queue).started(ticket)
    except REDIS_ERRORS as exc:  # a signal handler must not break the worker's revoke handling
        count("redis_errors")
        logger.warning("Could not count revoked %s[%s] out of its backlog: %r", sender.name, request.id, exc)


GATE = FairShareGate()
