"""How ``explain`` reads fair share's decisions in a call's record: its lane at send (with the
calls waiting there now) and its tenant's ``fair_cap`` at the start."""

from __future__ import annotations

from typing import Any

from ..engine.decision_record import Entry
from ..integration.explain_readers import Context, Decision, padded, reader
from ..integration.queue_sizes import queue_sizes
from ..integration.queues import lane_name

__all__ = ["FAIR_CAP_DECISION", "FAIR_DECISION"]

#: The kinds of fair share's entries: the lane a call is sent to (``fair_assign.lua``) and its
#: tenant's cap at its start (``sem_acquire.lua``).
FAIR_DECISION = "fair"
FAIR_CAP_DECISION = "fair_cap"


@reader(FAIR_DECISION)
def _fair(entry: Entry, context: Context) -> Decision:
    queue, tenant = padded(entry.fields, 2)
    lane = lane_name(queue, int(entry.reply))
    try:  # read now: the calls the broker holds in the lane (those ahead, and those after)
        waiting: int | None = queue_sizes(context.app, [lane]).get(lane, 0)
    except Exception:  # a broker that cannot be asked: the lane is still told
        waiting = None
    about = "" if waiting is None else f"; about {waiting} call(s) waiting in it now"
    details = {"queue": queue, "tenant": tenant, "lane": lane, "in_lane": waiting}
    return Decision(entry.time, "lane", f"sent to lane {lane} of tenant {tenant!r}{about}", details)


@reader(FAIR_CAP_DECISION)
def _fair_cap(entry: Entry, context: Context) -> Decision:
    key, cap, tenant = padded(entry.fields, 3)
    reply = entry.reply if isinstance(entry.reply, list) else [entry.reply]
    details: dict[str, Any] = {"key": key, "tenant": tenant, "fair_cap": cap}
    if reply and reply[0] not in ("0", None, False):
        return Decision(entry.time, "cap_slot", f"took a slot of tenant {tenant!r}'s fair_cap {cap}", details)
    holders = reply[2] if len(reply) > 2 and isinstance(reply[2], list) else []
    details["holders"] = holders
    return Decision(
        entry.time,
        "over_fair_cap",
        f"over tenant {tenant!r}'s fair_cap of {cap} ({len(holders)} running): re-queued to its lane",
        details,
    )
