"""Worker lifecycle, connected on import: tag each request with its queue, free locks of dead or
terminated children (as Celery reports them; ``child_exit`` frees a dead child's sooner) and of
discarded messages from the parent, release what a process holds at shutdown. The package's own
signals (``task_duplicate``, ``lock_lost``, ``lock_retaken``) are ``celery_redislock.signals``."""

from __future__ import annotations

import atexit
import logging
import weakref
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from celery import Celery, signals
from celery.app.task import Context
from celery.exceptions import TimeLimitExceeded, WorkerLostError

from ..config.arguments import KEY_HEADER
from ..engine.counting import count
from ..engine.holders import handover_id, queued_id
from ..engine.leases import REDIS_ERRORS
from ..engine.renewal import get_renewer
from .bootstep import GateQueues, SettingsCheck
from .child_exit import ChildExitRelease
from .hard_limit import HardLimitKill, killed_at_hard_limit
from .parent_release import release_for
from .queues import QUEUE_FIELD, consumed_queue
from .revoked_waiting import RevokedWaiting
from .runtime import runtime_for
from .task import SingletonTask

__all__: list[str] = []  # connected on import; nothing to import from here

logger = logging.getLogger(__name__)


class _Received:
    """The requests this worker has received and still holds, every delivery (two of one task
    id can run at once in two children), and its node name: the failure and revocation signals
    come without the request (the hard time limit's without even its context), whose headers
    may carry the key and whose ``worker_pid`` says which child ran it, and the release needs
    the node the holder id names."""

    def __init__(self) -> None:
        self.requests: weakref.WeakSet[Any] = weakref.WeakSet()
        self.node: str | None = None

    def add(self, request: Any) -> None:
        self.requests.add(request)
        self.node = request.hostname

    def deliveries(self, task_id: Any) -> list[Any]:
        return [request for request in list(self.requests) if request.id == str(task_id)]

    def context(self, task_id: Any, args: Any, kwargs: Any) -> Any:
        """The context of request ``task_id``, or what a release needs of it when it is gone."""
        for request in self.deliveries(task_id):
            return Context(request.request_dict)
        return SimpleNamespace(id=task_id, hostname=self.node, args=args, kwargs=kwargs)

    def pid_of(self, context: Any) -> int | None:
        """The pool process that ran the delivery ``context`` is of: Celery sends a request's
        own context (cached on it) with ``task_revoked`` and as the ``task_failure`` sender's
        request; None when no delivery held here has it."""
        for request in self.deliveries(getattr(context, "id", None)):
            if vars(request).get("_context") is context:
                pid = request.worker_pid
                return pid if isinstance(pid, int) else None
        return None


_received = _Received()


@signals.task_received.connect(weak=False)
def _tag_queue(sender: Any = None, request: Any = None, **_: Any) -> None:
    # Runs in the consumer (the parent of prefork children): the request dict is what the
    # child gets as task.request, so the queue rides along to SingletonTask.__call__.
    if request is None or not isinstance(request.task, SingletonTask):
        return
    _received.add(request)
    if not runtime_for(request.task.app).settings.queues:
        return  # no per-queue options: which queue it came from changes nothing
    task_consumer = getattr(sender, "task_consumer", None)
    queues: Sequence[Any] = getattr(task_consumer, "queues", None) or list(
        request.task.app.amqp.queues.values()
    )
    tags: Mapping[str, str] = getattr(task_consumer, "_active_tags", None) or {}
    message = getattr(request, "message", None)
    delivery_info = getattr(message, "delivery_info", None) or request.delivery_info or {}
    request.request_dict[QUEUE_FIELD] = consumed_queue(delivery_info, queues, tags)


