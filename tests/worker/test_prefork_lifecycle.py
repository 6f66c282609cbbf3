"""A SingletonTask's lock through the life and death of real prefork workers (SPEC sections 3 and 4).

Each test starts a ``celery worker -P prefork`` subprocess on a module written here. Task bodies
tell the test they started by pushing ``"<pid> <task id>"`` to ``started:<tag>`` on the
coordination database (db 3), then block on ``gate:<tag>`` until the test opens it: no sleeps.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable

import pytest
import redis
from celery import Celery

from celery_redislock import DuplicateTaskError

from .conftest import WorkerProcess, lock_keys, open_gate, poll, stats_of, wait_started, worker_module

TASKS = """
@app.task(base=SingletonTask, bind=True, name="lifecycle.short", lock_timeout=2)
def short(self, tag):
    return hold(self, tag)


@app.task(base=SingletonTask, bind=True, name="lifecycle.long", lock_timeout=300)
def long(self, tag):
    return hold(self, tag)


@app.task(
    base=SingletonTask, bind=True, name="lifecycle.requeued", lock_timeout=300,
    acks_late=True, reject_on_worker_lost=True,
)
def requeued(self, tag):
    return hold(self, tag)


@app.task(base=SingletonTask, bind=True, name="lifecycle.limited", lock_timeout=300, time_limit=1)
def limited(self, tag):
    return hold(self, tag)
"""

SHORT = "lifecycle.short"
LIMITED = "lifecycle.limited"
REQUEUED = "lifecycle.requeued"
LONG = "lifecycle.long"
SHORT_TIMEOUT = 2.0
SHORT_RENEW = SHORT_TIMEOUT / 3  # the default renew_interval: lock_timeout / 3


@pytest.fixture
def start_worker(
    urls: dict[str, str], coord: redis.Redis, worker_process: Callable[..., WorkerProcess]
) -> Callable[..., WorkerProcess]:
    """``start_worker("-c", "1")``: a prefork worker running ``TASKS``."""
    source = worker_module(urls, "lifecycle", TASKS)

    def start(*args: str) -> WorkerProcess:
        return worker_process(source, *args)

    return start


@pytest.fixture
def client_app(make_app: Callable[..., Celery]) -> Celery:
    """The sending side: same broker and backend as the worker, no tasks of its own."""
    return make_app()


def the_lock(locks: redis.Redis) -> tuple[str, str, int]:
    """``(key, holder, pttl)`` of the one lock held now."""
    keys = lock_keys(locks)
    assert len(keys) == 1, keys
    holder = locks.get(keys[0])
    assert holder is not None
    return keys[0].decode(), holder.decode(), int(locks.pttl(keys[0]))


def gone_within(locks: redis.Redis, key: str, timeout: float) -> float | None:
    """Seconds until ``key`` is gone (polled), or None if it outlived ``timeout``."""
    start = time.monotonic()
    if poll(lambda: not locks.exists(key), timeout, interval=0.01):
        return time.monotonic() - start
    return None


def kill(pid: int, signum: int = signal.SIGKILL) -> None:
    os.kill(pid, signum)


def test_sigkill_of_the_whole_worker_leaves_a_lock_that_expires_after_lock_timeout(
    urls: dict[str, str],
    locks: redis.Redis,
    coord: redis.Redis,
    client_app: Celery,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    proc = start_worker("-c", "1")
    result = client_app.send_task(SHORT, args=["k"])
    [(child, task_id)] = wait_started(coord, "k")
    acquired = time.monotonic()
    key, holder, _ = the_lock(locks)
    assert holder.startswith(f"{task_id}@") and f":{child}:" in holder, holder

    # Renewed: the lock outlives its 2 s timeout, held by the same execution all along.
    pttls: list[int] = []
    while time.monotonic() < acquired + SHORT_TIMEOUT + 1.0:
        assert locks.get(key) == holder.encode(), "the lock lapsed while its task was running"
        pttls.append(int(locks.pttl(key)))
        time.sleep(0.05)
    assert min(pttls) > 0
    assert any(later > earlier for earlier, later in zip(pttls, pttls[1:])), "never renewed"

    # SIGKILL the parent first (so it cannot free the child's lock), then every child.
    children = proc.child_pids()
    assert child in children
    kill(proc.pid)
    for pid in children:
        kill(pid)
    killed = time.monotonic()
    proc.process.wait(10)
    assert locks.get(key) == holder.encode(), "nobody may release the lock of a SIGKILLed worker"

    elapsed = gone_within(locks, key, SHORT_TIMEOUT + SHORT_RENEW + 0.5)
    assert elapsed is not None, f"{key} outlived lock_timeout + renew_interval after SIGKILL"
    print(f"lock expired {elapsed:.3f}s after SIGKILL ({time.monotonic() - killed:.3f}s)")
    assert result.state == "PENDING"


# The pool answers for a dead child only at its periodic maintenance pass, never at the child's
# exit event: what it does when the child is not a zombie yet as the event comes (on a busy
# host, often), made certain, so the lock can be freed at the exit only by the parent's hook.
POOL_NOTICES_LATE = """
from celery.concurrency.asynpool import AsynPool


