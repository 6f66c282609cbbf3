"""``debounce=SECONDS`` (``debounce_max``): a burst of calls of one key runs once, with the last
call's arguments, on real prefork workers and a real redis-server."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import DuplicateTaskError, SingletonTask
from celery_redislock.contrib.testing import RedisServer

from .conftest import (
    WorkerProcess,
    open_gate,
    poll,
    registration_error,
    stats_of,
    wait_started,
    worker_module,
)
from .mode_harness import ModeTask

NAME = "debounce.index"

INDEX = ModeTask(
    NAME,
    "doc, version",
    """
    import time

    coord.rpush("ran:" + str(doc), f"{version} {time.time()}")
    return version
    """,
    {"lock_key": ["doc"], "retry_countdown": 0.2},
)


def start(
    worker_process: Callable[..., WorkerProcess], urls: dict[str, str], node: str, debounce: float, most: Any
) -> WorkerProcess:
    task = INDEX.with_options(debounce=debounce, debounce_max=most)
    return task.start(worker_process, urls, "-c", "2", "-n", node)


def sender(app: Celery, debounce: float, most: float | None = None) -> Any:
    return INDEX.with_options(debounce=debounce, debounce_max=most).sender(app)


def latest_of(locks: redis.Redis) -> str:
    [key] = list(locks.scan_iter("{redislock:*}:debounce"))
    value = locks.get(key)
    assert value is not None
    return value.decode()


def test_a_burst_runs_once_with_the_last_call_s_arguments(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    node = f"debounce-{uuid.uuid4().hex[:8]}@test"
    proc = start(worker_process, urls, node, 1.5, None)
    app = make_app()
    task = sender(app, 1.5)
    with ThreadPoolExecutor(4) as pool:
        burst = list(pool.map(lambda v: task.delay(1, v), range(11)))
    # The burst's last call, sent alone: its moment is known before it is sent, however long
    # the host takes to return from it.
    sent = time.time()
    burst.append(task.delay(1, 11))
    latest = latest_of(locks)  # the call recorded last is the one that runs
    version = next(v for v, r in enumerate(burst) if r.id == latest)
    assert next(r for r in burst if r.id == latest).get(timeout=15) == version
    for result in burst:
        if result.id != latest:
            error = result.get(timeout=15, propagate=False)
            assert isinstance(error, DuplicateTaskError), error
            assert error.holder_task_id == latest  # names the call that superseded it
            assert f"Skipped duplicate {NAME}[{result.id}]" in proc.log()
    [ran] = coord.lrange("ran:1", 0, -1)
    ran_version, ran_at = ran.decode().split()
    assert int(ran_version) == version
    assert float(ran_at) >= sent + 1.5 - 0.05  # SECONDS after the last call, not before
    stats = stats_of(app, node)
    assert stats is not None and stats["counters"]["debounced"] == len(burst) - 1, stats
    # The burst is over: the next call starts a new one, and runs.
    assert task.delay(1, 99).get(timeout=15) == 99


def test_debounce_max_runs_a_steady_stream_before_it_ends(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    start(worker_process, urls, f"debounce-{uuid.uuid4().hex[:8]}@test", 1, 2)
    task = sender(make_app(), 1, 2)
    began = time.time()
    results = []
    # A call every 0.25 s for 5 s: a plain debounce of 1 s would never run before the stream ends.
    while time.time() - began < 5:
        results.append(task.delay(2, len(results)))
        time.sleep(0.25)  # the stream's pace, not a synchronisation
    ended = time.time()
    assert poll(lambda: coord.llen("ran:2") >= 1, 10)
    first_run = float(coord.lindex("ran:2", 0).decode().split()[1])  # type: ignore[union-attr]
    # It ran while the stream still went on (a plain debounce runs only once calls stop): how
    # soon after the first call is the load's business (the server cuts each call's delay).
    assert first_run < ended, "debounce_max did not bound the burst"
    last = results[-1]
    assert last.get(timeout=15) == len(results) - 1  # and the stream's last call still runs


@pytest.mark.parametrize(
    ("options", "name", "other"),
    [
        ({"debounce": 2, "lock_on": "enqueue"}, "debounce", "lock_on"),
        ({"debounce": 2, "throttle": 5}, "debounce", "throttle"),
        ({"debounce": 2, "keep_latest": True}, "debounce", "keep_latest"),
        ({"debounce": 2, "max_concurrency": 2}, "debounce", "max_concurrency"),
        ({"debounce": 2, "lock_until": "started"}, "debounce", "lock_until"),
        ({"debounce": 2, "on_duplicate": "raise"}, "debounce", "on_duplicate"),
        ({"debounce": 2, "debounce_max": 1}, "debounce_max", "debounce"),
    ],
)
def test_debounce_clashes_are_refused_at_registration(
    options: dict[str, Any], name: str, other: str, make_app: Callable[..., Celery]
) -> None:
    error = registration_error(make_app(), "debounce.bad", **options)
    assert f"option {name!r}" in str(error) and other in str(error)


HOLD_TASK = """
@app.task(base=SingletonTask, bind=True, name="debounce.hold", debounce=0.5, lock_key=["doc"])
def held(self, doc, version):
    coord.rpush("ran:hold", version)
    return hold(self, "hold")
