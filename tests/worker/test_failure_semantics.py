"""Failure semantics (docs/guarantees.md): promises that no other test showed, each on real workers and servers.

The guarantees page's failure semantics and faults name, for every promise, the test that shows
it; these are the ones that had none: the hand-over's TTL, Redis down at release (WARNING,
counted, TTL), a failed lock in eager mode, the lock client failing fast and surviving a
restart, the redis retries counting in ``request.retries``, a redelivered copy counted and
dropped after a FAILURE, a copy without a result backend running again after (never beside)
its original, and a task called as a function taking no lock.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import LockUnavailableError, SingletonTask
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.ops.stats import counters

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

TASK_LOG = "celery_redislock"  # every module logs under its own name below it


@pytest.fixture
def lock_server() -> Iterator[RedisServer]:
    """A lock Redis of its own, with an append-only file: what it held survives a stop/start."""
    with RedisServer(extra_args=["--appendonly", "yes", "--appendfsync", "always"]) as server:
        yield server


def test_a_lock_kept_across_retry_is_handed_over_for_lock_timeout_plus_the_countdown(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    between: list[tuple[bytes | None, int]] = []

    @app.task(base=SingletonTask, shared=False, bind=True, release_on_retry=False, lock_timeout=5)
    def once_more(self: Any) -> str:
        if self.request.retries == 0:
            [key] = lock_keys(locks)
            try:
                raise self.retry(countdown=2, max_retries=1)
            finally:
                between.append((locks.get(key), int(locks.pttl(key))))
        return "done"

    with worker(app):
        result = once_more.delay()
        assert result.get(timeout=15) == "done"
    [(holder, pttl)] = between
    assert holder == f"{result.id}@handover".encode()
    assert 5_000 < pttl <= 7_000  # lock_timeout (5 s) + the countdown (2 s)
    assert lock_keys(locks) == []


def test_redis_down_at_release_is_a_warning_counted_and_the_lock_expires_on_its_ttl(
    make_app: Callable[..., Celery], worker: Any, lock_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(redislock_url=lock_server.url, redislock_options={"lock_timeout": 2})
    keys: list[bytes] = []

    @app.task(base=SingletonTask, shared=False)
    def stops_redis(n: int) -> int:
        if n == 1:
            keys.extend(lock_keys(lock_server.client()))
            lock_server.stop()  # the body ends with the lock Redis down: its release fails
        return n

    caplog.set_level(logging.WARNING, logger="celery_redislock")
    errors = counters.snapshot()["redis_errors"]
    with worker(app):
        assert stops_redis.delay(1).get(timeout=10) == 1
        [key] = keys
        [line] = [r for r in caplog.records if r.getMessage().startswith("Could not release lock")]
        assert line.levelno == logging.WARNING and key.decode() in line.getMessage()
        assert "it expires in at most 2.0s" in line.getMessage()

        # Counted: the release, and each renewal cycle that ran while Redis was down (logged too;
        # a cycle that began before the release discarded the lease may still be ending).
        def counted() -> bool:
            renewals = sum(r.getMessage().startswith("Could not renew") for r in caplog.records)
            return bool(counters.snapshot()["redis_errors"] == errors + 1 + renewals)

        assert poll(counted, 5)
        lock_server.start()  # the append-only file kept the lock: its TTL frees it
        client = lock_server.client()
        assert 0 < client.pttl(key) <= 2_000
        assert poll(lambda: not client.exists(key), 5)
        assert stops_redis.delay(2).get(timeout=10) == 2  # the worker carried on
        client.close()


def test_the_retry_policy_in_eager_mode_fails_naming_task_key_and_url(
    make_app: Callable[..., Celery], lock_server: RedisServer
) -> None:
    app = make_app(
        task_always_eager=True,
        redislock_url=lock_server.url,
        redislock_options={"on_redis_error": "retry"},
    )
    ran: list[int] = []

    @app.task(base=SingletonTask, shared=False, name="semantics.eager")
    def eager(n: int) -> int:
        ran.append(n)
        return n

    real = app.tasks["semantics.eager"]
    key = runtime_for(app).plan(real, None).key(real, (1,), {})
    lock_server.stop()
    with pytest.raises(LockUnavailableError) as caught:
        eager.delay(1).get()
    assert caught.value.task == "semantics.eager" and caught.value.key == key
    assert lock_server.url in str(caught.value) and key in str(caught.value)
    assert ran == []


@contextmanager
def closing_listener(port: int) -> Iterator[list[int]]:
    """A stand-in for a stopped server on its port: it accepts each connection and closes it at
    once, so each connection a client makes fails at once, and is counted (the list it yields)."""
    accepted: list[int] = []
    stop = threading.Event()
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(16)
        listener.settimeout(0.05)  # how often it looks at `stop`

        def serve() -> None:
            while not stop.is_set():
                try:
                    connection, _ = listener.accept()
                except socket.timeout:
                    continue
                connection.close()
                accepted.append(port)

        server = threading.Thread(target=serve, name=f"closing-listener:{port}", daemon=True)
        server.start()
        try:
            yield accepted
        finally:
            stop.set()
            server.join(5)


def test_the_lock_client_fails_at_once_when_redis_is_down_and_survives_a_restart(
    make_app: Callable[..., Celery], lock_server: RedisServer
) -> None:
    app = make_app(redislock_url=lock_server.url)
    engine = runtime_for(app).engine
    assert engine.acquire("semantics:fast", "a", 1000).acquired
    assert engine.release("semantics:fast", "a")
    lock_server.restart()  # the pooled connection is now stale: retried once, at once
    assert engine.acquire("semantics:fast", "b", 1000).acquired
    lock_server.stop()
    with closing_listener(lock_server.port) as accepted, pytest.raises(redis.ConnectionError):
        engine.acquire("semantics:fast", "c", 1000)
    # Failed at once, counted on the server's side rather than timed by the caller: one retry
    # connects twice (redis-py 5), or three times (6 and later also retry the connect's
    # hand-shake); redis-py's default policy (3 retries, a backoff of up to seconds) seven times.
    assert 1 <= len(accepted) <= 3, accepted


def test_retries_while_redis_is_down_count_in_request_retries(
    make_app: Callable[..., Celery], worker: Any, lock_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(redislock_url=lock_server.url, redislock_options={"retry_countdown": 0.2})
    seen: list[int] = []

    @app.task(base=SingletonTask, shared=False, bind=True, max_retries=0)
    def job(self: Any) -> str:
        seen.append(self.request.retries)
        return "ran"

    caplog.set_level(logging.WARNING, logger=TASK_LOG)
    lock_server.stop()
    with worker(app):
        result = job.delay()
        retrying = [f"Retrying {job.name}[{result.id}]"]
        assert poll(lambda: sum(retrying[0] in r.getMessage() for r in caplog.records) >= 2, 15)
        lock_server.start()
        assert result.get(timeout=15) == "ran"
    assert len(seen) == 1 and seen[0] >= 2  # max_retries=0 did not stop it; the retries counted


def test_a_task_called_as_a_function_runs_in_the_caller_without_a_lock(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    app = make_app()
    inside: list[list[bytes]] = []

    @app.task(base=SingletonTask, shared=False)
    def direct(n: int) -> int:
        inside.append(lock_keys(locks))
        return n

    locks.set(runtime_for(app).plan(app.tasks[direct.name], None).key(direct, (1,), {}), "someone", px=60_000)
    assert direct(1) == 1  # its key is held by someone else: still runs, no lock involved
    assert len(inside) == 1 and len(inside[0]) == 1  # only someone's lock
    assert locks.get(inside[0][0]) == b"someone"


# --- redelivery (acks_late, the Redis broker's visibility timeout) on a prefork worker --------

REDELIVERY = f"""
app.conf.broker_transport_options = {{"visibility_timeout": {VISIBILITY_TIMEOUT}}}


