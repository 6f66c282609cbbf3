"""``global_rate_limit``: at most N starts per period of a partition across every worker, on real
workers and a real redis-server. A call over the limit is re-queued for its slot (same task id,
arguments and ``request.retries``) and runs once; a worker SIGKILLed mid-drain or a Redis restart
loses nothing; partitions are independent; it composes with a lock per document."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.config.arguments import KeyBuilder
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.gates.rate_limit import rate_key
from celery_redislock.integration.runtime import run_function, runtime_for
from tests.harness import GrantRecorder, collect_requeued_results, most_in_a_window, postponed_calls

from .conftest import poll, restore_visible, stats_of
from .mode_harness import Deployment, ModeTask, Store, node

#: Each body records its start (the host's clock, which is the Redis server's: no round trip
#: between the start and its reading), and who ran it.
BODY = """
import time
coord.rpush("starts:" + account, f"{time.time()!r} {n} {self.request.retries} {self.request.id}")
return n
"""


def call_task(rate: str, **options: Any) -> ModeTask:
    return ModeTask(
        "rate.call",
        "account, n",
        BODY,
        {"global_rate_limit": rate, "rate_limit_key": ["account"], "acks_late": True, **options},
    )


def starts(coord: redis.Redis, account: str) -> list[tuple[float, int, int, str]]:
    """``(server time, n, request.retries, task id)`` of each start of ``account``'s calls."""
    rows = [entry.decode().split() for entry in coord.lrange(f"starts:{account}", 0, -1)]
    return sorted((float(t), int(n), int(r), tid) for t, n, r, tid in rows)


def partition_key(app: Celery, sender: Any, *args: Any) -> str:
    """The Redis key of the log of the partition of ``sender(*args)``, as the workers name it."""
    real = app.tasks[sender.name]
    prefix = runtime_for(app).settings.key_prefix
    builder = KeyBuilder(prefix, real.name, run_function(type(real)), ["account"], option="rate_limit_key")
    return rate_key(builder.key(args, {}, real))


def check_drain(coord: redis.Redis, account: str, calls: int, limit: int, *, grants: list[float]) -> None:
    """Every call ran exactly once, never re-counted as a retry, and no window of 1 s held more
    than ``limit`` starts by the limiter's log: the grants' server times, which is what the limit
    promises. The bodies' own clock reads come later, by however long a loaded machine makes a
    process wait for a core (the rate-limit page says they may show one more); how fully a drain
    uses the limit is the benchmark's figure (benchmarks/rate_limit.py), not a test's."""
    ran = starts(coord, account)
    assert sorted(n for _, n, _, _ in ran) == list(range(calls))
    assert {retries for _, _, retries, _ in ran} == {0}
    assert len(grants) == calls
    assert most_in_a_window(grants, 1.0) <= limit


def test_a_burst_on_two_prefork_workers_never_passes_the_limit(
    deployment: Deployment, coord: redis.Redis, locks: redis.Redis
) -> None:
    task = call_task("20/s")
    names = [node("rate-a"), node("rate-b")]
    procs = [deployment.start(task, "-c", "2", "-n", name) for name in names]
    app = deployment.app()
    sender = task.sender(app)
    record = GrantRecorder(locks, partition_key(app, sender, "acme", 0))
    results = [sender.delay("acme", n) for n in range(200)]
    assert sorted(result.get(timeout=60) for result in results) == list(range(200))
    check_drain(coord, "acme", 200, 20, grants=record.stop())
    logs = "".join(proc.log() for proc in procs)
    # How many were postponed depends on how fast the workers decide (one decided after the
    # window has room again starts at once): some were, each with one line, each counted.
    postponed = logs.count("Rate-limited rate.call[")
    assert postponed > 0
    counted = 0
    for name in names:
        stats = stats_of(app, name)
        assert stats is not None
        counted += stats["counters"]["rate_limited"]
    assert counted == postponed