"""


def test_a_child_killed_mid_run_leaves_nothing_stuck(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    proc = worker_process(worker_module(urls, "debounce_hold", HOLD_TASK), "-c", "2")
    app = make_app()

    @app.task(base=SingletonTask, shared=False, name="debounce.hold", debounce=0.5, lock_key=["doc"])
    def held(doc: int, version: int) -> None:
        raise AssertionError("runs in the worker only")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda v: held.delay(5, v), range(8)))
    [(pid, _)] = wait_started(coord, "hold")
    os.kill(pid, signal.SIGKILL)
    assert poll(lambda: "its worker process died" in proc.log(), 15), proc.log()
    # The parent freed the lock; the burst was over when its run started: the next call runs.
    open_gate(coord, "hold", times=2)
    assert held.delay(5, 99).get(timeout=15) == "done hold"
    assert coord.lrange("ran:hold", 0, -1)[-1] == b"99"
    assert coord.llen("ran:hold") == 2  # the burst's one run (killed), then the new call's


def test_a_redis_restart_loses_no_call_and_debounces_again(
    urls: dict[str, str],
    coord: redis.Redis,
    lock_server: RedisServer,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
    caplog: pytest.LogCaptureFixture,
) -> None:
    own = {**urls, "locks": lock_server.url}
    proc = start(worker_process, own, f"debounce-{uuid.uuid4().hex[:8]}@test", 1.5, None)
    task = sender(make_app(redislock_url=lock_server.url), 1.5)
    burst = [task.delay(6, v) for v in range(3)]  # recorded, due in 1.5 s
    lock_server.stop()  # the record of the burst is lost with it
    assert coord.llen("ran:6") == 0
    late = task.delay(6, 3)  # cannot be recorded: sent with the full delay
    assert f"Sending {NAME}[{late.id}] undebounced" in caplog.text
    calls = [*burst, late]
    # Due while Redis is down: each follows on_redis_error="retry", none runs unchecked.
    assert poll(lambda: all(f"Retrying {NAME}[{r.id}]" in proc.log() for r in calls), 15), proc.log()
    assert coord.llen("ran:6") == 0
    lock_server.start()  # empty
    # Nobody knows which call was the burst's last: each runs, once (more runs, none lost).
    assert [r.get(timeout=15) for r in calls] == [0, 1, 2, 3]
    assert sorted(int(entry.split()[0]) for entry in coord.lrange("ran:6", 0, -1)) == [0, 1, 2, 3]
    # A burst after the restart is debounced again: one run, the last call's.
    again = [task.delay(6, v) for v in range(10, 13)]
    assert again[-1].get(timeout=15) == 12
    for result in again[:-1]:
        error = result.get(timeout=15, propagate=False)
        assert isinstance(error, DuplicateTaskError), error
        assert error.holder_task_id == again[-1].id
    assert coord.llen("ran:6") == 5


# Due calls of a new burst find the previous burst's run holding the key: retried every 0.1 s,
# so Celery's default max_retries (3) is spent long before the test opens the gate.
WAIT_TASKS = """
@app.task(base=SingletonTask, bind=True, name="debounce.slow", debounce=0.2, lock_key=["doc"],
          retry_countdown=0.1)