def _untrack_only(self, hub, proc):
    self._untrack_child_process(proc, hub)


AsynPool._event_process_exit = _untrack_only
"""


def test_sigkill_of_one_child_is_released_by_the_parent(
    urls: dict[str, str],
    locks: redis.Redis,
    coord: redis.Redis,
    client_app: Celery,
    worker_process: Callable[..., WorkerProcess],
) -> None:
    node = f"lifecycle-{uuid.uuid4().hex[:8]}@test"
    proc = worker_process(worker_module(urls, "lifecycle", TASKS + POOL_NOTICES_LATE), "-c", "2", "-n", node)
    result = client_app.send_task(LONG, args=["c"])
    [(child, task_id)] = wait_started(coord, "c")
    key, holder, pttl = the_lock(locks)
    assert holder.startswith(f"{task_id}@") and f":{child}:" in holder, holder
    assert pttl > 200_000, "the lock could expire on its own during the test"
    live = client_app.send_task(LONG, args=["live"])  # the other child's, held all along
    [(live_child, _)] = wait_started(coord, "live")
    [live_key] = [k.decode() for k in lock_keys(locks) if k.decode() != key]
    live_holder = locks.get(live_key)

    kill(child)
    elapsed = gone_within(locks, key, 10.0)
    assert elapsed is not None, f"the parent did not release {key} of its dead child"
    print(f"lock released {elapsed:.3f}s after the child's SIGKILL")
    # Freed as the parent saw the child exit, not when Celery reported the loss, at the pool's
    # next maintenance pass, seconds later here (the time is measured by
    # benchmarks.crash_release). WorkerLostError's task_failure then finds nothing to free.
    line = (
        f"Released lock {key} of {LONG}[{task_id}]: its worker process died (pid {child}, freed at its exit)"
    )
    assert poll(lambda: line in proc.log(), 5.0), proc.log()
    assert proc.process.poll() is None, "the worker survives the loss of a child"
    error = result.get(timeout=15, propagate=False)
    assert result.state == "FAILURE" and type(error).__name__ == "WorkerLostError", error
    assert poll(lambda: "WorkerLostError" in proc.log(), 10.0), proc.log()  # logged after the result
    log = proc.log()
    assert log.index(line) < log.index("WorkerLostError"), log
    assert log.count(f"Released lock {key} ") == 1, log
    # Counted as the parent's release, of its task (the worker's /metrics reports it so).
    stats = stats_of(client_app, node)
    assert stats is not None and stats["tasks"][LONG]["released_by_parent"] == 1, stats
    assert stats["counters"]["released_by_parent"] == 1, stats
    assert locks.get(live_key) == live_holder, "the live child's lock was freed"
    assert live_child in proc.child_pids()
    open_gate(coord, "live")
    assert live.get(timeout=10) == "done live"


def test_revoke_with_terminate_releases_the_lock(
    urls: dict[str, str],
    locks: redis.Redis,
    coord: redis.Redis,
    client_app: Celery,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    proc = start_worker("-c", "1")
    result = client_app.send_task(LONG, args=["r"])
    [(_, task_id)] = wait_started(coord, "r")
    key, holder, pttl = the_lock(locks)
    assert holder.startswith(f"{task_id}@") and pttl > 200_000

    client_app.control.revoke(task_id, terminate=True)
    elapsed = gone_within(locks, key, 10.0)
    assert elapsed is not None, f"{key} still held after revoke(terminate=True)"
    print(f"lock released {elapsed:.3f}s after revoke(terminate=True)")
    assert f"Terminating {task_id}" in proc.log(), proc.log()
    assert result.state == "REVOKED" or poll(lambda: result.state == "REVOKED", 5.0)
    assert proc.process.poll() is None


def test_warm_shutdown_lets_the_task_finish_and_releases_its_lock(
    urls: dict[str, str],
    locks: redis.Redis,
    coord: redis.Redis,
    client_app: Celery,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    proc = start_worker("-c", "1")
    result = client_app.send_task(LONG, args=["w"])
    [(_, task_id)] = wait_started(coord, "w")
    key, holder, _ = the_lock(locks)
    assert holder.startswith(f"{task_id}@")

    proc.signal(signal.SIGTERM)
    assert poll(lambda: "Warm shutdown" in proc.log(), 10.0), proc.log()
    assert proc.process.poll() is None, "a warm shutdown waits for the running task"
    assert locks.get(key) == holder.encode(), "the lock is kept while the task still runs"

    open_gate(coord, "w")
    assert result.get(timeout=10) == "done w"
    assert result.state == "SUCCESS"
    assert proc.process.wait(20) == 0
    assert lock_keys(locks) == []


def test_cold_shutdown_releases_the_lock(
    urls: dict[str, str],
    locks: redis.Redis,
    coord: redis.Redis,
    client_app: Celery,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    proc = start_worker("-c", "1")
    client_app.send_task(LONG, args=["q"])
    [(_, task_id)] = wait_started(coord, "q")
    key, holder, pttl = the_lock(locks)
    assert holder.startswith(f"{task_id}@") and pttl > 200_000

    quit_sent = time.monotonic()
    proc.signal(signal.SIGQUIT)
    proc.process.wait(20)
    exited = time.monotonic()
    assert "Cold shutdown" in proc.log(), proc.log()
    elapsed = gone_within(locks, key, 5.0)
    assert elapsed is not None, f"{key} (held by {holder}) outlived a cold shutdown:\n{proc.log()}"
    print(f"worker exited {exited - quit_sent:.3f}s after SIGQUIT; lock gone {elapsed:.3f}s after the exit")


def test_a_duplicate_on_a_busy_worker_is_skipped_and_its_caller_answered(
    urls: dict[str, str],
    locks: redis.Redis,
    coord: redis.Redis,
    client_app: Celery,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    proc = start_worker("-c", "2")
    sent = time.monotonic()
    first = client_app.send_task(LONG, args=["d"])
    second = client_app.send_task(LONG, args=["d"])
    try:
        [(_, running_id)] = wait_started(coord, "d")
        assert running_id in (first.id, second.id)
        skipped = second if running_id == first.id else first
        key, holder, _ = the_lock(locks)
        assert holder.startswith(f"{running_id}@"), holder

        with pytest.raises(DuplicateTaskError) as caught:
            skipped.get(timeout=10)
        print(f"skipped duplicate answered {time.monotonic() - sent:.3f}s after sending")
        # Answered at once, not after waiting for the holder: it still holds the key and runs
        # (its gate is shut); the caller's wall time is the machine's load, not the promise.
        assert locks.get(key) == holder.encode(), "the duplicate's caller was answered after the holder"
        assert len(coord.lrange("started:d", 0, -1)) == 1
        assert caught.value.holder == holder and caught.value.key == key
        assert caught.value.task_id == skipped.id
        assert holder in str(caught.value)

        line = f"Skipped duplicate {LONG}[{skipped.id}]: {key} is held by {holder}"
        assert poll(lambda: line in proc.log(), 5.0), proc.log()
        assert len(coord.lrange("started:d", 0, -1)) == 1, "the duplicate ran"
    finally:
        open_gate(coord, "d")
    running = first if running_id == first.id else second
    assert running.get(timeout=10) == "done d"
    assert poll(lambda: lock_keys(locks) == [], 5.0)


def test_a_task_killed_at_its_hard_time_limit_is_released_by_the_parent(
    urls: dict[str, str],
    locks: redis.Redis,
    coord: redis.Redis,
    client_app: Celery,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    proc = start_worker("-c", "1")
    result = client_app.send_task(LIMITED, args=["t"])
    [(_, task_id)] = wait_started(coord, "t")
    key, _, pttl = the_lock(locks)
    assert pttl > 200_000, "the lock could expire on its own during the test"

    # The gate stays shut: the 1 s hard time limit kills the child.
    elapsed = gone_within(locks, key, 10.0)
    assert elapsed is not None, f"{key} was not released after the hard time limit"
    line = f"Released lock {key} of {LIMITED}[{task_id}]: it was killed at its hard time limit"
    assert poll(lambda: line in proc.log(), 5.0), proc.log()
    error = result.get(timeout=5, propagate=False)
    assert result.state == "FAILURE" and type(error).__name__ == "TimeLimitExceeded", error


def test_a_message_requeued_after_its_child_died_runs_again_instead_of_being_skipped(
    urls: dict[str, str],
    locks: redis.Redis,
    coord: redis.Redis,
    client_app: Celery,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    # acks_late + reject_on_worker_lost: Celery re-queues the message of a dead child and sends
    # no task_failure, so the dead delivery's lock is still there when the message comes back.
    proc = start_worker("-c", "1")
    result = client_app.send_task(REQUEUED, args=["q"])
    [(child, task_id)] = wait_started(coord, "q")
    kill(child)
    started = wait_started(coord, "q", count=2)
    assert [tid for _, tid in started] == [task_id, task_id]  # the same message ran again
    assert started[1][0] != child
    _, holder, _ = the_lock(locks)
    assert holder.startswith(f"{task_id}@") and f":{started[1][0]}:" in holder
    open_gate(coord, "q")
    assert result.get(timeout=10) == "done q"
    assert "Skipped duplicate" not in proc.log()
    assert poll(lambda: lock_keys(locks) == [], 5.0)
