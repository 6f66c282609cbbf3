"""Fair share's faults on real workers: a worker SIGKILLed mid-drain, and the lock Redis (which
holds the lanes' backlogs) flushed or restarted mid-drain, lose no call and complete none twice.

Each body records its completion by task id in the coordination database, on the session's
redis-server (which no test here stops), so a call run twice, or never, shows there. The calls
are ``acks_late``: a call killed mid-body is given out again (Celery's early acknowledgement
would drop it with the worker, fair share or not).
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll
from celery_redislock.engine.keys import fair_keys
from celery_redislock.gates.fair_share import GATE
from celery_redislock.integration.liveness import process_alive
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.ops.fair import reset_fair

from .conftest import restore_visible, stats_of
from .mode_harness import Deployment, ModeTask, node

#: Held while ``hold`` is set, before it does anything (so a kill then leaves nothing half
#: done); then its completion, by task id.
BODY = """
if coord.get("hold"):
    coord.rpush("held", self.request.id)
    coord.blpop("never-opened", timeout=60)
coord.rpush("ran", f"{tenant} {n} {self.request.id}")
return n
"""

# The worker module's record of each acknowledgement, after it is sent: the test kills a worker
# only once every call that completed there is acknowledged (else it would come back, and run
# again: acks_late's window, not fair share's).
ACKS = """
from kombu.message import Message

acknowledge = Message.ack


def acknowledge_and_tell(message, multiple=False):
    acknowledge(message, multiple=multiple)
    coord.rpush("acked", str((message.headers or {}).get("id")))


Message.ack = acknowledge_and_tell
"""

# Each fair ticket the worker receives, recorded after fair share buffered it.
RECEIPTS = """
from celery.signals import task_received


@task_received.connect(weak=False)
def record_ticket(request=None, **_):
    fair = (request.request_dict or {}).get("redislock_fair")
    if fair and fair[2]:
        coord.rpush("tickets", fair[2])
"""

# The worker's count-out held back: every ticket it receives stays buffered until its shutdown.
HELD = """
from celery_redislock.engine import fair_countout

fair_countout.FLUSH_DELAY = 3600.0
"""

FLOOD, FEW = 120, 20
#: The Redis transport gives out again what a dead worker left unacknowledged after this long.
TRANSPORT = {"broker_transport_options": {"visibility_timeout": 2}}


def fair(**options: Any) -> ModeTask:
    return ModeTask(
        "fair.faults",
        "tenant, n",
        BODY,
        {"fair_key": ["tenant"], "fair_lanes": 4, "acks_late": True, **options},
    )


def calls() -> list[tuple[str, int]]:
    return [("A", n) for n in range(FLOOD)] + [("B", n) for n in range(FEW)]


def ran(coord: redis.Redis) -> Counter[tuple[str, int]]:
    """How often each call completed."""
    rows = (entry.decode().split() for entry in coord.lrange("ran", 0, -1))
    return Counter((tenant, int(n)) for tenant, n, _ in rows)


def redeliver(app: Celery, urls: dict[str, str]) -> None:
    """Give out again what a dead worker left unacknowledged, before another worker starts: on a
    Redis broker once it has been so for the visibility timeout (as the transport does in every
    consumer), so that no message the next worker holds is given out twice; RabbitMQ does as
    the dead worker's connection closes."""
    if not urls["broker"].startswith("redis"):
        return
    client = app.connection_for_write().default_channel.client

    def restored() -> bool:
        restore_visible(app)
        return not client.hlen("unacked")

    assert poll(restored, 30, interval=0.2)


def drained(results: list[Any], proc: WorkerProcess) -> list[int]:
    """Every call's result, once each is stored (polled)."""
    ready = poll(lambda: all(result.ready() for result in results), 120, interval=0.2)
    assert ready, f"{sum(r.ready() for r in results)} of {len(results)} done:\n{proc.log()[-3000:]}"
    return sorted(result.get(timeout=1) for result in results)


def backlogs(app: Celery, client: redis.Redis, queue: str = "celery") -> list[dict[bytes, bytes]]:
    """The lanes' backlogs of ``queue`` as the lock Redis counts them: each lane's, each
    tenant's, and each queued call's (all empty once every call started)."""
    return [client.hgetall(key) for key in fair_keys(runtime_for(app).settings.key_prefix, queue)]


