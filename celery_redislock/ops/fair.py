"""Fair share's state from Python and the CLI (``celery redislock fair show``): each tenant's
backlog, lanes and share in each fair queue, and its running calls where a ``fair_cap`` counts
them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from celery import Celery

from ..engine.fair_lanes import FairLanes
from ..engine.keys import fair_load_glob, fair_queue_of
from ..engine.leases import as_text
from ..gates.fair_share import GATE
from ..integration.queues import base_queue
from ..integration.runtime import runtime_for
from ..integration.task import SingletonTask

__all__ = [
    "QueueInfo",
    "TenantInfo",
    "fair_queues",
    "left_in_lanes",
    "reset_fair",
    "running",
    "running_counts",
    "show_fair",
]


@dataclass(frozen=True)
class TenantInfo:
    """One tenant with a backlog in a queue: its calls queued by lane, the part of the starts it
    gets while the backlogs last (``LaneState.share``), and its running calls, counted where its
    task has a ``fair_cap`` (None: no cap counts them)."""

    tenant: str
    backlog: int
    lanes: dict[int, int]
    share: float
    running: int | None


@dataclass(frozen=True)
class QueueInfo:
    """One fair queue: its lanes' backlogs and its tenants with a backlog, largest first."""

    queue: str
    lanes: int
    load: dict[int, int]
    queued: int
    tenants: tuple[TenantInfo, ...]


def fair_queues(app: Celery, queues: Iterable[str] = ()) -> dict[str, int]:
    """The queues whose calls are fair (``queues``, else every queue the app declares and every
    ``redislock_queues`` layer), each with its number of lanes: the most any fair task there says."""
    runtime = runtime_for(app)
    # A lane is no fair queue of its own: a process that sent fair calls has declared its lanes.
    names = list(queues) or [
        name for name in [*app.amqp.queues, *runtime.settings.queues] if base_queue(name) == name
    ]
    tasks = [task for task in app.tasks.values() if isinstance(task, SingletonTask)]
    found: dict[str, int] = {}
    for queue in dict.fromkeys(names):
        for task in tasks:
            plan = runtime.plan(task, queue)
            if GATE in plan.gates:
                found[queue] = max(found.get(queue, 0), len(GATE.consumes(task, plan.options, queue)))
    return found


def left_in_lanes(app: Celery) -> dict[str, int]:
    """Queues with calls counted in their lanes whose tasks are no longer fair here (a release
    removed ``fair_key``: its workers drain the lanes), each with the lanes that hold them."""
    runtime = runtime_for(app)
    prefix = runtime.settings.key_prefix
    found: dict[str, int] = {}
    for batch in runtime.engine.scan_batches(fair_load_glob(prefix)):
        for raw in batch:
            queue = fair_queue_of(prefix, as_text(raw))
            if queue is None:
                continue
            load = FairLanes(runtime.scripts, prefix, queue).state().load
            busy = [lane for lane, count in load.items() if count > 0]
            if busy:
                found[queue] = max(busy) + 1
    return found


def show_fair(app: Celery, queues: Iterable[str] = (), read_running: bool = True) -> list[QueueInfo]:
    """Each fair queue's state now (``fair_queues``, and with no ``queues`` named, those whose
    lanes still hold calls of a release that was fair: ``left_in_lanes``), the calls whose
    expiry passed counted out first (a broker may have dropped them unseen). A few round trips
    per queue, whatever its tenants: their running calls are read in one batch (not at all
    without ``read_running``: each ``running`` is None, for a caller that reads the counts of
    the tenants it shows, ``running_counts``). Raises ``redis.RedisError`` when Redis is
    unreachable."""
    runtime = runtime_for(app)
    prefix = runtime.settings.key_prefix
    shown = fair_queues(app, queues)
    if not queues:
        shown = {**left_in_lanes(app), **shown}
    states = {}
    for queue in shown:
        fair = FairLanes(runtime.scripts, prefix, queue)
        fair.sweep()
        states[queue] = fair.state()
    pairs = [(queue, tenant) for queue, state in states.items() for tenant in state.tenants]
    counts = running_counts(app, pairs) if read_running else dict.fromkeys(pairs)
    infos = []
    for queue, lanes in shown.items():
        state = states[queue]
        tenants = tuple(
            sorted(
                (
                    TenantInfo(
                        tenant,
                        state.backlog(tenant),
                        dict(sorted(state.tenants[tenant].items())),
                        state.share(tenant),
                        counts[queue, tenant],
                    )
                    for tenant in state.tenants
                ),
                key=lambda info: (-info.backlog, info.tenant),
            )
        )
        infos.append(QueueInfo(queue, lanes, dict(sorted(state.load.items())), state.queued, tenants))
    return infos


def running(app: Celery, queue: str, tenant: str) -> int | None:
    """The calls of ``tenant`` running now in the tasks of ``queue`` that cap it; None when none
    of them has a ``fair_cap`` (no count is kept then)."""
    return running_counts(app, [(queue, tenant)])[queue, tenant]


def running_counts(app: Celery, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int | None]:
    """``running`` of each ``(queue, tenant)``, every count read in one batch
    (``SemaphoreEngine.states``: one round trip, one per node on a cluster)."""
    runtime = runtime_for(app)
    tasks = [task for task in app.tasks.values() if isinstance(task, SingletonTask)]
    # A task's options in a queue, once per queue: the tenant only names the key.
    plans = {queue: [(task, runtime.plan(task, queue).options) for task in tasks] for queue, _ in pairs}
    keys_of = {
        (queue, tenant): [
            key
            for task, options in plans[queue]
            if (key := GATE.capped_key(runtime, task, options, tenant)) is not None
        ]
        for queue, tenant in pairs
    }
    states = iter(runtime.semaphores.states([key for keys in keys_of.values() for key in keys]))
    counts: dict[tuple[str, str], int | None] = {}
    for pair, keys in keys_of.items():
        found = [next(states) for _ in keys]
        counts[pair] = sum(len(state.holders) for state in found if state is not None) if keys else None
    return counts


def reset_fair(app: Celery, queue: str) -> bool:
    """Forget ``queue``'s backlog counts (``FairLanes.reset``); False when it had none. For counts
    left behind by messages removed from the broker without running (``celery purge``)."""
    runtime = runtime_for(app)
    return FairLanes(runtime.scripts, runtime.settings.key_prefix, queue).reset()
