"""Copy tokens: which copy of a put-off call's message is the live one.

A call put off is re-published under its task id, and its running message acknowledged after:
a worker that dies in between leaves two copies (``acks_late``: RabbitMQ gives the original out
again at once; a Redis broker after its visibility timeout). Each re-published copy carries a
fresh token (``COPY_HEADER``), recorded in the lock Redis before it is published (pending) and
confirmed after; a copy that arrives claims the call, and the first of the live and the pending
copy to claim it wins: the other is dropped as it arrives (``lua/copy_token.lua``). The record is
deleted when the call's run ends: a copy that arrives after that is dropped if the call has a
result (the glue asks the result backend, as for any redelivery). A rate-limited
call's copies are told apart by its reservation instead (``engine.rate_limiter``), in the same
script call as its slot.
"""

from __future__ import annotations

from ..engine.decision_record import Record, run_recorded
from ..engine.script_runner import ScriptRunner, package_script
from ..engine.timing import to_ms

__all__ = [
    "COPY_HEADER",
    "LIVE",
    "STALE",
    "UNKNOWN",
    "claim",
    "confirm",
    "forget",
    "hand_on",
    "record_ttl_ms",
]

#: The message header naming a re-published copy of a call.
COPY_HEADER = "redislock_copy"

COPY_TOKEN = package_script(__package__, "copy_token.lua")


def record_ttl_ms(countdown: float, hold: float) -> int:
    """How long a call's record is kept: until its copy is due and, after that, twice what the
    broker holds an unacknowledged message for (``hold``): a stale copy comes back within it."""
    return to_ms(countdown + 2 * hold, minimum=1)


#: ``claim``'s answers.
STALE, LIVE, UNKNOWN = 0, 1, 2


def claim(scripts: ScriptRunner, key: str, token: str, ttl_ms: int, record: Record | None = None) -> int:
    """A copy named ``token`` ("" the message as first sent) arrived: ``LIVE`` if it is the live
    one from now on, ``STALE`` if another copy is, ``UNKNOWN`` if the call has no record (never
    put off, or its run ended). ``record``: the answer kept in the call's record of decisions."""
    return int(run_recorded(scripts, COPY_TOKEN, [key], ["claim", token, "", ttl_ms], record))


def forget(scripts: ScriptRunner, key: str) -> None:
    """The call ran: its record goes (a copy that comes later finds none, and its result)."""
    scripts.execute("DEL", key)


def hand_on(
    scripts: ScriptRunner, key: str, token: str, next_token: str, ttl_ms: int, record: Record | None = None
) -> bool:
    """The copy ``token`` is about to publish copy ``next_token``: False if it is stale.
    ``record``: why it is put off, kept in the call's record of decisions too."""
    return bool(run_recorded(scripts, COPY_TOKEN, [key], ["hand_on", token, next_token, ttl_ms], record))


def confirm(scripts: ScriptRunner, key: str, token: str, ttl_ms: int) -> bool:
    """Copy ``token`` is published: the live one, unless another copy took over meanwhile."""
    return bool(scripts.run(COPY_TOKEN, [key], ["confirm", token, "", ttl_ms]))