def slow(self, doc, version, held=False):
    coord.rpush("ran:slow", f"start {version}")
    if held:
        hold(self, "slow")
    coord.rpush("ran:slow", f"end {version}")
    return version


@app.task(base=SingletonTask, bind=True, name="debounce.bounded", debounce=0.2, lock_key=["doc"],
          retry_countdown=0.1, max_retries=2)
def bounded(self, doc, version, held=False):
    coord.rpush("ran:bounded", str(version))
    if held:
        hold(self, "bounded")
    return version
"""


def wait_senders(app: Celery) -> tuple[Any, Any]:
    options: dict[str, Any] = {"base": SingletonTask, "shared": False, "debounce": 0.2, "lock_key": ["doc"]}

    @app.task(name="debounce.slow", **options)
    def slow(doc: int, version: int, held: bool = False) -> None:
        raise AssertionError("runs in the worker only")

    @app.task(name="debounce.bounded", max_retries=2, **options)
    def bounded(doc: int, version: int, held: bool = False) -> None:
        raise AssertionError("runs in the worker only")

    return slow, bounded


def test_the_latest_call_waits_out_a_run_longer_than_max_retries(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    proc = worker_process(worker_module(urls, "debounce_wait", WAIT_TASKS), "-c", "2")
    slow, _ = wait_senders(make_app())
    first = slow.delay(1, 0, held=True)
    wait_started(coord, "slow")
    latest = slow.delay(1, 1)  # a new burst: due while the first run still holds the key
    retrying = f"Retrying duplicate debounce.slow[{latest.id}]"
    skipped = f"Skipped duplicate debounce.slow[{latest.id}]"
    # Past Celery's default max_retries (3) and the retry it would have refused.
    assert poll(lambda: proc.log().count(retrying) >= 5 or skipped in proc.log(), 15), proc.log()
    open_gate(coord, "slow", times=1)
    assert first.get(timeout=15) == 0
    assert latest.get(timeout=15) == 1  # the burst's call ran, after the run it waited for
    assert [e.decode() for e in coord.lrange("ran:slow", 0, -1)] == ["start 0", "end 0", "start 1", "end 1"]
    assert skipped not in proc.log()


def test_a_max_retries_set_on_the_task_bounds_the_wait_and_the_loss_is_logged(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    node = f"debounce-{uuid.uuid4().hex[:8]}@test"
    proc = worker_process(worker_module(urls, "debounce_bounded", WAIT_TASKS), "-c", "2", "-n", node)
    app = make_app()
    _, bounded = wait_senders(app)
    first = bounded.delay(2, 0, held=True)
    [(_, holder)] = wait_started(coord, "bounded")
    lost = bounded.delay(2, 1)
    error = lost.get(timeout=15, propagate=False)  # 2 retries, then lost: its caller is answered
    assert isinstance(error, DuplicateTaskError), error
    assert error.holder_task_id == holder
    log = proc.log()
    assert log.count(f"Retrying duplicate debounce.bounded[{lost.id}]") == 2
    [line] = [line for line in log.splitlines() if f"Lost debounced debounce.bounded[{lost.id}]" in line]
    assert "ERROR/" in line and f"held by {error.holder}" in line, line
    stats = stats_of(app, node)
    assert stats is not None and stats["counters"]["debounce_lost"] == 1, stats
    open_gate(coord, "bounded", times=1)
    assert first.get(timeout=15) == 0
    assert coord.lrange("ran:bounded", 0, -1) == [b"0"]
