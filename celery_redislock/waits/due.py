"""When a postponed call is due, carried in its message (``DUE_HEADER``: the kind of wait and its
end on the Redis server's clock), and how late it started, measured in the worker from the server's
time the script that lets it start returns: no round trip of its own. A call never postponed
carries no such header, and nothing is measured."""

from __future__ import annotations

import logging
from typing import Any

from ..engine.lateness import late, lateness_kinds
from ..engine.timing import to_seconds

__all__ = ["DUE_HEADER", "due_headers", "started"]

logger = logging.getLogger(__name__)

#: The header of a postponed call's message: ``[kind, due]``, a kind ``engine.lateness`` measures and the
#: end of its wait in server milliseconds. ``put_off`` drops it from a copy re-published for
#: another reason (that copy is due when its own wait ends).
DUE_HEADER = "redislock_due"


def due_headers(kind: str, due_ms: int) -> dict[str, Any]:
    """The headers of a call due at ``due_ms`` (server milliseconds) after a wait of ``kind``."""
    return {DUE_HEADER: [kind, int(due_ms)]}


def started(task: Any, server_ms: int) -> None:
    """The running call starts at ``server_ms`` (server milliseconds): if it was postponed, how
    late it is counted by its wait's kind. A header that is not one of ours is logged, never raised."""
    due = vars(task.request).get(DUE_HEADER)
    if due is None:
        return
    try:
        kind, due_ms = due
        if kind not in lateness_kinds():
            raise ValueError(f"unknown kind {kind!r}")
        seconds = to_seconds(server_ms - int(due_ms))
    except (TypeError, ValueError) as exc:
        logger.warning(
            "Not measured how late %s[%s] started: its %s header is %r, not [kind, server ms] (%s)",
            task.name,
            task.request.id,
            DUE_HEADER,
            due,
            exc,
        )
        return
    late(kind, task.name, seconds)
