"""A fair call put back in its lane (``waits.put_off``): over its tenant's ``fair_cap`` (to look
again in ``CAP_RECHECK``), or come due after a countdown or ETA its sender gave it, which it
waited out in a worker's memory, outside its lane (to wait its turn there)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NoReturn

from celery.exceptions import Ignore

from ..engine.counting import count
from ..integration.runtime import Runtime
from ..waits.copies import COPY_HEADER
from ..waits.put_off import put_off
from .fair_receipt import FAIR_HEADER
from .rate_calls import HOP_HEADER

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = ["CAP_RECHECK", "came_due", "capped", "due"]

logger = logging.getLogger(__name__)

#: Seconds a call over its tenant's cap waits before it looks again.
CAP_RECHECK = 1.0


def capped(task: AnyTask, runtime: Runtime, key: str, cap: int, tenant: str) -> NoReturn:
    """Over the cap: put off to its lane to look again in ``CAP_RECHECK``, counted, logged at
    INFO. Raises ``Ignore``."""
    request = task.request
    count("fair_capped")
    logger.info(
        "Capped %s[%s]: tenant %r runs %d call(s) at once already (%s); re-queued to its lane",
        task.name,
        request.id,
        tenant,
        cap,
        key,
    )
    if request.is_eager:
        raise Ignore()
    back_to_lane(task, runtime, CAP_RECHECK)


def came_due(request: Any) -> bool:
    """Whether the running call waited for a countdown or ETA its sender gave it: one the
    package put off, or a retry, carries its own reasons and is not sent round again."""
    fields = vars(request)
    return bool(
        fields.get("eta") and not request.retries and COPY_HEADER not in fields and HOP_HEADER not in fields
    )


def due(task: AnyTask, runtime: Runtime) -> NoReturn:
    """A fair call whose countdown or ETA came: it waited in a worker's memory, outside its
    lane, so it goes back to its lane now and waits its turn there (a flood sent with a
    countdown would otherwise all run ahead of other tenants' calls). Raises ``Ignore``."""
    count("fair_due")
    logger.info("Due fair %s[%s]: re-queued to its lane to wait its turn", task.name, task.request.id)
    back_to_lane(task, runtime, 0.0)


def back_to_lane(task: AnyTask, runtime: Runtime, seconds: float) -> NoReturn:
    """Put the running call off to its lane (its tenant kept; a new ticket as it is published)."""
    request = task.request
    headers = {}
    header = vars(request).get(FAIR_HEADER)
    if header:
        headers[FAIR_HEADER] = [header[0], header[1], ""]
    put_off(task, runtime, seconds, headers=headers, token=True)
    raise Ignore()
