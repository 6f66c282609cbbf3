"""SingletonTask on real in-process workers: duplicates, renewal, release paths, strategies."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
import redis
from celery import chord, group
from celery.exceptions import ChordError

from celery_redislock import DuplicateTaskError, LockUnavailableError, OptionError, SingletonTask
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine import LockEngine
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.ops.stats import counters
from tests.harness import conditional_delete_of, counting_client

from .conftest import lock_keys, poll

SKIP_LOG = "celery_redislock"  # every module logs under its own name below it


def key_for(app: Any, task: Any, args: tuple[Any, ...]) -> str:
    """The lock key the worker will use for ``task(*args)`` consumed from the default queue."""
    real = app.tasks[task.name]  # finalizes the app; the decorator returned a proxy
    return runtime_for(app).plan(real, None).key(real, args, {})


def skipped_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Skipped duplicate")]


def test_two_deliveries_at_once_run_one_body_and_skip_the_other(
    make_app: Any, worker: Any, locks: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    gate = threading.Event()
    running: list[tuple[int, str]] = []

    @app.task(base=SingletonTask, shared=False, bind=True)
    def rebuild(self: Any, tenant: int) -> str:
        running.append((tenant, self.request.id))
        assert gate.wait(10)
        return f"built {tenant}"

    caplog.set_level(logging.INFO, logger=SKIP_LOG)
    with worker(app, concurrency=4):
        first = rebuild.delay(1)
        other = rebuild.delay(2)  # different args: runs alongside
        assert poll(lambda: len(running) == 2)
        duplicate = rebuild.delay(1)
        with pytest.raises(DuplicateTaskError) as info:
            duplicate.get(timeout=5)
        gate.set()
        assert first.get(timeout=10) == "built 1"
        assert other.get(timeout=10) == "built 2"

    assert sorted(tenant for tenant, _ in running) == [1, 2]  # the duplicate's body never ran
    key = info.value.key
    assert info.value.holder.startswith(f"{first.id}@")
    assert skipped_lines(caplog) == [
        f"Skipped duplicate {rebuild.name}[{duplicate.id}]: {key} is held by {info.value.holder}"
    ]
    assert lock_keys(locks) == []


def test_a_body_three_times_longer_than_the_ttl_keeps_its_lock(
    make_app: Any, worker: Any, locks: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    gate = threading.Event()
    started = threading.Event()

    @app.task(base=SingletonTask, shared=False, lock_timeout=0.6)
    def slow(n: int) -> int:
        started.set()
        assert gate.wait(10)
        return n

    caplog.set_level(logging.INFO, logger=SKIP_LOG)
    with worker(app, concurrency=2):
        original = slow.delay(7)
        assert started.wait(10)
        deadline = time.monotonic() + 1.8  # 3 x lock_timeout
        while time.monotonic() < deadline:
            assert len(lock_keys(locks)) == 1
            time.sleep(0.05)
        late = slow.delay(7)
        with pytest.raises(DuplicateTaskError):
            late.get(timeout=5)
        gate.set()
        assert original.get(timeout=10) == 7
    assert len(skipped_lines(caplog)) == 1
    assert lock_keys(locks) == []


def test_release_on_success(make_app: Any, worker: Any, locks: redis.Redis) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False)
    def ok() -> int:
        return len(lock_keys(locks))

    with worker(app):
        assert ok.delay().get(timeout=10) == 1
    assert lock_keys(locks) == []


def test_release_on_failure(make_app: Any, worker: Any, locks: redis.Redis) -> None:
    app = make_app()
    held: list[int] = []

    @app.task(base=SingletonTask, shared=False)
    def boom() -> None:
        held.append(len(lock_keys(locks)))
        raise ValueError("boom")

    with worker(app):
        with pytest.raises(ValueError, match="boom"):
            boom.delay().get(timeout=10)
        assert poll(lambda: lock_keys(locks) == [])
    assert held == [1]


def test_release_on_retry_lets_the_retried_run_take_the_lock_again(
    make_app: Any, worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    holders: list[bytes] = []

    @app.task(base=SingletonTask, shared=False, bind=True, max_retries=2)
    def flaky(self: Any) -> int:
        holders.append(locks.get(lock_keys(locks)[0]))
        if self.request.retries < 2:
            raise self.retry(countdown=0)
        return self.request.retries

    with worker(app):
        assert flaky.delay().get(timeout=15) == 2
    assert len(holders) == 3 and len(set(holders)) == 3  # a fresh holder id each run
    assert lock_keys(locks) == []


def test_release_on_retry_false_hands_the_lock_to_the_retried_run(
    make_app: Any, worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    seen: list[tuple[bytes, int]] = []
    between: list[bytes] = []

    @app.task(base=SingletonTask, shared=False, bind=True, release_on_retry=False, max_retries=1)
    def once_more(self: Any) -> str:
        key = lock_keys(locks)[0]
        seen.append((locks.get(key), self.request.retries))
        if self.request.retries == 0:
            try:
                raise self.retry(countdown=1)
            finally:
                between.append(locks.get(key))
        return "done"

    with worker(app):
        result = once_more.delay()
        assert result.get(timeout=15) == "done"
    assert between == [f"{result.id}@handover".encode()]  # kept, not released, across the retry
    assert [retries for _, retries in seen] == [0, 1]
    assert all(holder.startswith(f"{result.id}@".encode()) for holder, _ in seen)
    assert lock_keys(locks) == []


def scripts_run(client: redis.Redis) -> int:
    """How many scripts ``client``'s server has run (its commandstats): an EVALSHA answered
    NOSCRIPT (a script not loaded yet, sent again) is not one."""
    stats = client.info("commandstats")
    return sum(
        int(stats[name]["calls"]) - int(stats[name].get("failed_calls", 0))
        for name in ("cmdstat_evalsha", "cmdstat_eval")
        if name in stats
    )


def test_skip_answers_a_waiting_caller_at_once_without_on_failure(
    make_app: Any, worker: Any, lock_server: RedisServer
) -> None:
    # A lock Redis of the test's own: its commands are the worker's asks for the key alone.
    app = make_app(redislock_url=lock_server.url)
    locks = lock_server.client()
    failures: list[str] = []

    class Tracked(SingletonTask):
        def on_failure(self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
            failures.append(task_id)

    @app.task(base=Tracked, shared=False)
    def report(user: int) -> str:
        return "sent"

    key = key_for(app, report, (5,))
    locks.set(key, "someone-else", px=60_000)
    with worker(app):
        before = scripts_run(locks)
        with pytest.raises(DuplicateTaskError, match="is held by someone-else") as info:
            report.delay(5).get(timeout=10)
        # Answered at once, counted rather than timed: the key was asked for once (its SET NX
        # found it held, the acquire script named the holder), not again while waiting for the
        # holder, nor on a retry.
        assert scripts_run(locks) - before == 1
    assert info.value.holder == "someone-else" and info.value.key == key
    assert failures == []
    assert locks.get(key) == b"someone-else"
    locks.close()


def test_on_duplicate_raise_fails_with_duplicate_task_error(
    make_app: Any, worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, on_duplicate="raise")
    def charge(card: str) -> str:
        return "charged"

    key = key_for(app, charge, ("c1",))
    locks.set(key, "holder-x", px=60_000)
    with worker(app):
        result = charge.delay("c1")
        with pytest.raises(DuplicateTaskError) as info:
            result.get(timeout=10)
    assert (info.value.key, info.value.holder) == (key, "holder-x")
    assert result.state == "FAILURE"


def test_on_duplicate_retry_runs_once_the_holder_is_gone(
    make_app: Any, worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, on_duplicate="retry", retry_countdown=0.3, max_retries=20)
    def sync(account: int) -> str:
        return "synced"

    key = key_for(app, sync, (3,))
    locks.set(key, "holder-y", px=60_000)
    before = counters.snapshot()["retried"]
    with worker(app):
        result = sync.delay(3)
        assert poll(lambda: counters.snapshot()["retried"] >= before + 2)
        assert result.state != "SUCCESS"
        locks.delete(key)
        assert result.get(timeout=10) == "synced"


def test_on_duplicate_retry_ends_as_a_skip_after_max_retries(
    make_app: Any, worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, on_duplicate="retry", retry_countdown=0, max_retries=2)
    def sync(account: int) -> str:
        return "synced"

    key = key_for(app, sync, (4,))
    locks.set(key, "holder-z", px=60_000)
    with worker(app):
        result = sync.delay(4)
        with pytest.raises(DuplicateTaskError, match="holder-z"):
            result.get(timeout=15)


@pytest.mark.parametrize("topology", ["single", "cluster"])
def test_on_duplicate_wait_runs_as_soon_as_the_holder_releases(
    make_app: Any,
    worker: Any,
    redislock_server: RedisServer,
    topology: str,
    request: pytest.FixtureRequest,
) -> None:
    # On a cluster the waiter subscribes on one node; the release publishes from the key's node.
    cluster = request.getfixturevalue("cluster") if topology == "cluster" else None
    app = make_app(redislock_url=cluster.url) if cluster else make_app()
    nodes = [node.client() for node in (cluster.nodes if cluster else [redislock_server])]
    gate = threading.Event()
    order: list[str] = []

    # both calls differ only in `first`, and lock on `name`
    @app.task(base=SingletonTask, shared=False, on_duplicate="wait", acquire_timeout=20, lock_key=["name"])
    def export(name: str, first: bool) -> str:
        order.append(f"start {first}")
        if first:
            assert gate.wait(10)
        order.append(f"end {first}")
        return name

    key = key_for(app, export, ("x", True))
    channel = runtime_for(app).release_channel(key)
    # The test's own ear on the channel: a cluster's nodes pass a PUBLISH on to each other.
    notices = nodes[0].pubsub(ignore_subscribe_messages=True)
    notices.subscribe(channel)

    def subscribers() -> int:
        return sum(dict(node.pubsub_numsub(channel)).get(channel.encode(), 0) for node in nodes)

    waited = counters.snapshot()["waited"]
    with worker(app, concurrency=2):
        a = export.delay("x", True)
        assert poll(lambda: order == ["start True"])
        b = export.delay("x", False)
        # Woken by the release notice, not a poll (shown by what the servers saw, not by the
        # caller's wall time): the waiter listens on the key's channel, and the release told it.
        assert poll(lambda: subscribers() == 2)  # the waiter's and the test's
        assert counters.snapshot()["waited"] == waited  # still waiting
        gate.set()
        assert a.get(timeout=10) == "x"
        notice = poll(lambda: notices.get_message(timeout=0.1))
        assert notice and notice["data"] == key.encode(), notice
        assert b.get(timeout=10) == "x"
    assert order == ["start True", "end True", "start False", "end False"]
    assert counters.snapshot()["waited"] == waited + 1
    notices.close()
    for node in nodes:
        node.close()


def test_on_duplicate_wait_gives_up_after_acquire_timeout(
    make_app: Any, worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, on_duplicate="wait", acquire_timeout=0.5)
    def export(name: str) -> str:
        return name

    key = key_for(app, export, ("y",))
    locks.set(key, "holder-w", px=60_000)
    with worker(app):
        started = time.monotonic()
        with pytest.raises(DuplicateTaskError, match="holder-w"):
            export.delay("y").get(timeout=10)
        # It waited out acquire_timeout (a lower bound: how much longer depends on the load).
        assert time.monotonic() - started >= 0.5


def test_a_chord_with_a_skipped_member_fails_clearly(make_app: Any, worker: Any, locks: redis.Redis) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False)
    def part(n: int) -> int:
        return n

    @app.task(shared=False)
    def total(values: list[int]) -> int:
        return sum(values)

    key = key_for(app, part, (2,))
    locks.set(key, "holder-c", px=60_000)
    with worker(app):
        result = chord(group(part.s(n) for n in range(3)))(total.s())
        # get() re-raises the failed member's error first; the callback itself fails with ChordError
        with pytest.raises(DuplicateTaskError, match="holder-c"):
            result.get(timeout=15)
        assert poll(lambda: result.state == "FAILURE")
        assert isinstance(result.result, ChordError) and "holder-c" in str(result.result)


def test_per_queue_options_apply_to_tasks_consumed_from_that_queue(
    make_app: Any, worker: Any, locks: redis.Redis
) -> None:
    app = make_app(
        redislock_queues={"reports": {"lock_timeout": 600}}, redislock_options={"lock_timeout": 40}
    )
    ttls: dict[str, int] = {}

    @app.task(base=SingletonTask, shared=False, bind=True)
    def render(self: Any, label: str) -> None:
        ttls[label] = locks.pttl(lock_keys(locks)[0])

    with worker(app, queues=["celery", "reports"]):
        render.apply_async(("reports",), queue="reports").get(timeout=10)
        render.apply_async(("default",), queue="celery").get(timeout=10)
    assert 590_000 < ttls["reports"] <= 600_000
    assert 35_000 < ttls["default"] <= 40_000


def test_an_uncontended_task_costs_two_round_trips(
    make_app: Any, worker: Any, redislock_server: RedisServer
) -> None:
    with RedisServer() as lock_server:
        app = make_app(redislock_url=lock_server.url)

        @app.task(base=SingletonTask, shared=False)
        def noop(n: int) -> int:
            return n

        client, trips = counting_client(lock_server.url)
        runtime_for(app).engine = LockEngine(client)
        with worker(app, concurrency=2):
            noop.delay(-1).get(timeout=10)  # loads the scripts
            trips.count = 0
            before = lock_server.client().info("commandstats")
            results = [noop.delay(n) for n in range(100)]
            assert [r.get(timeout=30) for r in results] == list(range(100))
            after = lock_server.client().info("commandstats")
        assert trips.count == 200
        # Each task: a plain SET NX PX takes the free key, the release frees it: the server's
        # own conditional delete where it has one (Valkey 9, Redis 8.4), else the script.
        release = conditional_delete_of(lock_server.executable) or "evalsha"
        for command in ("set", release):
            stat = f"cmdstat_{command}"
            assert after[stat]["calls"] - before.get(stat, {"calls": 0})["calls"] == 100
        client.close()


@pytest.mark.parametrize("policy", ["retry", "run", "fail"])
def test_redis_down_at_acquire(
    make_app: Any, worker: Any, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    with RedisServer() as lock_server:
        app = make_app(
            redislock_url=lock_server.url,
            redislock_options={"on_redis_error": policy, "retry_countdown": 0.2},
        )
        ran: list[int] = []

        # max_retries=0: waiting for Redis must not spend the task's own retries
        @app.task(base=SingletonTask, shared=False, max_retries=0)
        def job(n: int) -> int:
            ran.append(n)
            return n

        caplog.set_level(logging.WARNING, logger="celery_redislock")
        errors = counters.snapshot()["redis_errors"]
        lock_server.stop()
        with worker(app):
            result = job.delay(1)
            if policy == "retry":
                # The runtime's own client fails fast (no redis-py backoff), so retries keep coming.
                assert poll(lambda: sum("Retrying" in r.getMessage() for r in caplog.records) >= 3)
                assert ran == []
                lock_server.start()
                assert result.get(timeout=20) == 1  # nothing lost
                assert ran == [1]
            elif policy == "run":
                assert result.get(timeout=10) == 1
                [line] = [r for r in caplog.records if "without its lock" in r.getMessage()]
                assert line.levelno == logging.WARNING and f"job[{result.id}]" in line.getMessage()
            else:
                with pytest.raises(LockUnavailableError) as info:
                    result.get(timeout=10)
                assert "unreachable" in str(info.value) and lock_server.url in str(info.value)
                assert ran == []
        assert counters.snapshot()["redis_errors"] >= errors + (3 if policy == "retry" else 1)


def test_eager_mode_takes_and_releases_the_lock(make_app: Any, locks: redis.Redis) -> None:
    app = make_app(task_always_eager=True)
    held: list[int] = []

    @app.task(base=SingletonTask, shared=False)
    def eager(n: int) -> int:
        held.append(len(lock_keys(locks)))
        return n

    assert eager.delay(1).get() == 1
    assert held == [1]
    assert lock_keys(locks) == []
    key = key_for(app, eager, (2,))
    locks.set(key, "worker-holder", px=60_000)
    with pytest.raises(DuplicateTaskError, match="worker-holder"):
        eager.delay(2).get()
    assert held == [1]


def test_a_bad_option_is_an_error_at_registration_naming_the_task(make_app: Any) -> None:
    app = make_app()
    with pytest.raises(OptionError, match=r"task '.*\.broken': option 'lock_timeout'"):

        @app.task(base=SingletonTask, shared=False, lock_timeout=-1)
        def broken() -> None: ...

        app.finalize()
        app.tasks[broken.name]


def test_an_unknown_lock_key_name_is_an_error_at_registration(make_app: Any) -> None:
    app = make_app()
    with pytest.raises(OptionError, match="lock_key"):

        @app.task(base=SingletonTask, shared=False, lock_key=["nope"])
        def keyed(user_id: int) -> None: ...

        app.finalize()
        app.tasks[keyed.name]


@pytest.mark.parametrize("task_id", ["report@alice", "100%", "a%40b@c"])
def test_a_duplicate_names_a_holder_whose_task_id_has_at_or_percent(
    make_app: Any, worker: Any, task_id: str
) -> None:
    # The holder id escapes the task id; the error must give it back, for AsyncResult.
    app = make_app()
    started, gate = threading.Event(), threading.Event()

    @app.task(base=SingletonTask, shared=False, on_duplicate="raise")
    def report(n: int) -> str:
        started.set()
        assert gate.wait(10)
        return "ran"

    with worker(app, pool="threads", concurrency=2):
        first = report.apply_async(args=(1,), task_id=task_id)
        assert started.wait(10)
        error = report.delay(1).get(timeout=10, propagate=False)
        assert isinstance(error, DuplicateTaskError), error
        assert error.holder_task_id == task_id
        gate.set()
        assert app.AsyncResult(error.holder_task_id).get(timeout=10) == "ran"
    assert first.get(timeout=10) == "ran"
