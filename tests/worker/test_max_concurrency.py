"""``max_concurrency=N``: up to N executions of one key at once on real workers (a fair
semaphore at the task's lock key); the N+1th is a duplicate handled by ``on_duplicate``."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import DuplicateTaskError, OptionError, SingletonTask
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine import SemaphoreEngine
from celery_redislock.integration.runtime import runtime_for
from tests.harness import counting_client

from .conftest import WorkerProcess, lock_keys, open_gate, poll, wait_started, worker_module
from .test_cli import Run, celery, celery_cmd, lock_key  # noqa: F401  (the CLI fixtures)

TASKS = """
@app.task(
    base=SingletonTask, bind=True, name="mc.crunch", max_concurrency=3, lock_key=["job"],
    lock_timeout=300,
)
def crunch(self, job, tag):
    # How many bodies of this key run now, as each one starts: recorded by the bodies.
    coord.rpush("inside:" + tag, coord.incr("count:" + tag))
    try:
        return hold(self, tag)
    finally:
        coord.decr("count:" + tag)
        coord.rpush("finished:" + tag, self.request.id)
"""

CRUNCH = "mc.crunch"


def holders(locks: redis.Redis, key: str) -> list[str]:
    return [member.decode() for member in locks.zrange(key, 0, -1)]


def test_at_most_three_bodies_of_one_key_run_at_once_on_a_prefork_worker(
    urls: dict[str, str],
    locks: redis.Redis,
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    proc = worker_process(worker_module(urls, "mc", TASKS), "-c", "4")
    client = make_app()
    sent = [client.send_task(CRUNCH, args=["report", "p"]) for _ in range(4)]
    other = client.send_task(CRUNCH, args=["other", "o"])  # another key: not counted against it
    try:
        started = wait_started(coord, "p", count=3)
        running = {task_id for _, task_id in started}
        [skipped] = [r for r in sent if r.id not in running]
        with pytest.raises(DuplicateTaskError) as caught:
            skipped.get(timeout=10)
        key = caught.value.key
        assert caught.value.task_id == skipped.id
        assert "(max_concurrency=3)" in caught.value.holder
        assert sorted(h.split("@")[0] for h in holders(locks, key)) == sorted(running)
        line = f"Skipped duplicate {CRUNCH}[{skipped.id}]: {key} is held by "
        assert poll(lambda: line in proc.log(), 5.0), proc.log()
        assert len(coord.lrange("started:p", 0, -1)) == 3, "the fourth body ran"
        wait_started(coord, "o")  # a slot of its own key, though three of the other run

        # A child killed mid-task: the parent gives its slot back at once (by holder prefix).
        pid, dead_id = started[0]
        proc.children = set(proc.child_pids())
        os.kill(pid, signal.SIGKILL)
        assert poll(lambda: len(holders(locks, key)) == 2, 10.0), holders(locks, key)
        released = f"Released lock {key} of {CRUNCH}[{dead_id}]: its worker process died"
        assert poll(lambda: released in proc.log(), 5.0), proc.log()
    finally:
        open_gate(coord, "p", times=4)
        open_gate(coord, "o")
    for result in sent:
        if result.id not in (skipped.id, dead_id):
            assert result.get(timeout=15) == "done p"
    assert other.get(timeout=15) == "done o"
    assert max(int(n) for n in coord.lrange("inside:p", 0, -1)) == 3
    assert poll(lambda: lock_keys(locks) == [], 5.0)


def test_wait_runs_the_fourth_when_a_slot_frees_and_never_more_than_the_limit(
    make_app: Any, worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    gate = threading.Semaphore(0)
    lock = threading.Lock()
    inside: list[int] = []
    now = [0]

    @app.task(base=SingletonTask, shared=False, max_concurrency=2, on_duplicate="wait", acquire_timeout=30)
    def job(n: int) -> int:
        with lock:
            now[0] += 1
            inside.append(now[0])
        assert gate.acquire(timeout=20)
        with lock:
            now[0] -= 1
        return n

    with worker(app, concurrency=3):
        results = [job.delay(1) for _ in range(3)]
        assert poll(lambda: len(inside) == 2)
        assert poll(lambda: len(inside) == 3, timeout=0.5) is False  # the third waits
        gate.release()  # one finishes: the waiting one gets its slot
        assert poll(lambda: len(inside) == 3)
        gate.release()
        gate.release()
        assert [r.get(timeout=15) for r in results] == [1, 1, 1]
    assert max(inside) == 2
    assert lock_keys(locks) == []


@pytest.mark.parametrize("outcome", ["success", "failure", "retry"])
def test_the_slot_is_given_back_on_every_exit(
    make_app: Any, worker: Any, locks: redis.Redis, outcome: str
) -> None:
    app = make_app()
    seen: list[list[bytes]] = []

    @app.task(base=SingletonTask, shared=False, bind=True, max_concurrency=2, max_retries=1)
    def run(self: Any) -> str:
        [key] = lock_keys(locks)
        seen.append(locks.zrange(key, 0, -1))
        if outcome == "failure":
            raise ValueError("boom")
        if outcome == "retry" and self.request.retries == 0:
            raise self.retry(countdown=0)
        return "ok"

    with worker(app, concurrency=1):
        result = run.delay()
        if outcome == "failure":
            with pytest.raises(ValueError, match="boom"):
                result.get(timeout=10)
        else:
            assert result.get(timeout=15) == "ok"
        assert poll(lambda: lock_keys(locks) == [])
    assert all(len(holders) == 1 and holders[0].startswith(f"{result.id}@".encode()) for holders in seen)
    assert len(seen) == (2 if outcome == "retry" else 1)


def test_a_slot_is_renewed_while_its_body_runs(make_app: Any, worker: Any, locks: redis.Redis) -> None:
    app = make_app()
    gate = threading.Event()

    @app.task(base=SingletonTask, shared=False, max_concurrency=2, lock_timeout=0.6)
    def slow() -> str:
        assert gate.wait(20)
        return "done"

    with worker(app, concurrency=1):
        result = slow.delay()
        assert poll(lambda: len(lock_keys(locks)) == 1)
        [key] = lock_keys(locks)
        engine = SemaphoreEngine(locks)
        # Three TTLs: only renewal keeps the slot alive on the server's clock.
        assert poll(lambda: not (engine.state(key.decode()) or None), timeout=1.8) is False
        state = engine.state(key.decode())
        assert state is not None and len(state.holders) == 1
        gate.set()
        assert result.get(timeout=10) == "done"
    assert lock_keys(locks) == []


def test_an_uncontended_task_with_a_semaphore_costs_two_round_trips(make_app: Any, worker: Any) -> None:
    with RedisServer() as lock_server:
        app = make_app(redislock_url=lock_server.url)

        @app.task(base=SingletonTask, shared=False, max_concurrency=4)
        def noop(n: int) -> int:
            return n

        client, trips = counting_client(lock_server.url)
        runtime_for(app).semaphores = SemaphoreEngine(client)  # type: ignore[misc]
        with worker(app, concurrency=1):
            noop.delay(-1).get(timeout=10)  # loads the scripts
            trips.count = 0
            assert [noop.delay(n).get(timeout=10) for n in range(20)] == list(range(20))
        assert trips.count == 40
        client.close()


@pytest.mark.parametrize(
    ("options", "option"),
    [({"lock_on": "enqueue"}, "lock_on"), ({"release_on_retry": False}, "release_on_retry")],
)
def test_combinations_a_semaphore_cannot_do_are_refused_at_registration(
    make_app: Any, options: dict[str, Any], option: str
) -> None:
    app = make_app()
    with pytest.raises(OptionError) as caught:

        @app.task(base=SingletonTask, shared=False, name="mc.bad", max_concurrency=2, **options)
        def bad() -> None: ...

        app.finalize()
    assert caught.value.option == option and caught.value.source == "task 'mc.bad'"
    assert "max_concurrency=2" in str(caught.value)


def test_skip_logs_once_with_the_holders(
    make_app: Any, worker: Any, locks: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, max_concurrency=2)
    def capped(n: int) -> int:
        return n

    real = app.tasks[capped.name]
    key = runtime_for(app).plan(real, None).key(real, (5,), {})
    engine = SemaphoreEngine(locks)
    engine.acquire(key, "holder-a", 2, 60_000)
    engine.acquire(key, "holder-b", 2, 60_000)
    caplog.set_level(logging.INFO, logger="celery_redislock")
    with worker(app, concurrency=1):
        result = capped.delay(5)
        with pytest.raises(DuplicateTaskError, match="holder-a, holder-b"):
            result.get(timeout=10)
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("Skipped")] == [
        f"Skipped duplicate {capped.name}[{result.id}]: {key} is held by holder-a, holder-b (max_concurrency=2)"
    ]


# -- the CLI shows and removes semaphores -------------------------------------------------------


@pytest.fixture
def cli(request: pytest.FixtureRequest) -> Run:
    """``cli("redislock", "list")``: test_cli's ``celery`` fixture (the real celery program)."""
    run: Run = request.getfixturevalue("celery")
    return run