@pytest.mark.parametrize("count_out", ["flushed", "held"])
def test_a_worker_killed_mid_drain_loses_nothing_and_completes_nothing_twice(
    count_out: str, deployment: Deployment, coord: redis.Redis, locks: redis.Redis
) -> None:
    """``flushed``: killed once the worker counted out every call it received. ``held``: killed
    with every ticket it received still buffered (its count-out held back): a call given out
    again is counted out by its next receipt, one it acknowledged stays counted until reset."""
    task = fair()
    app = deployment.app(**TRANSPORT)
    sender = task.sender(app)
    results = [sender.delay(*call) for call in calls()]
    module = ACKS + RECEIPTS + (HELD if count_out == "held" else "")
    doomed = deployment.start(
        task, "-c", "2", "--prefetch-multiplier", "2", "-n", node("fair-doomed"), module=module
    )
    assert poll(lambda: coord.llen("ran") >= 30, 60), doomed.log()[-3000:]
    coord.set("hold", 1)
    # Both processes held at a body's start, every call completed there acknowledged, and on a
    # Redis broker its prefetch full (so no message is between the broker and its books).
    assert poll(lambda: coord.llen("held") >= 2, 30), doomed.log()[-3000:]
    calls_key = fair_keys(runtime_for(app).settings.key_prefix, "celery")[2]

    def settled() -> bool:
        done = {entry.decode().split()[2] for entry in coord.lrange("ran", 0, -1)}
        acked = {entry.decode() for entry in coord.lrange("acked", 0, -1)}
        full = (
            not deployment.urls["broker"].startswith("redis")
            or app.connection_for_write().default_channel.client.hlen("unacked") >= 4
        )
        received = coord.lrange("tickets", 0, -1)
        counted_out = count_out == "held" or not any(locks.hmget(calls_key, received) if received else ())
        return done <= acked and full and counted_out

    assert poll(settled, 30), doomed.log()[-3000:]
    pool = doomed.child_pids()
    for pid in [*pool, doomed.pid]:
        os.kill(pid, signal.SIGKILL)
    doomed.process.wait(10)
    assert poll(lambda: not any(process_alive(pid) for pid in pool), 10)
    held = [entry.decode() for entry in coord.lrange("held", 0, -1)]
    acknowledged = coord.llen("ran")  # completed there, so acknowledged: never given out again
    coord.delete("hold")
    redeliver(app, deployment.urls)
    kept = deployment.start(task, "-c", "2", "-n", node("fair-kept"))
    assert drained(results, kept) == sorted(n for _, n in calls())
    assert ran(coord) == Counter(calls())  # every call completed, once
    completed = [entry.decode().split()[2] for entry in coord.lrange("ran", 0, -1)]
    assert set(held) <= set(completed)  # the calls killed at their start ran on the second worker
    if count_out == "flushed":
        # Each call counted out of its backlog once, the redelivered ones too: nothing left.
        assert poll(lambda: backlogs(app, locks) == [{}, {}, {}], 15), backlogs(app, locks)
        return
    # The kill lost the doomed worker's buffer: what was given out again was counted out as the
    # second worker received it; what it had completed (acknowledged) stays counted, no more.
    assert poll(lambda: locks.hlen(calls_key) == acknowledged, 15), (locks.hlen(calls_key), acknowledged)
    assert reset_fair(app, "celery")
    assert backlogs(app, locks) == [{}, {}, {}]


def test_a_worker_shut_down_counts_out_what_it_received(
    deployment: Deployment, coord: redis.Redis, locks: redis.Redis
) -> None:
    # Seen red with the worker_shutdown receiver left out: all 30 stayed counted.
    task = fair()
    app = deployment.app()
    sender = task.sender(app)
    results = [sender.delay("A", n) for n in range(30)]
    proc = deployment.start(task, "-c", "2", "-n", node("fair-warm"), module=HELD)
    assert drained(results, proc) == list(range(30))
    assert locks.hlen(fair_keys(runtime_for(app).settings.key_prefix, "celery")[2]) == 30  # all buffered
    proc.stop()  # a warm shutdown
    assert proc.process.returncode == 0, proc.log()[-3000:]
    assert backlogs(app, locks) == [{}, {}, {}]


