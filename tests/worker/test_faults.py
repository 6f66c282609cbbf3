"""Faults on real workers and real redis-servers that the tests stop, start and restart (SPEC 2-4).

Redis outages (the lock Redis alone, or the one Redis that is both broker and lock store), a
Redis restart without persistence under held locks, and the broker's visibility timeout.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator

import pytest
import redis
from celery import Celery

from celery_redislock import DuplicateTaskError
from celery_redislock.contrib.testing import RedisServer

from .conftest import (
    VISIBILITY_TIMEOUT,
    WorkerProcess,
    lock_keys,
    open_gate,
    poll,
    restore_visible,
    stats_of,
    visibility_redelivery,
    wait_redelivered,
    wait_started,
    worker_module,
)

TASKS = """
class Gated(SingletonTask):
    # The first run stops before its lock is taken, after its message was acknowledged, until
    # the test opens gate:<tag>-start: so a test can take Redis down at exactly that point.
    def before_start(self, task_id, args, kwargs):
        if self.request.retries == 0:
            hold(self, args[0] + "-start")


@app.task(base=SingletonTask, bind=True, name="faults.held", lock_timeout=2)
def held(self, tag):
    return hold(self, tag)


@app.task(base=Gated, bind=True, name="faults.gated", retry_countdown=0.5, max_retries=0)
def gated(self, tag):
    coord.rpush("ran:" + tag, self.request.id)
    return "ran " + tag
"""


@pytest.fixture
def durable_server() -> Iterator[RedisServer]:
    """A redis-server of its own that keeps its data across stop/start (append-only file),
    as a production broker does: its queues survive the outage."""
    with RedisServer(extra_args=["--appendonly", "yes", "--appendfsync", "always"]) as server:
        yield server


def test_redis_that_is_broker_and_lock_store_down_when_a_task_starts_loses_nothing(
    urls: dict[str, str],
    durable_server: RedisServer,
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    base = durable_server.url.rsplit("/", 1)[0]
    shared = {**urls, "broker": f"{base}/0", "locks": f"{base}/2"}  # results, coord: elsewhere
    proc = worker_process(worker_module(shared, "faults", TASKS), "-c", "2")
    client = make_app(broker_url=shared["broker"], redislock_url=shared["locks"])
    locks = durable_server.client(db=2)

    holding = client.send_task("faults.held", args=["a"])
    wait_started(coord, "a")
    [key] = lock_keys(locks)
    late = client.send_task("faults.gated", args=["b"])
    wait_started(coord, "b-start")  # acknowledged, lock not yet taken: nothing reserved

    durable_server.stop()
    open_gate(coord, "a")  # "a" ends with Redis down: its release fails, the worker carries on
    release = f"Could not release lock {key.decode()}"
    assert poll(lambda: release in proc.log(), 15), proc.log()
    assert holding.get(timeout=10) == "done a"

    open_gate(coord, "b-start")  # "b" starts with Redis down: re-queued, waiting for the broker
    waiting = f"Could not re-queue faults.gated[{late.id}]: the broker is unreachable"
    # More failed publishes than Celery's default retry policy allows (3) before it drops a task.
    assert poll(lambda: proc.log().count(waiting) >= 5, 60), proc.log()
    assert coord.lrange("ran:b", 0, -1) == []

    durable_server.start()
    assert late.get(timeout=60) == "ran b"  # nothing lost: it ran once Redis was back
    assert coord.lrange("ran:b", 0, -1) == [late.id.encode()]
    assert f"Retrying faults.gated[{late.id}]" in proc.log()
    assert "reject requeue=False" not in proc.log()  # what Celery does when its retry publish fails
    # The lock "a" could not release was kept by Redis's append-only file: its TTL frees it.
    assert poll(lambda: not locks.exists(key), 10)
    assert lock_keys(locks) == []
    assert proc.process.poll() is None
    locks.close()


LATE = f"""
app.conf.broker_transport_options = {{"visibility_timeout": {VISIBILITY_TIMEOUT}}}


@app.task(base=SingletonTask, bind=True, name="faults.late", acks_late=True, lock_timeout=3)
def late(self, tag):
    return hold(self, tag)


