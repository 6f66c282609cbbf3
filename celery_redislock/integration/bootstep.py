"""The worker bootstep that checks the ``redislock_*`` settings before the worker consumes anything."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

from celery import Celery, bootsteps
from celery.exceptions import CeleryCommandException

from ..config.settings import read_settings
from ..errors import RedisLockError
from .lane_drain import drained_queue, stranded_lanes
from .queues import lane_queue
from .runtime import runtime_for
from .task import SingletonTask

__all__ = ["EX_CONFIG", "GateQueues", "SettingsCheck", "check_app", "gate_queues"]

logger = logging.getLogger(__name__)

#: The worker's exit status when the check fails (sysexits.h: "configuration error").
EX_CONFIG = getattr(os, "EX_CONFIG", 78)


class SettingsCheck(bootsteps.Step):
    """Validate the app's lock settings, and each SingletonTask's options for every queue the
    worker consumes, as the worker's blueprint is applied.

    A ``worker_init`` receiver cannot stop a worker (Celery's ``Signal.send`` logs and swallows
    what a receiver raises), nor can a step's ``start`` (``WorkController.start`` logs it with a
    traceback and the pool is already up). A step's ``__init__`` runs inside ``app.Worker(...)``,
    before any step creates a pool or a connection; what it raises leaves the worker command.
    A ``CeleryCommandException`` there is shown by click as one ``Error: ...`` line, and the
    process exits with ``EX_CONFIG``.
    """

    name = "celery_redislock.SettingsCheck"

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        app: Celery = parent.app
        problem = check_app(app, _consumed_queues(app))
        if problem is not None:
            raise CeleryCommandException(
                f"celery_redislock cannot start this worker: {problem}", exit_code=EX_CONFIG
            )


def check_app(app: Celery, queues: Iterable[str]) -> str | None:
    """What is wrong with ``app``'s lock configuration (one line), or None.

    Reads the ``redislock_*`` settings (the Redis URL too: parsed, not connected) and resolves
    the options of every SingletonTask for each of ``queues`` that has options of its own in
    ``redislock_queues``, and for queues that have none, so that a clash between layers
    (``renew_interval`` from one, ``lock_timeout`` from another) shows now, not at the task.
    An app without a SingletonTask is not checked.
    """
    tasks = [task for task in app.tasks.values() if isinstance(task, SingletonTask)]
    if not tasks:
        return None
    try:
        runtime = runtime_for(app)
    except RedisLockError as exc:
        return _one_line(str(exc))
    except ValueError as exc:  # redis-py's URL parser: a port or a query value it cannot read
        # The settings were read before the client's parser failed: reading them again passes.
        setting = read_settings(app.conf).url_setting
        return _one_line(f"{setting}: the Redis URL for the locks cannot be parsed: {exc}")
    layered = [queue for queue in queues if queue in runtime.settings.queues]
    try:
        for task in tasks:
            for queue in [None, *layered]:
                runtime.plan(task, queue)
    except RedisLockError as exc:
        return _one_line(str(exc))
    return None


class GateQueues(bootsteps.Step):
    """Consume the queues a gate adds to those the worker consumes (fair share's lanes of each),
    as the blueprint is applied: after the worker's ``-Q``/``-X`` selection, before its consumer
    declares and consumes them."""

    name = "celery_redislock.GateQueues"

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        app: Celery = parent.app
        selected = app.amqp.queues
        queues = _consumed_queues(app)
        for name in gate_queues(app, queues):
            if name not in selected.consume_from:
                # Declared as the senders declare it (a lane: a copy of its queue's declaration),
                # in app.amqp.queues before the consumer's DelayedDelivery step binds them all.
                try:
                    selected.select_add(lane_queue(selected, name))
                except KeyError:  # undeclared while task_create_missing_queues=False: as -Q does
                    selected.select_add(name)  # type: ignore[arg-type]  # a name, as -Q gives it
        drain_lanes(app, queues)


def drain_lanes(app: Celery, queues: list[str]) -> None:
    """Consume the lanes of ``queues`` that hold calls and that the worker does not consume
    already: calls an earlier release sent with ``fair_key`` or more ``fair_lanes``, which no
    worker of this one would run otherwise. Consumed for the worker's life (an earlier release's
    sender may still send there during a deploy); the count-out and the lock apply to them as to
    any call. The broker unreachable: the worker starts anyway, and a later start drains them."""
    selected = app.amqp.queues
    try:
        found = stranded_lanes(app, queues, set(selected.consume_from))
    except Exception as exc:  # the consumer reports the broker: this must not stop the start
        logger.warning("Could not look for calls left in fair-share lanes of %s: %r", ", ".join(queues), exc)
        return
    for name, messages in found.items():
        logger.warning(
            "Consuming lane %s: %d call(s) wait there, which no fair_lanes of this worker names "
            "(fair_key removed or fair_lanes lowered)",
            name,
            messages,
        )
        selected.select_add(drained_queue(name))


def gate_queues(app: Celery, queues: Iterable[str]) -> list[str]:
    """The queues the gates of ``app``'s SingletonTasks add to ``queues``, in order, once each.
    None when the settings are wrong: ``SettingsCheck`` stops the worker and says why."""
    tasks = [task for task in app.tasks.values() if isinstance(task, SingletonTask)]
    if not tasks:
        return []
    added: dict[str, None] = {}
    try:
        runtime = runtime_for(app)
        for queue in queues:
            for task in tasks:
                plan = runtime.plan(task, queue)
                for gate in plan.gates:
                    consumes = getattr(gate, "consumes", None)
                    if consumes is not None:
                        added.update(dict.fromkeys(consumes(task, plan.options, queue)))
    except (RedisLockError, ValueError):
        return []
    return list(added)


def _consumed_queues(app: Celery) -> list[str]:
    # After the worker's setup_queues: the -Q/-X selection, or every queue when none was made.
    return [str(name) for name in app.amqp.queues.consume_from]


def _one_line(text: str) -> str:
    return " ".join(text.split())