@pytest.mark.parametrize("fault", ["flush", "restart"])
def test_a_lock_redis_flushed_or_restarted_mid_drain_loses_nothing_and_completes_nothing_twice(
    fault: str, deployment: Deployment, coord: redis.Redis, lock_server: RedisServer
) -> None:
    task = fair(retry_countdown=0.3)
    deployment = deployment.with_locks(lock_server.url)
    app = deployment.app()
    sender = task.sender(app)
    results = [sender.delay(*call) for call in calls()]
    proc = deployment.start(task, "-c", "2", "-n", node(f"fair-{fault}"))
    assert poll(lambda: coord.llen("ran") >= 30, 60), proc.log()[-3000:]
    if fault == "flush":
        with lock_server.client() as client:
            client.flushall()  # every backlog count and lane assignment gone
    else:
        lock_server.stop()
        # Sent while the lanes' Redis is away: to a hashed lane, not lost.
        results += [sender.delay("C", n) for n in range(5)]
        assert poll(lambda: "Retrying fair.faults[" in proc.log(), 30), proc.log()[-3000:]
        lock_server.start()  # without persistence: empty
    late = [sender.delay("D", n) for n in range(5)]  # assigned again, from nothing
    expected = Counter(calls()) + Counter([("D", n) for n in range(5)])
    if fault == "restart":
        expected += Counter([("C", n) for n in range(5)])

    assert drained(results + late, proc) == sorted(n for _, n in expected.elements())
    assert ran(coord) == expected
    with lock_server.client() as client:
        loads = client.hgetall(fair_keys(runtime_for(app).settings.key_prefix, "celery")[0])
    assert all(int(load) >= 0 for load in loads.values()), loads  # never counted out twice


#: A capped call: held at its start (its slot taken) on the worker named in ``holding``;
#: elsewhere it counts how many of its tenant run at once, then completes.
CAPPED_BODY = """
if coord.sismember("holding", self.request.hostname):
    coord.rpush("held", f"{tenant} {self.request.id}")
    coord.blpop("never-opened", timeout=60)
running = coord.incr("running:" + tenant)
coord.rpush("peaks:" + tenant, running)
coord.rpush("ran", f"{tenant} {n} {self.request.id}")
coord.decr("running:" + tenant)
return n
"""


def test_a_worker_killed_holding_cap_slots_loses_nothing_and_its_slots_come_back(
    deployment: Deployment, coord: redis.Redis, locks: redis.Redis
) -> None:
    # A short lock_timeout: the TTL of a cap slot whose holder stopped renewing it.
    task = ModeTask(
        "fair.capkill",
        "tenant, n",
        CAPPED_BODY,
        {"fair_key": ["tenant"], "fair_lanes": 4, "fair_cap": 1, "acks_late": True, "lock_timeout": 4},
    )
    app = deployment.app(broker_transport_options={"visibility_timeout": 10})
    sender = task.sender(app)
    doomed_name = node("cap-doomed")
    coord.sadd("holding", doomed_name)
    # Its prefetch (2) full with one call of each tenant, both held with their tenant's slot.
    doomed = deployment.start(task, "-c", "2", "--prefetch-multiplier", "1", "-n", doomed_name)
    first = [sender.delay("A", 0), sender.delay("B", 0)]
    assert poll(lambda: coord.llen("held") == 2, 30), doomed.log()[-3000:]
    later = [("A", n) for n in range(1, 10)] + [("B", n) for n in range(1, 5)]
    results = first + [sender.delay(*call) for call in later]
    kept_name = node("cap-kept")
    kept = deployment.start(task, "-c", "2", "-n", kept_name)
    runtime = runtime_for(app)
    real = app.tasks[task.name]
    options = runtime.plan(real, None).options
    slots = {tenant: GATE.cap_key(runtime, real, options, tenant) for tenant in "AB"}

    def capped_on_kept() -> int:
        stats = stats_of(app, kept_name)
        return int(stats["counters"]["fair_capped"]) if stats else 0

    # The other worker alive: while the doomed holds both slots, its calls wait over the cap.
    assert poll(lambda: capped_on_kept() > 0, 30), kept.log()[-3000:]
    assert coord.llen("ran") == 0
    for slot in slots.values():
        assert len(runtime.semaphores.holders(slot)) == 1
    pool = doomed.child_pids()
    for pid in [*pool, doomed.pid]:
        os.kill(pid, signal.SIGKILL)
    doomed.process.wait(10)
    assert poll(lambda: not any(process_alive(pid) for pid in pool), 10)
    held = [entry.decode().split()[1] for entry in coord.lrange("held", 0, -1)]

    def done() -> bool:
        if deployment.urls["broker"].startswith("redis"):  # the dead worker's two given out again
            restore_visible(app)
        return all(result.ready() for result in results)

    # The dead holder's slots expire (nothing renews them), then each tenant's calls run.
    assert poll(done, 120, interval=0.2), kept.log()[-3000:]
    calls = [("A", 0), ("B", 0), *later]
    assert sorted(result.get(timeout=1) for result in results) == sorted(n for _, n in calls)
    assert ran(coord) == Counter(calls)  # every call completed, once
    completed = {entry.decode().split()[2] for entry in coord.lrange("ran", 0, -1)}
    assert set(held) <= completed  # the calls killed holding the slots ran on the other worker
    for tenant in "AB":  # one at a time, the cap, before the kill and after it
        assert {int(peak) for peak in coord.lrange(f"peaks:{tenant}", 0, -1)} == {1}
    # Every slot given back, every call counted out of its backlog once: no count below zero.
    assert poll(lambda: all(not runtime.semaphores.holders(slot) for slot in slots.values()), 15)
    assert poll(lambda: backlogs(app, locks) == [{}, {}, {}], 15), backlogs(app, locks)