@app.task(base=SingletonTask, bind=True, name="semantics.fails", acks_late=True, lock_timeout=3)
def fails(self, tag):
    hold(self, tag)
    raise ValueError("the original failed")


@app.task(base=SingletonTask, bind=True, name="semantics.unrecorded", acks_late=True, lock_timeout=3,
          ignore_result=True)
def unrecorded(self, tag):
    # The body itself tells an overlap: two executions of this key inside at once.
    if coord.incr("inside:" + tag) > 1:
        coord.rpush("overlap:" + tag, self.request.id)
    try:
        hold(self, tag)
    finally:
        coord.decr("inside:" + tag)
        coord.rpush("finished:" + tag, self.request.id)
"""


@pytest.fixture
def redelivery(
    urls: dict[str, str], make_app: Callable[..., Celery], worker_process: Callable[..., WorkerProcess]
) -> tuple[WorkerProcess, Celery]:
    """A prefork worker running ``REDELIVERY``, and a client app on the same short visibility timeout."""
    proc = worker_process(worker_module(urls, "semantics", REDELIVERY), "-c", "2", "-n", "semantics@test")
    return proc, make_app(broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT})


@visibility_redelivery
def test_a_redelivered_copy_is_counted_as_retried_and_dropped_once_the_original_failed(
    coord: redis.Redis, locks: redis.Redis, redelivery: tuple[WorkerProcess, Celery]
) -> None:
    proc, client = redelivery
    before = stats_of(client, "semantics@test")
    assert before is not None
    result = client.send_task("semantics.fails", args=["f"])
    [(_, task_id)] = wait_started(coord, "f")
    wait_redelivered(client, proc, f"Re-queued redelivered semantics.fails[{task_id}]")
    after = stats_of(client, "semantics@test")
    assert after is not None and after["counters"]["retried"] > before["counters"]["retried"]
    assert result.state == "PENDING"  # no RETRY stored over the original's result

    open_gate(coord, "f")
    with pytest.raises(ValueError, match="the original failed"):
        result.get(timeout=10)
    dropped = f"Dropped redelivered semantics.fails[{task_id}]: it has finished already"
    assert poll(lambda: dropped in proc.log(), 10), proc.log()
    assert len(wait_started(coord, "f")) == 1  # the copy never ran
    assert result.state == "FAILURE"
    assert poll(lambda: lock_keys(locks) == [], 5)


@visibility_redelivery
def test_without_a_result_the_copy_runs_again_after_the_original_never_beside_it(
    coord: redis.Redis, redelivery: tuple[WorkerProcess, Celery]
) -> None:
    proc, client = redelivery
    client.send_task("semantics.unrecorded", args=["u"])
    [(_, task_id)] = wait_started(coord, "u")
    wait_redelivered(client, proc, f"Re-queued redelivered semantics.unrecorded[{task_id}]")
    assert len(wait_started(coord, "u")) == 1  # not beside the original

    open_gate(coord, "u", times=1)
    assert poll(lambda: coord.llen("finished:u") == 1, 10)
    open_gate(coord, "u", times=20)  # every later run passes its gate at once
    # With no result to look at, a re-queued copy cannot tell the original finished: it runs
    # again once the lock is free (at least once, as acks_late promises; once per copy the
    # broker gave out while the original ran, and this test has it give them out every 0.2 s).

    def ran_again() -> bool:
        restore_visible(client)
        return coord.llen("finished:u") >= 2

    assert poll(ran_again, 20, interval=0.2), proc.log()
    runs = wait_started(coord, "u", count=2)
    assert {tid for _, tid in runs} == {task_id}
    assert coord.lrange("overlap:u", 0, -1) == []  # never two at once
    assert poll(lambda: coord.llen("started:u") == coord.llen("finished:u"), 10)
