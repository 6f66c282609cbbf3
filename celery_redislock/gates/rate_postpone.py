"""A rate-limited call that must wait, re-published for its slot (``waits.put_off``) as a fresh
copy named by a hop token, logged and counted by why it waits; or a second copy of a call,
dropped. The rate-limit gate (``rate_limit``) decides; this module carries out what it decided."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NoReturn

from celery.exceptions import Ignore

from ..engine.counting import count
from ..engine.lateness import add_lateness_kind
from ..engine.leases import REDIS_ERRORS
from ..engine.rate_decisions import RateDecision, cancel_limits
from ..engine.rate_limiter import confirm_hop
from ..engine.timing import to_ms
from ..integration.acquisition import Execution
from ..integration.runtime import Runtime
from ..integration.sending import expiry_ttl_ms
from ..integration.tracing import lock_event
from ..waits.due import due_headers
from ..waits.put_off import put_off
from .rate_calls import CallLimits, message_headers
from .rate_signals import send_rate_limited

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = ["COME_BACK_EARLY", "drop_copy", "postpone"]

logger = logging.getLogger(__name__)

# A call put off for its slot is due then: how late it starts is measured (waits.due).
add_lateness_kind("rate_limit")

#: Seconds before its slot a re-published call is due: it waits out the rest in the worker and
#: starts on time, where coming back late would delay every later slot of its chain.
COME_BACK_EARLY = 0.03


def postpone(
    task: AnyTask,
    runtime: Runtime,
    calls: CallLimits,
    decision: RateDecision,
    token: str,
    hop: str,
    *,
    paused: bool = False,
) -> NoReturn:
    """Re-publish the running call (as copy ``hop``) to come back for its slot, in ``decision.wait``
    seconds or the broker's safe hold if sooner; counted ``rate_limited`` the first time only
    (``paused``: re-queued by a pause, counted as that). Or, when its message expires before its
    slot, give the slot back and end the call as Celery ends an expired one (revoked): a broker
    that drops an expired message (RabbitMQ's per-message TTL) would leave its caller waiting for
    nothing. Raises ``Ignore``: no state is stored."""
    request = task.request
    task_id = str(request.id)
    scripts = runtime.scripts
    key = calls.home
    wait = decision.wait
    left_ms = expiry_ttl_ms(request.expires)
    if left_ms is not None and left_ms < to_ms(wait, minimum=0):
        logger.warning(
            "Revoked rate-limited %s[%s]: it expires before its slot in %s (%s) comes, in %.3fs",
            task.name,
            task_id,
            key,
            calls.describe(),
            wait,
        )
        cancel_limits(scripts, calls.limits, task_id, token, cost=calls.costs)
        task.backend.mark_as_revoked(task_id, "expired", request=request)
        raise Ignore()
    if decision.status == "over":
        count("rate_over_runtime", task=task.name)
        units = next(cost for limit, cost in zip(calls.limits, calls.costs) if limit.label == decision.limit)
        logger.info(
            "Rate-limited %s[%s]: its cost of %d is more than the runtime rate of limit %r admits at "
            "once; re-queued to ask again in %.3fs, until the limit admits it",
            task.name,
            task_id,
            units,
            decision.limit,
            wait,
        )
    elif decision.status == "reserved" and not paused:
        count("rate_limited", task=task.name)
        lock_event("postpone", task.name, key, task_id, "rate_limited", wait_seconds=wait)
        logger.info(
            "Rate-limited %s[%s]: %s; re-queued to start in %.3fs",
            task.name,
            task_id,
            calls.summary(),
            wait,
        )
        send_rate_limited(task, task_id, key, calls.rates_text(), wait)
    else:  # a hop of a call postponed already (its first postponement was told), or paused (logged)
        logger.debug(
            "Re-queued rate-limited %s[%s] again: its slot in %s is in %.3fs", task.name, task_id, key, wait
        )
    # No copy token: its copies are told apart by its hop tokens, decided with its slot (or its
    # wait over a runtime rate) in rate_limit.lua. A slot is a time it is due at; a wait over a
    # runtime rate is only when it asks again.
    headers = message_headers(calls, hop, request)
    if decision.status != "over":
        headers.update(due_headers("rate_limit", decision.due_ms))
    put_off(task, runtime, wait - COME_BACK_EARLY, precise=True, headers=headers)
    try:
        confirm_hop(scripts, key, task_id, hop)
    except REDIS_ERRORS as exc:
        # The copy published is the pending one: it keeps the slot unconfirmed. Only a copy of
        # this message delivered again would also be let through, to the grant record.
        logger.warning("Could not confirm the re-queued copy of %s[%s]: %r", task.name, task_id, exc)
    raise Ignore()


def drop_copy(task: AnyTask, execution: Execution, key: str, why: str) -> NoReturn:
    """Not run: a second copy of a call (a broker gave its message out again). One INFO line,
    counted; no state stored, the call's live copy stores its result."""
    count("rate_copies_dropped")
    logger.info("Dropped copy of rate-limited %s[%s] (%s): %s", task.name, execution.task_id, key, why)
    raise Ignore()
