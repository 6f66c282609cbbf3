"""How ``explain`` reads the rate-limit gate's decisions in a call's record: started, postponed
to a slot (its predicted start, its place among the calls holding later slots now), held by a
pause until its end."""

from __future__ import annotations

from typing import Any

from ..engine.decision_record import Entry
from ..engine.keys import limit_keys, reservation_member
from ..engine.rate_decisions import RATE_STATUSES
from ..engine.timing import to_seconds
from ..integration.explain_readers import Context, Decision, iso, padded, reader

__all__ = ["PAUSE_DECISION", "RATE_DECISION"]

#: The kinds of the rate-limit gate's entries: its decision (``rate_limit.lua``), and the same
#: decision made after a pause (``rate_pause.lua`` first; the pause's end in its fields).
RATE_DECISION = "rate"
PAUSE_DECISION = "pause"


def _limit_state(context: Context, home: str, task_id: str) -> tuple[int | None, int, float | None]:
    """The call's place among the calls holding a later slot of ``home`` (1: next; None: it
    holds none now), how many hold one, and the end of a pause of ``home`` (seconds; None)."""
    keys = limit_keys(home)
    client = context.runtime.engine.client
    pipe = client.pipeline(transaction=False)
    pipe.zrank(keys[1], reservation_member(task_id))
    pipe.zcard(keys[1])
    pipe.get(keys[4])
    rank, waiting, pause_end = pipe.execute()
    return (
        None if rank is None else int(rank) + 1,
        int(waiting),
        None if pause_end is None else to_seconds(int(pause_end)),
    )


@reader(RATE_DECISION)
@reader(PAUSE_DECISION)
def _rate(entry: Entry, context: Context) -> Decision:
    home, names, paused_until = padded(entry.fields, 3)
    labels = names.split(",") if names else []
    reply = entry.reply if isinstance(entry.reply, list) else [entry.reply, "0"]
    status = (
        RATE_STATUSES[int(reply[0])]
        if str(reply[0]).isdigit() and int(reply[0]) < len(RATE_STATUSES)
        else "?"
    )
    wait = to_seconds(int(reply[1]))
    names = ", ".join(labels) or home
    at = None if entry.time is None else entry.time + wait
    details: dict[str, Any] = {"limits": labels, "partition": home, "status": status, "wait": wait}
    if status == "granted":
        return Decision(entry.time, "started", f"started now under limit(s) {names}", details)
    if status == "started":
        return Decision(
            entry.time, "started", f"found its start under {names} made already (a copy)", details
        )
    if status == "held":
        return Decision(
            entry.time, "copy_dropped", f"a copy dropped: another copy holds its slot of {names}", details
        )
    position, waiting, pause_now = _limit_state(context, home, context.task_id)
    # A pause's own entry has its end, as the pause set it (the pause's key is gone once it ends).
    pause_end = to_seconds(int(paused_until)) if paused_until else pause_now
    details.update(predicted_start=at, position=position, waiting=waiting, pause_end=pause_end)
    place = "" if position is None else f"; now {position} of {waiting} call(s) holding a later slot"
    if entry.kind == PAUSE_DECISION or (
        pause_end is not None and entry.time is not None and pause_end > entry.time
    ):
        return Decision(
            entry.time,
            "paused",
            f"held by a pause of limit {names} until {iso(pause_end)}: predicted start {iso(at)}{place}",
            details,
        )
    if status == "over":
        # {6, ms, server ms, i}: limit i's runtime rates admit it not (rate_limit.lua)
        index = int(reply[3]) if len(reply) > 3 and str(reply[3]).isdigit() else 0
        label = labels[index - 1] if 0 < index <= len(labels) else names
        return Decision(
            entry.time,
            "over",
            f"costs more than limit {label} admits at once now: asks again at {iso(at)}",
            details,
        )
    if status == "full":
        return Decision(
            entry.time,
            "postponed",
            f"no slot of limit {names} within reach: asks again at {iso(at)}",
            details,
        )
    return Decision(
        entry.time,
        "postponed",
        f"postponed to a slot of limit {names}: predicted start {iso(at)}{place}",
        details,
    )