@app.task(base=SingletonTask, bind=True, name="faults.late_slots", acks_late=True, lock_timeout=3,
          max_concurrency=3)
def late_slots(self, tag):
    return hold(self, tag)
"""


@visibility_redelivery
def test_a_copy_redelivered_after_the_visibility_timeout_waits_for_the_original(
    urls: dict[str, str],
    redislock_server: RedisServer,
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    proc = worker_process(worker_module(urls, "faults", TASKS + LATE), "-c", "2")
    client = make_app(broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT})
    broker = redislock_server.client(db=0)
    result = client.send_task("faults.late", args=["v"])
    [(_, task_id)] = wait_started(coord, "v")
    [key] = lock_keys(locks)
    holder = locks.get(key)
    assert holder is not None and holder.decode().startswith(f"{task_id}@")
    requeued = (
        f"Re-queued redelivered faults.late[{task_id}] in 1.0s: {key.decode()} "
        f"is held by its other delivery {holder.decode()}"
    )

    wait_redelivered(client, proc, requeued)
    assert proc.log().count(f"Task faults.late[{task_id}] received") >= 2
    assert [tid for _, tid in wait_started(coord, "v")] == [task_id]  # the copy's body never ran
    assert locks.get(key) == holder  # not a re-entry: the original still holds it
    # The caller of the original still waits for its result: the copy stored nothing over it.
    assert result.state == "PENDING"

    open_gate(coord, "v")
    assert result.get(timeout=10) == "done v"
    assert poll(lambda: lock_keys(locks) == [], 5)
    # The re-queued copy comes back, finds the task finished and is dropped, not run again.
    dropped = f"Dropped redelivered faults.late[{task_id}]: it has finished already"
    assert poll(lambda: dropped in proc.log(), 10), proc.log()
    # Acknowledged: nothing unacknowledged or queued is left to give out again.
    assert poll(lambda: broker.hlen("unacked") == 0 and broker.zcard("unacked_index") == 0, 5)
    restore_visible(client)
    assert broker.llen("celery") == 0
    assert len(wait_started(coord, "v")) == 1
    assert result.state == "SUCCESS"
    broker.close()


@visibility_redelivery
def test_a_copy_redelivered_while_its_original_holds_a_slot_does_not_take_another(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # max_concurrency=3 leaves two slots free: the copy must still not run beside its original.
    proc = worker_process(worker_module(urls, "faults", TASKS + LATE), "-c", "2")
    client = make_app(broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT})
    result = client.send_task("faults.late_slots", args=["s"])
    [(_, task_id)] = wait_started(coord, "s")
    [key] = lock_keys(locks)
    [holder] = locks.zrange(key, 0, -1)
    requeued = f"Re-queued redelivered faults.late_slots[{task_id}] in 1.0s: {key.decode()} is held by its other delivery {holder.decode()}"

    wait_redelivered(client, proc, requeued)
    assert [tid for _, tid in wait_started(coord, "s")] == [task_id]  # the copy's body never ran
    assert locks.zrange(key, 0, -1) == [holder]  # one slot: the original's
    assert result.state == "PENDING"
    open_gate(coord, "s")
    assert result.get(timeout=10) == "done s"
    dropped = f"Dropped redelivered faults.late_slots[{task_id}]: it has finished already"
    assert poll(lambda: dropped in proc.log(), 10), proc.log()
    assert len(wait_started(coord, "s")) == 1


@visibility_redelivery
def test_a_message_redelivered_after_its_worker_was_killed_runs_on_another_worker(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # Its lock names the dead worker's node, so the other worker cannot tell it is dead: it must
    # neither run it at once (the holder could be alive) nor drop it (it never finishes).
    source = worker_module(urls, "faults", TASKS + LATE)
    first = worker_process(source, "-c", "1", "-n", "first@test")
    client = make_app(broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT})
    result = client.send_task("faults.late", args=["k"])
    [(child, task_id)] = wait_started(coord, "k")
    [key] = lock_keys(locks)
    # The dead worker's lock is kept from expiring until the copy has come to the other worker:
    # that worker's start can take longer than the lock's 3 s on a busy machine, and the copy
    # would then find it gone and run at once. Persisted before the kill and again after it, in
    # case a last renewal came in between.
    holder = locks.get(key)
    locks.persist(key)
    for pid in [first.pid, child]:
        os.kill(pid, signal.SIGKILL)
    first.process.wait(10)
    assert locks.persist(key) or locks.pttl(key) == -1
    second = worker_process(source, "-c", "1", "-n", "second@test")

    wait_redelivered(client, second, f"Re-queued redelivered faults.late[{task_id}]")
    assert locks.get(key) == holder  # the dead worker's, neither taken over nor deleted
    open_gate(coord, "k")
    locks.pexpire(key, 1000)  # the copy, re-queued meanwhile, runs once the dead worker's lock expires
    assert result.get(timeout=30) == "done k"
    started = wait_started(coord, "k", count=2)
    assert [tid for _, tid in started] == [task_id, task_id]
    assert locks.get(key) is None


def level_of(log: str, message: str) -> str:
    """The level of the worker log line carrying ``message`` (``[time: LEVEL/process] message``)."""
    [line] = [line for line in log.splitlines() if message in line]
    return line.split(": ", 1)[1].split("/", 1)[0]


def seed_dataset(server: RedisServer, db: int, values: dict[str, str]) -> None:
    """Make ``server``'s next start load ``values`` (a dump.rdb in its directory, written by a
    scratch server): what another client wrote there in the instant Redis was back."""
    with RedisServer(workdir=str(server.workdir)) as scratch:
        client = scratch.client(db=db)
        client.mset(values)
        client.save()
        client.close()


def test_a_redis_restart_without_persistence_under_held_locks(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    with RedisServer() as lock_server:
        node = "restart@test"
        proc = worker_process(
            worker_module({**urls, "locks": lock_server.url}, "faults", TASKS), "-c", "3", "-n", node
        )
        client = make_app(redislock_url=lock_server.url)
        locks = lock_server.client()
        kept = client.send_task("faults.held", args=["x"])
        stolen = client.send_task("faults.held", args=["y"])
        started = dict((tid, pid) for pid, tid in wait_started(coord, "x") + wait_started(coord, "y"))
        assert set(started) == {kept.id, stolen.id}
        held = {str(locks.get(key), "utf-8"): key.decode() for key in lock_keys(locks)}
        [(x_holder, x_key)] = [(h, k) for h, k in held.items() if h.startswith(f"{kept.id}@")]
        [(y_holder, y_key)] = [(h, k) for h, k in held.items() if h.startswith(f"{stolen.id}@")]
        before = stats_of(client, node)
        assert before is not None

        # Redis restarts without persistence: both locks are gone, and another client has
        # taken y's key by the time the worker's renewal timer gets to it.
        lock_server.stop()
        seed_dataset(lock_server, 0, {y_key: "intruder"})
        lock_server.start()

        retaken = f"Lock {x_key} was gone (expired, or Redis lost it) while {x_holder} held it: taken back"
        lost = f"Lost lock {y_key} held by {y_holder}: it is now held by intruder"
        assert poll(lambda: retaken in proc.log() and lost in proc.log(), 10), proc.log()
        assert level_of(proc.log(), retaken) == level_of(proc.log(), lost) == "ERROR"
        assert locks.get(x_key) == x_holder.encode() and locks.get(y_key) == b"intruder"

        def counted() -> bool:
            after = stats_of(client, node)
            assert after is not None
            grew = {name: after["counters"][name] - before["counters"][name] for name in ("retaken", "lost")}
            return grew == {"retaken": 1, "lost": 1}

        assert poll(counted, 10)

        # The re-taken lock still guards its task: a duplicate sent now is skipped.
        with pytest.raises(DuplicateTaskError) as caught:
            client.send_task("faults.held", args=["x"]).get(timeout=10)
        assert caught.value.holder == x_holder
        assert len(wait_started(coord, "x")) == 1

        open_gate(coord, "x")
        open_gate(coord, "y")
        assert kept.get(timeout=10) == "done x" and stolen.get(timeout=10) == "done y"
        # x released its lock; y's release leaves the other holder's lock alone (and says so).
        assert poll(lambda: not locks.exists(x_key), 5)
        assert poll(lambda: f"Lock {y_key} was no longer held by {y_holder} at release" in proc.log(), 5)
        assert locks.get(y_key) == b"intruder"
        locks.close()
