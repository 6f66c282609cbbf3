"""The kill windows of ``global_rate_limit``'s postponed calls, on real workers SIGKILLed at the
instant a hop is published (just before, or just after): with ``acks_late`` nothing is lost and
the two copies a kill may leave run once; with Celery's early acknowledgement a kill before the
publish loses the call on a prefork pool, as the rate-limit and guarantees pages say (a solo
pool acknowledges only after the call returns: nothing is lost there).

The worker kills itself from Celery's ``before_task_publish`` / ``after_task_publish`` signals,
on the first message carrying the hop header while a one-shot flag is set in the coordination
database: the window is hit on purpose, every run, not by timing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from celery import Celery

from celery_redislock.contrib.testing import WorkerProcess, poll
from celery_redislock.engine.rate_limiter import decide
from celery_redislock.engine.rates import rate_of
from celery_redislock.integration.liveness import process_alive
from celery_redislock.integration.runtime import runtime_for

from .conftest import restore_visible, stats_of
from .mode_harness import ModeTask, node
from .test_rate_limit import partition_key, starts
from .test_rate_postpone import BODY, queued

#: The original message comes back from a Redis broker once unacknowledged this long (the test
#: gives it out again, as the transport does in every consumer); RabbitMQ gives it back as soon
#: as the dead worker's connection closes.
TRANSPORT = {"broker_transport_options": {"visibility_timeout": 4}}

# The worker module's killer: on the first hop published while `flag` is set (taken as it is
# read, so the next worker never dies of it), the whole worker dies: a prefork child kills its
# parent, the worker, then itself. Celery sends an early acknowledgement from the worker's event
# loop: a prefork parent sends it a moment after its child reports the call started, so the
# child waits for it (told by the parent on acked:<task id>) and the kill is in the window, never
# before it; a solo pool's loop is running the body, and acknowledges only after it returns.
KILLER = f"""
import logging
import signal

from billiard.process import current_process
from celery.signals import after_task_publish, before_task_publish
from kombu.message import Message

from celery_redislock.gates.rate_limit import HOP_HEADER

logging.getLogger("celery_redislock.gates").setLevel(logging.DEBUG)
app.conf.update({TRANSPORT!r})

acknowledge = Message.ack


def acknowledge_and_tell(message, multiple=False):
    acknowledge(message, multiple=multiple)
    coord.rpush("acked:" + str((message.headers or {{}}).get("id")), 1)


Message.ack = acknowledge_and_tell


def kill_the_worker(flag, headers):
    if not (headers or {{}}).get(HOP_HEADER) or not coord.delete(flag):
        return
    task_id = headers["id"]
    child = current_process().name != "MainProcess"
    early = not app.tasks[headers["task"]].acks_late
    if child and early and coord.blpop("acked:" + task_id, timeout=30) is None:
        coord.rpush("killed", f"never-acknowledged {{task_id}}")
        return
    coord.rpush("killed", f"{{flag}} {{task_id}} {{os.getpid()}}")
    if child:
        os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


@before_task_publish.connect
def kill_before_publish(headers=None, **kwargs):
    kill_the_worker("kill-before-publish", headers)


@after_task_publish.connect
def kill_after_publish(headers=None, **kwargs):
    kill_the_worker("kill-after-publish", headers)
