"""How ``explain`` reads the lock's decisions in a call's record (taken, refused, and what the
refusal led to) and a put-off call's copies', each with what holds now. The gates and the modes
register the readers of their own kinds."""

from __future__ import annotations

from typing import Any

from ..engine.decision_record import COPY_DECISION, LOCK_DECISION, TAKE, Entry
from ..engine.holders import task_id_of
from ..integration.explain_readers import Context, Decision, iso, padded, reader
from ..waits.copies import STALE

__all__: list[str] = []

# -- the lock's decisions ----------------------------------------------------------------------

_ACQUIRED = {"1": "took the lock", "2": "re-entered the lock it held", "3": "took over the lock handed to it"}


def _still_held(context: Context, key: str) -> tuple[bool, str]:
    holder = context.holder_of(key)
    held = holder is not None and task_id_of(holder) == context.task_id
    if held:
        return True, "still held by this call"
    if holder is None:
        return False, "free now"
    return False, f"held now by {holder}"


@reader(TAKE)
def _take(entry: Entry, context: Context) -> Decision:
    key = entry.fields[0]
    held, now = _still_held(context, key)
    return Decision(
        entry.time,
        "acquired",
        f"acquired the lock {key} ({now})",
        {"key": key, "token": None, "still_held": held},
    )


@reader(LOCK_DECISION)
def _lock(entry: Entry, context: Context) -> Decision:
    key, strategy, countdown, retries = padded(entry.fields, 4)
    reply = entry.reply
    if isinstance(reply, list) or reply in _ACQUIRED:  # taken: [code, token, s, us] when fenced
        code, token = (reply[0], int(reply[1])) if isinstance(reply, list) else (reply, None)
        held, now = _still_held(context, key)
        shown = "" if token is None else f", fencing token {token}"
        return Decision(
            entry.time,
            "acquired",
            f"{_ACQUIRED.get(code, 'took the lock')} {key}{shown} ({now})",
            {"key": key, "token": token, "still_held": held},
        )
    holder = str(reply)
    holder_task = task_id_of(holder)
    still = context.holder_of(key) == holder
    details: dict[str, Any] = {
        "key": key,
        "holder": holder,
        "holder_task_id": holder_task,
        "holder_holds": still,
    }
    if holder_task == context.task_id:
        return Decision(
            entry.time,
            "redelivered",
            f"another delivery of this very call held {key} ({holder}): re-queued to look again",
            details,
        )
    state = context.state_of(holder_task)
    details["holder_state"] = state
    holder_now = f"{holder} ({state}, {'still holds it' if still else 'no longer holds it'})"
    if strategy == "retry" and not _out_of_retries(context, key, retries):
        due = None if entry.time is None else entry.time + float(countdown or 0)
        details["retry_at"] = due
        return Decision(
            entry.time,
            "retry",
            f"re-queued to retry at {iso(due)}: {key} was held by {holder_now}",
            details,
        )
    verbs = {"raise": ("raised", "failed with DuplicateTaskError"), "wait": ("waiting", "waited for")}
    kind, verb = verbs.get(strategy, ("skipped", "skipped as a duplicate"))
    if strategy == "wait":
        return Decision(entry.time, kind, f"{verb} {key}, held by {holder_now}", details)
    return Decision(entry.time, kind, f"{verb} of {holder_now}: {key} was held", details)


def _out_of_retries(context: Context, key: str, retries: str) -> bool:
    """Whether a refused call with ``on_duplicate="retry"`` had used its task's ``max_retries``
    (then it was skipped): the task's name is the key's, its retries were recorded."""
    name = key.rsplit(":", 2)[-2] if key.count(":") >= 2 else ""
    task = context.app.tasks.get(name)
    most = getattr(task, "max_retries", None)
    return most is not None and retries.isdigit() and int(retries) >= most


# -- a put-off call's copies ----------------------------------------------------------------


@reader(COPY_DECISION)
def _copy(entry: Entry, context: Context) -> Decision:
    (token,) = padded(entry.fields, 1)
    details = {"copy": token or "the message as first sent"}
    if str(entry.reply) == str(STALE):
        return Decision(
            entry.time, "copy_dropped", f"a copy dropped ({details['copy']}): another copy is live", details
        )
    return Decision(entry.time, "copy_live", f"the live copy of the call ({details['copy']})", details)