def test_partitions_are_independent(deployment: Deployment, coord: redis.Redis, locks: redis.Redis) -> None:
    task = call_task("5/s")
    deployment.start(task, "-c", "2", "-n", node("rate-parts"))
    app = deployment.app()
    sender = task.sender(app)
    records = {account: GrantRecorder(locks, partition_key(app, sender, account, 0)) for account in "ab"}
    results = [sender.delay(account, n) for n in range(15) for account in "ab"]
    assert sorted(result.get(timeout=30) for result in results) == sorted(list(range(15)) * 2)
    grants = {account: records[account].stop() for account in "ab"}
    for account in "ab":  # each log holds its own account's 15 starts, 5 a second at most
        check_drain(coord, account, 15, 5, grants=grants[account])
    # Side by side, not one account's drain after the other's: by its limit each drain lasts
    # two seconds at least, and each began before the other ended (by the server's clock).
    assert max(grants["a"][0], grants["b"][0]) < min(grants["a"][-1], grants["b"][-1])


@pytest.mark.redis_broker("redelivery of an unacknowledged message after the visibility timeout")
def test_a_worker_killed_mid_drain_loses_nothing(deployment: Deployment, coord: redis.Redis) -> None:
    task = call_task("20/s")
    doomed = deployment.start(task, "-c", "2", "-n", node("rate-doomed"))
    deployment.start(task, "-c", "2", "-n", node("rate-kept"))
    app = deployment.app(broker_transport_options={"visibility_timeout": 1})
    sender = task.sender(app)
    results = [sender.delay("acme", n) for n in range(100)]
    assert poll(lambda: coord.llen("starts:acme") >= 40, 60)
    # The doomed worker holds re-published calls waiting for their slots, unacknowledged.
    for pid in [*doomed.child_pids(), doomed.pid]:
        os.kill(pid, signal.SIGKILL)
    doomed.process.wait(10)

    def all_done() -> bool:
        restore_visible(app)
        return all(result.ready() for result in results)

    # A deadline, not a speed: 100 calls at 20/s on one -c 2 worker, on a machine maybe loaded.
    assert poll(all_done, 120, interval=0.3)
    assert sorted(result.get(timeout=1) for result in results) == list(range(100))
    assert {n for _, n, _, _ in starts(coord, "acme")} == set(range(100))


def test_a_redis_restart_mid_drain_loses_nothing(
    deployment: Deployment, coord: redis.Redis, lock_server: RedisServer
) -> None:
    task = call_task("20/s", retry_countdown=0.3)
    deployment = deployment.with_locks(lock_server.url)
    proc = deployment.start(task, "-c", "2", "-n", node("rate-restart"))
    app = deployment.app()
    sender = task.sender(app)
    results = [sender.delay("acme", n) for n in range(60)]
    assert poll(lambda: coord.llen("starts:acme") >= 25, 20)
    lock_server.stop()
    assert poll(lambda: "Retrying rate.call[" in proc.log(), 20), proc.log()[-3000:]
    lock_server.start()  # without persistence: the partition's log is gone
    assert sorted(result.get(timeout=40) for result in results) == list(range(60))
    ran = starts(coord, "acme")
    assert sorted(n for _, n, _, _ in ran) == list(range(60))


@pytest.mark.parametrize(
    ("pool", "kind"),
    [("threads", "single"), ("solo", "single"), ("gevent", "single"), ("threads", "cluster")],
)
def test_on_every_pool_and_on_a_cluster(pool: str, kind: str, store: Store, coord: redis.Redis) -> None:
    task = call_task("10/s")
    store.deployment.start(task, "-c", "2", "-n", node(f"rate-{pool}"), pool=pool)
    app = store.deployment.app()
    sender = task.sender(app)
    record = GrantRecorder(store.client, partition_key(app, sender, "acme", 0))
    results = [sender.delay("acme", n) for n in range(30)]
    assert sorted(result.get(timeout=30) for result in results) == list(range(30))
    check_drain(coord, "acme", 30, 10, grants=record.stop())