"""

DROPPED = "Dropped copy of rate-limited rate.kills["


def limited(**options: object) -> ModeTask:
    return ModeTask(
        "rate.kills",
        "account, n",
        BODY,
        {"global_rate_limit": "1/s", "rate_limit_key": ["account"], **options},
    )


def redeliver(app: Celery, urls: dict[str, str]) -> None:
    """Give out again what a dead worker left unacknowledged on a Redis broker (RabbitMQ did as
    its connection closed)."""
    if urls["broker"].startswith("redis"):
        restore_visible(app)


def more_starts(app: Celery, urls: dict[str, str], coord: redis.Redis, count: int) -> bool:
    """Whether more than ``count`` bodies of the partition started (given out again first)."""
    redeliver(app, urls)
    return int(coord.llen("starts:acme")) > count


@dataclass(frozen=True)
class Killed:
    """What a kill at a hop left: the caller's ``app`` and ``sender``, the postponed ``call``'s
    result, and the ``second`` worker started after the kill, named ``name``."""

    app: Celery
    sender: Any
    call: Any
    second: WorkerProcess
    name: str


def killed_at_a_hop(
    task: ModeTask,
    flag: str,
    pool: str,
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> Killed:
    """A call of a partition at 1/s whose next three starts are taken: it is postponed and its
    worker (``pool``) is SIGKILLed at the publish ``flag`` names; then a second worker starts
    (solo: it decides the copies one after the other)."""
    coord.set(flag, 1)
    first = task.start(worker_process, urls, "-c", "1", "-n", node("rate-killed"), pool=pool, module=KILLER)
    app = make_app(**TRANSPORT)
    sender = task.sender(app)
    # The partition's starts are taken here, not by calls of the worker: a call it ran would have
    # its acknowledgement still due when it dies (a solo pool sends it from its event loop). Three
    # of them: the call's slot is more than a second away, so a hop is published on every broker
    # (native delayed delivery carries whole seconds; a shorter wait is waited out in the worker).
    key = partition_key(app, sender, "acme", 1)
    fillers = [
        decide(runtime_for(app).scripts, key, rate_of("1/s"), f"filler{n}", reserve=True) for n in range(3)
    ]
    assert [(filler.allowed, filler.reserved) for filler in fillers] == [
        (True, False),
        (False, True),
        (False, True),
    ]
    call = sender.delay("acme", 1)
    assert poll(lambda: coord.llen("killed") == 1, 30), first.log()[-3000:]
    [death] = [entry.decode().split() for entry in coord.lrange("killed", 0, -1)]
    assert death[:2] == [flag, call.id]
    first.process.wait(10)
    assert poll(lambda: not any(process_alive(pid) for pid in first.children), 10)
    assert "Rate-limited rate.kills[" in first.log()  # it was postponed when it died
    name = node("rate-after")
    second = task.start(worker_process, urls, "-c", "1", "-n", name, pool="solo", module=KILLER)
    return Killed(app, sender, call, second, name)


def test_acks_late_a_kill_after_a_hop_is_published_leaves_two_copies_that_run_once(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # The hop's copy is in the broker and the message it came in is not acknowledged: both come
    # to the second worker. Whichever comes first carries on (runs, or hops again); the other
    # finds the call run, or its slot held by another copy, and is dropped.
    # Solo: a prefork parent consumes the queue while its child publishes, and on a Redis broker
    # kombu pops a message (BRPOP) before it records it as unacknowledged; a parent killed in
    # between loses the hop's copy (one copy is left, which runs once: nothing is lost, but the
    # second copy this test is about would not always exist).
    # On a Redis broker the hop's copy runs at its slot and the original comes back only after
    # the visibility timeout, longer than the 1 s period here (and than most periods, with the
    # default hour), when the log no longer holds that start: it is dropped as a redelivered
    # message whose task id has its result. RabbitMQ gives the original back at once.
    task = limited(acks_late=True)
    killed = killed_at_a_hop(task, "kill-after-publish", "solo", urls, coord, make_app, worker_process)
    app, second, call = killed.app, killed.second, killed.call

    def settled() -> bool:
        redeliver(app, urls)
        # Settled: one copy ran, and the other was dropped (or ran too: the assertions say so).
        copies = DROPPED in second.log() or int(coord.llen("starts:acme")) > 1
        return call.ready() and copies and queued(app) == 0

    assert poll(settled, 60, interval=0.3), second.log()[-3000:]
    assert call.get(timeout=1) == 1
    assert [n for _, n, _, _ in starts(coord, "acme")] == [1], second.log()[-3000:]
    # Two visibility timeouts more: a copy given out again would run, or be postponed again.
    assert not poll(lambda: more_starts(app, urls, coord, 1), 9, interval=0.3)
    log = second.log()
    assert log.count(DROPPED) == 1 and f"{DROPPED}{call.id}]" in log, log[-3000:]
    stats = stats_of(app, killed.name)
    assert stats is not None and stats["counters"]["rate_copies_dropped"] == 1


def test_acks_late_a_kill_before_a_hop_is_published_loses_nothing(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # Nothing was published: the message it came in, never acknowledged, is given out again and
    # carries on with the slot its first decision reserved.
    task = limited(acks_late=True)
    killed = killed_at_a_hop(task, "kill-before-publish", "prefork", urls, coord, make_app, worker_process)
    app, second, call = killed.app, killed.second, killed.call

    def settled() -> bool:
        redeliver(app, urls)
        return call.ready() and queued(app) == 0

    assert poll(settled, 60, interval=0.3), second.log()[-3000:]
    assert call.get(timeout=1) == 1
    assert not poll(lambda: more_starts(app, urls, coord, 1), 9, interval=0.3)
    assert [n for _, n, _, _ in starts(coord, "acme")] == [1]
    assert DROPPED not in second.log()


def test_early_ack_a_kill_before_a_hop_is_published_loses_the_call(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    """Pins the window the rate-limit and guarantees pages document: with Celery's default early
    acknowledgement (a prefork pool), a worker killed between a postponed call's acknowledgement
    and its hop's publish loses the call (its body never runs, its caller waits for nothing), as
    Celery's own ``retry()`` would. A change that closes the window makes this test fail, on
    purpose: the pages then change with it."""
    task = limited()
    killed = killed_at_a_hop(task, "kill-before-publish", "prefork", urls, coord, make_app, worker_process)
    app, call = killed.app, killed.call
    # Everything else drains: a later call of the partition, postponed past the lost call's
    # reserved slot, runs on the second worker.
    later = killed.sender.delay("acme", 2)
    assert later.get(timeout=30) == 2
    assert poll(lambda: queued(app) == 0, 15)
    # Well past the lost call's slot, and past two visibility timeouts: nothing comes back.
    assert not poll(lambda: more_starts(app, urls, coord, 1), 9, interval=0.3)
    assert [n for _, n, _, _ in starts(coord, "acme")] == [2]
    assert call.state == "PENDING"
    assert queued(app) == 0


def test_early_ack_on_a_solo_pool_a_kill_before_a_hop_is_published_loses_nothing(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # Celery sends the early acknowledgement from the worker's event loop, which a solo pool's
    # call is running: the message is acknowledged only after the call returns, so the kill
    # leaves it unacknowledged and it comes back, as with acks_late.
    task = limited()
    killed = killed_at_a_hop(task, "kill-before-publish", "solo", urls, coord, make_app, worker_process)
    app, second, call = killed.app, killed.second, killed.call

    def settled() -> bool:
        redeliver(app, urls)
        return call.ready() and queued(app) == 0

    assert poll(settled, 60, interval=0.3), second.log()[-3000:]
    assert call.get(timeout=1) == 1
    assert not poll(lambda: more_starts(app, urls, coord, 1), 9, interval=0.3)
    assert [n for _, n, _, _ in starts(coord, "acme")] == [1]
