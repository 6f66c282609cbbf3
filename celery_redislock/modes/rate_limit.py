"""``global_rate_limit="N/s|m|h"`` (with ``rate_limit_key``, the partition): at most N starts per
period of a partition, across every worker, pool and process, decided by the Redis server's clock
(``engine.rate_limiter``: a sliding-window log). A gate: it composes with the lock and whatever mode
the task has, and is asked before them.

A call over the limit is not run and not dropped: it reserves the next free slot (no later call
takes it) and is re-published for then (same task id and arguments, its ``request.retries``
unchanged, not bounded by ``max_retries``), so its result still reaches the caller. A wait shorter
than ``WAIT_IN_PROCESS`` is waited out in the worker instead: a re-published call is due
``COME_BACK_EARLY`` before its slot and waits out the rest, so it starts on time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from celery.exceptions import Ignore

from ..config.arguments import KeyBuilder
from ..config.mode_rules import Clash
from ..config.options import LockOptions, check_lock_key
from ..config.schema import OptionSpec
from ..engine.counting import count
from ..engine.keys import slot_key
from ..engine.rate_limiter import cancel_reservation, decide
from ..engine.rates import Rate, optional_rate, rate_of
from ..engine.timing import to_ms
from ..integration.acquisition import Execution
from ..integration.outcomes import requeue
from ..integration.runtime import run_function
from ..integration.sending import expiry_ttl_ms
from ..signals import send_rate_limited

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = ["COME_BACK_EARLY", "GATE", "WAIT_IN_PROCESS", "RateLimitGate", "rate_key"]

logger = logging.getLogger(__name__)

#: Seconds a call waits for its slot in the worker, not re-published: a re-published call comes
#: back only as exactly as the broker and the worker's timer deliver it.
WAIT_IN_PROCESS = 0.2
#: Seconds before its slot a re-published call is due: it waits out the rest in the worker and
#: starts on time, where coming back late would delay every later slot of its chain.
COME_BACK_EARLY = 0.03

#: The suffix of a partition's log beside its key (``keys.slot_key``).
RATE_SUFFIX = "rate"


def rate_key(partition: str) -> str:
    """The Redis key of the log of ``partition`` (a key as ``KeyBuilder`` makes them)."""
    return slot_key(partition, RATE_SUFFIX)


class RateLimitGate:
    name: ClassVar[str] = "rate_limit"
    options: ClassVar[tuple[OptionSpec, ...]] = (
        OptionSpec(
            "global_rate_limit",
            None,
            optional_rate,
            "At most N starts per period of a partition, across every worker: ``'N/s'``, ``'N/m'`` "
            "or ``'N/h'``. A call over it is re-queued for its slot, never dropped.",
            "str | None",
            "rate_limit",
        ),
        OptionSpec(
            "rate_limit_key",
            None,
            check_lock_key,
            "The partition of ``global_rate_limit``: None (one limit for the task), a list of "
            "argument names, or ``(task, args, kwargs) -> str``.",
            "list[str] | callable | None",
            "rate_limit",
            names_arguments=True,
        ),
    )

    def __init__(self) -> None:
        # (key prefix, task name, rate_limit_key) -> its KeyBuilder, made once per process.
        self._partitions: dict[tuple[str, str, Any], KeyBuilder] = {}

    def selects(self, options: LockOptions) -> bool:
        return options.value("global_rate_limit") is not None

    def clash(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
        """A start is counted when the call is admitted, before the mode and the lock: calls
        that would be admitted and then wait, or be admitted again and again without running,
        make no sense with it. ``on_duplicate="wait"`` would start a call later than counted
        (the limit could be passed); debounce's superseded calls and keep_latest's pending ones
        would use up the limit before they are dropped."""
        if options.get("global_rate_limit") is None:
            return None
        if options.get("on_duplicate") == "wait":
            problem = (
                "cannot be used with on_duplicate='wait' (a call waiting for its key would start "
                "later than its start is counted: use 'retry' or 'skip')"
            )
            return "global_rate_limit", problem, "on_duplicate"
        for mode, why in (
            ("debounce", "a burst's superseded calls would use up the limit before they are skipped"),
            ("keep_latest", "a pending call would use up the limit each time it looks again"),
        ):
            if options.get(mode):
                return mode, f"cannot be used with global_rate_limit ({why})", "global_rate_limit"
        return None

    def admit(self, task: AnyTask, execution: Execution) -> None:
        """Let the call start now, or re-publish it for its reserved slot (raises ``Ignore``).
        Raises ``redis.RedisError`` when Redis is unreachable (``on_redis_error`` applies)."""
        rate = rate_of(execution.options.value("global_rate_limit"))
        key = self.partition(task, execution)
        scripts = execution.runtime.scripts
        request = task.request
        while True:
            decision = decide(scripts, key, rate, execution.task_id, reserve=True)
            if decision.allowed:
                return
            if decision.wait > WAIT_IN_PROCESS and not request.is_eager:  # eager: nothing to re-queue
                postpone(task, execution, key, rate, decision.wait)
            time.sleep(decision.wait)

    def partition(self, task: AnyTask, execution: Execution) -> str:
        """The Redis key of the log of the running call's partition."""
        request = task.request
        prefix = execution.runtime.settings.key_prefix
        spec = execution.options.value("rate_limit_key")
        cache_key = (prefix, task.name, spec)
        builder = self._partitions.get(cache_key)
        if builder is None:
            # No rate_limit_key: one partition for every call of the task (no argument in it).
            given = () if spec is None else spec
            builder = KeyBuilder(prefix, task.name, run_function(type(task)), given, option="rate_limit_key")
            self._partitions[cache_key] = builder
        return rate_key(builder.key(request.args or (), request.kwargs or {}, task))


def postpone(task: AnyTask, execution: Execution, key: str, rate: Rate, wait: float) -> NoReturn:
    """Re-publish the running call to start in ``wait`` seconds (its slot is reserved), counted
    ``rate_limited``; or, when its message expires before then, give its slot back and end it as
    Celery ends an expired call (revoked): a broker that drops an expired message (RabbitMQ's
    per-message TTL) would leave its caller waiting for nothing. Raises ``Ignore``: no state is
    stored for this run."""
    request = task.request
    task_id = execution.task_id
    left_ms = expiry_ttl_ms(request.expires)
    if left_ms is not None and left_ms < to_ms(wait, minimum=0):
        logger.warning(
            "Revoked rate-limited %s[%s]: it expires before its slot in %s (%s) comes, in %.3fs",
            task.name,
            task_id,
            key,
            rate,
            wait,
        )
        cancel_reservation(execution.runtime.scripts.client, key, task_id)
        task.backend.mark_as_revoked(task_id, "expired", request=request)
        raise Ignore()
    count("rate_limited")
    logger.info(
        "Rate-limited %s[%s]: %s allows %s; re-queued to start in %.3fs", task.name, task_id, key, rate, wait
    )
    send_rate_limited(task, task_id, key, str(rate), wait)
    requeue(task, countdown=max(0.0, wait - COME_BACK_EARLY), throw=False, keep_retries=True)
    raise Ignore()


GATE = RateLimitGate()
