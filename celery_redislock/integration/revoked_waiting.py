"""What a call waiting in the worker holds goes back as soon as the worker learns it is revoked.

A message with an ETA (a call postponed for its rate-limit slot, a countdown) waits in the
worker's memory until then; Celery looks at a revoked request only when its ETA comes, and sends
``task_revoked`` then, so a give-back on that signal would wait as long. A call that will never
start holds nothing: this step wraps the worker's ``revoke`` control command, and after Celery's
own handler has flagged the ids revoked, sends ``waiting_revoked`` for each request of them that
this worker holds waiting for its ETA. Receivers give back what the call reserved (the rate
limit's ``give_back``); Celery's ``task_revoked`` still comes at the ETA, and finds nothing left.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Iterable
from typing import Any

from celery import bootsteps
from celery.app.task import Context
from celery.signals import task_received
from celery.utils.dispatch import Signal
from celery.utils.functional import maybe_list
from celery.worker import state

from .task import SingletonTask

__all__ = ["RevokedWaiting", "waiting_revoked"]

logger = logging.getLogger(__name__)

#: Sent in the worker's consumer, with ``sender`` the task and ``request`` the request's context
#: (as ``task_revoked`` has them), for a call revoked while it waits here for its ETA.
waiting_revoked = Signal(name="redislock_waiting_revoked")

#: The requests this worker received with an ETA (weakly: a request that ran or was discarded
#: is gone with Celery's last reference to it).
_scheduled: weakref.WeakSet[Any] = weakref.WeakSet()


@task_received.connect(weak=False)
def _remember(sender: Any = None, request: Any = None, **_: Any) -> None:
    if request is not None and request.eta and isinstance(request.task, SingletonTask):
        _scheduled.add(request)


def _waiting(request: Any) -> bool:
    """Still waiting for its ETA: neither handed to the pool (reserved), nor running, nor ended
    (every request Celery ends, run or discarded, is acknowledged or rejected)."""
    return not (
        request.acknowledged or request in state.reserved_requests or request in state.active_requests
    )


def give_back_waiting(task_ids: Iterable[str]) -> int:
    """Send ``waiting_revoked`` for each request of ``task_ids`` waiting here (Celery has flagged
    them revoked: none can start now); how many."""
    ids = {str(task_id) for task_id in task_ids}
    found = [request for request in list(_scheduled) if request.id in ids and _waiting(request)]
    for request in found:
        _scheduled.discard(request)
        waiting_revoked.send(sender=request.task, request=Context(request.request_dict))
    return len(found)


class RevokedWaiting(bootsteps.StartStopStep):
    """Wrap the ``revoke`` control command (Celery's registry is one per process: wrapped once)."""

    name = "celery_redislock.RevokedWaiting"

    def start(self, parent: Any) -> None:
        from celery.worker.control import Panel

        revoke = Panel.data.get("revoke")
        if revoke is None or getattr(revoke, "redislock_hook", False):
            return

        @functools.wraps(revoke)
        def revoke_and_give_back(control_state: Any, task_id: Any, **kwargs: Any) -> Any:
            reply = revoke(control_state, task_id, **kwargs)
            # After Celery's handler: the ids are flagged, so a request whose ETA comes from
            # now on is discarded, never run (with a timer thread too).
            try:
                give_back_waiting(maybe_list(task_id) or [])
            except Exception:  # the revoke itself must answer whatever happens here
                logger.exception("Could not give back what revoked calls waiting here hold")
            return reply

        revoke_and_give_back.redislock_hook = True  # type: ignore[attr-defined]
        Panel.data["revoke"] = revoke_and_give_back