#: One at a time per document (its lock), at most 10 a second per account (the rate limit).
DOCUMENT = ModeTask(
    "rate.document",
    "account, document, n",
    """
    import time
    coord.rpush("starts:" + account, f"{time.time()!r} {n} {self.request.retries} {self.request.id}")
    if coord.incr("inside:" + document) > 1:
        coord.rpush("overlaps", document)
    coord.blpop("never", timeout=0.05)  # a body that takes a while
    coord.decr("inside:" + document)
    return n
    """,
    {
        "global_rate_limit": "10/s",
        "rate_limit_key": ["account"],
        "lock_key": ["document"],
        "on_duplicate": "retry",
        "retry_countdown": 0.1,
        "max_retries": None,
    },
)


def test_one_at_a_time_per_document_and_n_a_second_per_account(
    deployment: Deployment, coord: redis.Redis, locks: redis.Redis
) -> None:
    for name in ("rate-doc-a", "rate-doc-b"):
        deployment.start(DOCUMENT, "-c", "2", "-n", node(name))
    app = deployment.app()
    sender = DOCUMENT.sender(app)
    record = GrantRecorder(locks, partition_key(app, sender, "acme", "doc0", 0))
    results = [sender.delay("acme", f"doc{n % 4}", n) for n in range(40)]
    assert sorted(result.get(timeout=40) for result in results) == list(range(40))
    assert coord.llen("overlaps") == 0
    ran = starts(coord, "acme")
    assert sorted(n for _, n, _, _ in ran) == list(range(40))
    # A call refused by its document's lock was admitted and counted: the limit holds over both,
    # by the limiter's log (the bodies' clock reads come later, by a loaded machine's delays).
    grants = record.stop()
    assert len(grants) >= 40 and most_in_a_window(grants, 1.0) <= 10


def test_a_postponed_call_sends_task_rate_limited_and_is_logged(
    make_app: Callable[..., Celery], worker: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    ran, postponed, results = postponed_calls(make_app(), worker, "rate.signalled", global_rate_limit="2/s")
    assert len(postponed) >= 2 and {p["sender"] for p in postponed} == {"rate.signalled"}
    assert {p["rate"] for p in postponed} == {"2/s"} and all(p["wait"] > 0.3 for p in postponed)
    assert {p["task_id"] for p in postponed} <= {result.id for result in results}
    assert all(p["key"].endswith(":rate") for p in postponed)
    lines = [r for r in caplog.records if r.getMessage().startswith("Rate-limited rate.signalled[")]
    assert len(lines) == len(postponed) and {r.levelname for r in lines} == {"INFO"}
    assert sorted(ran) == [0, 1, 2, 3]
    collect_requeued_results()


def test_eager_calls_wait_for_their_slot_in_the_caller(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    app = make_app(task_always_eager=True)
    started: list[float] = []

    @app.task(base=SingletonTask, shared=False, name="rate.eager", global_rate_limit="2/s")
    def eager(n: int) -> int:
        seconds, micros = locks.time()  # the server's clock, which the limit's slots are on
        started.append(seconds + micros / 1e6)
        return n

    assert [eager.delay(n).get() for n in range(3)] == [0, 1, 2]
    # The third waited in the caller for the window of the first to pass (not an error, not a skip).
    assert started[2] - started[0] > 0.9, started


def test_a_call_that_would_expire_before_its_slot_ends_revoked(
    make_app: Callable[..., Celery],
    worker: Callable[..., Any],
    locks: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, name="rate.expiring", global_rate_limit="1/m")
    def expiring(n: int) -> int:
        return n

    with worker(app, pool="threads", concurrency=2):
        assert expiring.delay(0).get(timeout=20) == 0
        late = expiring.apply_async((1,), expires=30)  # its slot is a minute away
        assert poll(lambda: late.state == "REVOKED", 20), late.state
    assert any("expires before its slot" in r.getMessage() for r in caplog.records)
    # Its reserved slot was given back: the log holds the one start only.
    [log] = [key for key in locks.scan_iter("*") if key.endswith(b":rate")]
    assert [m for m in locks.zrange(log, 0, -1) if m.startswith(b"r:")] == []
    collect_requeued_results()