@signals.task_failure.connect(weak=False)
def _release_dead_child(
    sender: Any = None,
    task_id: str | None = None,
    exception: BaseException | None = None,
    args: Any = None,
    kwargs: Any = None,
    **_: Any,
) -> None:
    # Sent in the parent when a prefork child died mid-task (WorkerLostError) or was killed
    # at its hard time limit: the child's own release never ran, so free its lock now
    # instead of after lock_timeout.
    if not isinstance(sender, SingletonTask):
        return
    if isinstance(exception, WorkerLostError):
        context = sender.request
        release_for(sender, context, "its worker process died", _received.pid_of(context))
    elif isinstance(exception, TimeLimitExceeded):
        # Celery sends this one without the request's context: find the request by its id. The
        # pool kills the process as the signal returns; only the hook names it (else release_for
        # frees only holders whose process is gone, which this one is not yet).
        context = _received.context(task_id, args, kwargs)
        release_for(sender, context, "it was killed at its hard time limit", killed_at_hard_limit())


@signals.task_revoked.connect(weak=False)
def _release_terminated(sender: Any = None, request: Any = None, terminated: bool = False, **_: Any) -> None:
    if not isinstance(sender, SingletonTask) or request is None:
        return
    if terminated:
        release_for(sender, request, "it was revoked and terminated", _received.pid_of(request))
    else:
        _release_discarded(sender, request)


def _release_discarded(task: SingletonTask, request: Any) -> None:
    """A message Celery discards unrun (expired, or revoked before it ran): free the lock kept
    for it, taken at enqueue (``{id}@queued``) or handed over by its previous run
    (``{id}@handover``), instead of leaving it for its TTL. Only messages carrying their key
    have one; any other holder (a delivery running elsewhere) is left alone."""
    key = getattr(request, KEY_HEADER, None)
    if not isinstance(key, str) or not key:
        return
    task_id = str(request.id)
    try:
        runtime = runtime_for(task.app)
        for holder in (queued_id(task_id), handover_id(task_id)):
            if runtime.engine.release(key, holder, notify=runtime.release_channel(key)):
                count("released", task=task.name)
                logger.info("Released lock %s of discarded %s[%s] (%s)", key, task.name, task_id, holder)
    except REDIS_ERRORS as exc:
        count("redis_errors")
        logger.warning(
            "Could not release the lock of discarded %s[%s]: %r; it expires on its TTL",
            task.name,
            task_id,
            exc,
        )


@signals.worker_init.connect(weak=False)
def _add_worker_steps(sender: Any = None, **_: Any) -> None:
    # Bad redislock_* settings must stop the worker before it consumes anything, but what a
    # signal receiver raises is swallowed: add the bootstep that checks them instead. The
    # worker sends worker_init just before it builds its blueprint from app.steps["worker"].
    # And those that let the parent free a prefork child's locks as the child exits, name
    # the process the pool kills at a hard time limit, and give back what a revoked call
    # waiting for its ETA holds as the revoke comes.
    app: Celery | None = getattr(sender, "app", None)
    if app is not None:
        app.steps["worker"].update(
            (SettingsCheck, GateQueues, ChildExitRelease, HardLimitKill, RevokedWaiting)
        )


@signals.worker_process_shutdown.connect(weak=False)
def _release_process_locks(**_: Any) -> None:
    # A prefork child exiting, or (worker_shutdown below) a solo/threads worker: release what
    # this process still holds, then stop its renewal thread.
    renewer = get_renewer()
    released = renewer.release_all()
    count("released", released)
    renewer.stop()


@signals.worker_shutdown.connect(weak=False)
def _release_at_shutdown(**_: Any) -> None:
    _release_process_locks()


@signals.worker_shutting_down.connect(weak=False)
def _release_after_cold_shutdown(how: str | None = None, **_: Any) -> None:
    # A cold shutdown terminates the pool: children normally release in their own cleanup, but
    # one killed outright cannot. Celery forgets the active requests before the pool is gone
    # (and sends no worker_shutdown), so note them now and free their locks at exit.
    if how != "Cold":
        return
    from celery.worker import state

    busy = [
        (r.task, Context(r.request_dict), r.worker_pid)
        for r in list(state.active_requests)
        if isinstance(r.task, SingletonTask)
    ]
    if busy:
        atexit.register(_release_requests, busy)


def _release_requests(busy: list[tuple[SingletonTask, Any, int | None]]) -> None:
    # At exit, after the pool terminated its processes: each request's process is gone.
    for task, context, pid in busy:
        release_for(task, context, "the worker was shut down cold", pid)