#: The first call of a tenant holds its slot until its process is killed; each start is recorded
#: with its pid and the server's clock (the lock Redis's: one redis-server).
CHILD_BODY = """
seconds, micros = coord.time()
coord.rpush("starts", f"{n} {os.getpid()} {seconds * 1000 + micros / 1000}")
if n == 0:
    coord.blpop("never-opened", timeout=120)
return n
"""


@pytest.mark.parametrize("lock", [True, False])
def test_a_child_killed_holding_its_tenants_cap_slot_gives_it_back_at_its_exit(
    lock: bool, deployment: Deployment, coord: redis.Redis, locks: redis.Redis
) -> None:
    # Issue 50 (4a): the parent frees a dead child's cap slot as it frees its lock, so the
    # tenant's next call starts well before the slot's TTL (lock_timeout) would have freed it.
    # Seen red before: the next call started only as the slot expired.
    task = ModeTask(
        "fair.capchild",
        "tenant, n",
        CHILD_BODY,
        {"fair_key": ["tenant"], "fair_lanes": 4, "fair_cap": 1, "lock_timeout": 30, "lock": lock},
    )
    app = deployment.app()
    sender = task.sender(app)
    proc = deployment.start(task, "-c", "2", "-n", node("cap-child"))
    first = sender.delay("A", 0)
    assert poll(lambda: coord.llen("starts") == 1, 30), proc.log()[-3000:]
    pid = int(coord.lrange("starts", 0, 0)[0].split()[1])
    runtime = runtime_for(app)
    real = app.tasks[task.name]
    slot = GATE.cap_key(runtime, real, runtime.plan(real, None).options, "A")
    second = sender.delay("A", 1)
    assert poll(lambda: f"Capped fair.capchild[{second.id}]" in proc.log(), 30), proc.log()[-3000:]
    state = runtime.semaphores.state(slot)
    assert state is not None
    [(holder, left_ms)] = state.holders
    assert holder.startswith(f"{first.id}@") and f":{pid}:" in holder, holder
    # When the TTL would free it at the earliest: renewals only move it later.
    expires_ms = server_ms(locks) + left_ms
    os.kill(pid, signal.SIGKILL)
    assert second.get(timeout=60) == 1, proc.log()[-3000:]
    starts = {
        n: float(ms) for n, _, ms in (entry.decode().split() for entry in coord.lrange("starts", 0, -1))
    }
    assert starts["1"] < expires_ms, (starts["1"] - expires_ms, proc.log()[-3000:])
    error = first.get(timeout=15, propagate=False)
    assert type(error).__name__ == "WorkerLostError", error
    assert f"Gave back fair_cap slot {slot} of fair.capchild[{first.id}]" in proc.log(), proc.log()[-3000:]
    assert poll(lambda: not runtime.semaphores.holders(slot), 15)


def server_ms(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return float(seconds * 1000 + micros / 1000)