@pytest.fixture
def slots(locks: redis.Redis) -> tuple[str, list[str]]:
    """A semaphore of task proj.crunch with two live holders (and one that expired), and a lock."""
    key = lock_key("proj.crunch", "s")
    engine = SemaphoreEngine(locks)
    engine.acquire(key, "stale@w:1:1", 3, 1)
    poll(lambda: engine.state(key) == type(engine.state(key))((), 0))  # the stale one lapsed
    engine.acquire(key, "task-a@w:11:1", 3, 60_000)
    engine.acquire(key, "task-b@w:12:1", 3, 30_000)
    locks.set(lock_key("proj.add", "l"), "task-l@w:13:1", px=60_000)
    return key, ["task-a@w:11:1", "task-b@w:12:1"]


def test_list_shows_a_row_per_live_holder_of_a_semaphore(cli: Run, slots: tuple[str, list[str]]) -> None:
    key, holders = slots
    result = cli("redislock", "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = [item for item in json.loads(result.stdout) if item["key"] == key]
    assert sorted(row["holder"] for row in rows) == holders  # not the expired one
    assert all(row["task"] == "proj.crunch" and 0 < row["ttl"] <= 60 for row in rows)
    assert len(json.loads(result.stdout)) == 3  # and the plain lock


def test_release_gives_back_the_slots_it_showed(
    cli: Run, slots: tuple[str, list[str]], locks: redis.Redis
) -> None:
    key, (a, b) = slots
    result = cli("redislock", "release", key, "--yes")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"Released 2 of 2 holder(s) of {key} ({b}, {a})\n"  # soonest to expire first
    assert locks.exists(key) == 0
    assert locks.exists(lock_key("proj.add", "l")) == 1


def test_purge_removes_semaphores_too(cli: Run, slots: tuple[str, list[str]], locks: redis.Redis) -> None:
    key, _ = slots
    result = cli("redislock", "purge", "--yes", "--task", "proj.crunch")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Purged 1 lock(s)\n"
    assert locks.exists(key) == 0
