"""The engine's uncontended path against a real redis-server: SET NX first, the acquire script only
when the key is held (with the script's every outcome), each call on a connection of the
client's pool (threads, a forked child, a pool-wide disconnect, a pool of one)."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine import AcquireResult, AcquireStatus, LockEngine
from tests.harness import RoundTrips, counting_client


@pytest.fixture
def counted(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> Iterator[tuple[LockEngine, RoundTrips]]:
    client, trips = counting_client(redislock_server.url)
    engine = LockEngine(client)
    engine.acquire("lock:warm", "w", 1000, expect_free=False)  # loads the script: not counted
    engine.release("lock:warm", "w")
    trips.reset()
    yield engine, trips
    client.close()


def calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def test_an_uncontended_acquire_is_one_set_nx_and_the_release_one_script_call(
    counted: tuple[LockEngine, RoundTrips], redislock_redis: redis.Redis
) -> None:
    engine, trips = counted
    scripts, sets = calls(redislock_redis, "evalsha"), calls(redislock_redis, "set")

    assert engine.acquire("lock:free", "me", 5_000, "me@handover", "@queued").status is AcquireStatus.TAKEN
    assert (trips.count, calls(redislock_redis, "evalsha") - scripts) == (1, 0)
    assert calls(redislock_redis, "set") - sets == 1
    assert redislock_redis.get("lock:free") == b"me"
    assert 2_500 < redislock_redis.pttl("lock:free") <= 5_000

    assert engine.release("lock:free", "me") is True
    assert trips.count == 2
    assert redislock_redis.exists("lock:free") == 0


# Each outcome of the acquire script when the key is held: (value before, what the caller
# passes, expected status, expected value after).
HELD = {
    "re-entry": ("me", {}, AcquireStatus.REENTERED, "me"),
    "hand-over": ("t1@handover", {"handover": "t1@handover"}, AcquireStatus.TAKEN_OVER, "me"),
    "queued take-over": ("t9@queued", {"takeover_suffix": "@queued"}, AcquireStatus.TAKEN_OVER, "me"),
    "someone else's": (
        "other@w:1:1",
        {"handover": "t1@handover", "takeover_suffix": "@queued"},
        None,
        "other@w:1:1",
    ),
}


@pytest.mark.parametrize("case", list(HELD))
@pytest.mark.parametrize("expect_free", [True, False])
def test_a_held_key_falls_back_to_the_script_with_its_every_outcome(
    counted: tuple[LockEngine, RoundTrips], redislock_redis: redis.Redis, case: str, expect_free: bool
) -> None:
    engine, trips = counted
    before, kwargs, status, after = HELD[case]
    redislock_redis.set("lock:held", before, px=2_000)

    result = engine.acquire("lock:held", "me", 60_000, expect_free=expect_free, **kwargs)

    assert result == AcquireResult(status, "me" if status else before)
    assert redislock_redis.get("lock:held") == after.encode()
    ttl = redislock_redis.pttl("lock:held")
    assert ttl > 50_000 if status else ttl <= 2_000  # a refused caller changes nothing
    # SET NX finds the key held, then the script: the price of the fast path, paid only here;
    # a caller that expects it held goes straight to the script.
    assert trips.count == (2 if expect_free else 1)


def test_expect_free_false_still_takes_a_free_key(counted: tuple[LockEngine, RoundTrips]) -> None:
    engine, trips = counted
    assert engine.acquire("lock:free2", "me", 5_000, expect_free=False).status is AcquireStatus.TAKEN
    assert trips.count == 1


def test_a_set_nx_does_not_take_a_key_of_another_type(
    engine_on: Callable[[], LockEngine], redislock_redis: redis.Redis
) -> None:
    # A semaphore (max_concurrency > 1) lives at a key as a sorted set: SET NX must leave it
    # alone and the script report it as the error it always was.
    redislock_redis.zadd("lock:sem", {"holder": 1})
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        engine_on().acquire("lock:sem", "me", 5_000)
    assert redislock_redis.type("lock:sem") == b"zset"


# Per call: a connection taken from the pool for each call (a caller's client); held: one kept
# from the pool for whichever thread finds it free (the Celery app's own client).
HOLD = [pytest.param(False, id="per-call"), pytest.param(True, id="held")]


@pytest.fixture(params=HOLD)
def engine_on(
    redislock_server: RedisServer, request: pytest.FixtureRequest
) -> Iterator[Callable[[], LockEngine]]:
    clients: list[redis.Redis] = []

    def make() -> LockEngine:
        clients.append(redislock_server.client())
        return LockEngine(clients[-1], hold_connection=request.param)

    yield make
    for client in clients:
        client.close()


def test_threads_sharing_an_engine_never_read_each_others_replies(
    engine_on: Callable[[], LockEngine],
) -> None:
    # The renewal thread and a threads pool share one engine: each call has a connection of
    # the pool to itself, or replies would be crossed.
    engine = engine_on()
    failures: list[str] = []

    def work(thread: int) -> None:
        for n in range(150):
            key, holder = f"lock:t{thread}:{n}", f"h{thread}:{n}"
            if engine.acquire(key, holder, 5_000).status is not AcquireStatus.TAKEN:
                failures.append(f"acquire {key}")
            if engine.acquire(key, "someone", 5_000).holder != holder:
                failures.append(f"holder of {key}")
            if engine.release(key, holder) is not True:
                failures.append(f"release {key}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_talks_to_redis_on_a_connection_of_its_own(
    engine_on: Callable[[], LockEngine], redislock_redis: redis.Redis
) -> None:
    engine = engine_on()
    client = engine.client
    assert isinstance(client, redis.Redis)
    assert engine.acquire("lock:parent", "parent", 10_000).acquired  # the pool's connection made
    parent_id = client.client_id()
    # The server-side id of the connection the engine's own calls use (a held one, or a pool's).
    calls = engine.runner
    engine_id = calls.execute("CLIENT", "ID")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its connection's id and whether its calls went right
        try:
            child_ok = all(
                engine.acquire(f"lock:child:{n}", "child", 10_000).acquired
                and engine.release(f"lock:child:{n}", "child")
                for n in range(50)
            )
            os.write(write, f"{client.client_id()} {calls.execute('CLIENT', 'ID')} {child_ok}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as reader:
        child_id, child_engine_id, child_ok = reader.read().split()
    os.waitpid(pid, 0)
    assert child_ok == "True"
    assert int(child_id) != parent_id
    assert int(child_engine_id) not in (parent_id, engine_id)
    # The parent's connection was left alone by the child: its next replies are its own.
    assert client.client_id() == parent_id
    assert engine.release("lock:parent", "parent") is True
    assert redislock_redis.keys("lock:child:*") == []


@pytest.mark.parametrize("hold", HOLD)
def test_the_engines_connection_is_its_pools_so_a_pool_wide_disconnect_reaches_it(
    redislock_server: RedisServer, redislock_redis: redis.Redis, hold: bool
) -> None:
    name = f"fast-path-{uuid.uuid4().hex[:8]}"
    client = redislock_server.client(client_name=name)
    try:
        engine = LockEngine(client, hold_connection=hold)
        assert engine.acquire("lock:pool", "me", 10_000).acquired
        assert [c["name"] for c in redislock_redis.client_list()].count(name) == 1
        client.connection_pool.disconnect()
        deadline = time.monotonic() + 10
        while name in [c["name"] for c in redislock_redis.client_list()]:  # the server sees it go
            assert time.monotonic() < deadline, "the engine's connection outlived the pool's disconnect"
            time.sleep(0.01)
        # And the next call connects again, as any call on the pool does.
        assert engine.release("lock:pool", "me") is True
    finally:
        client.close()


def test_a_held_connection_serves_every_call_in_turn_and_closes_with_the_client(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    name = f"held-{uuid.uuid4().hex[:8]}"
    client = redislock_server.client(client_name=name)
    engine = LockEngine(client, hold_connection=True)
    for n in range(20):
        assert engine.acquire(f"lock:held:{n}", "me", 10_000).acquired
        assert engine.release(f"lock:held:{n}", "me") is True
    # One connection for all of them, and the pool counts it as its own (in use).
    assert [c["name"] for c in redislock_redis.client_list()].count(name) == 1
    assert len(client.connection_pool._in_use_connections) == 1  # type: ignore[attr-defined]
    client.close()
    deadline = time.monotonic() + 10
    while name in [c["name"] for c in redislock_redis.client_list()]:
        assert time.monotonic() < deadline, "the held connection outlived client.close()"
        time.sleep(0.01)


def test_an_engine_on_a_pool_of_one_connection_never_asks_for_a_second(
    redislock_server: RedisServer,
) -> None:
    client = redislock_server.client(max_connections=1)
    try:
        engine = LockEngine(client)
        for n in range(3):  # the first release also asks the server for its conditional delete
            assert engine.acquire(f"lock:one:{n}", "me", 10_000).acquired
            assert engine.holder_of(f"lock:one:{n}") == "me"
            assert engine.release(f"lock:one:{n}", "me") is True
    finally:
        client.close()


def test_the_engine_reconnects_after_a_redis_restart_and_reloads_the_scripts(
    engine_on: Callable[[], LockEngine], redislock_server: RedisServer
) -> None:
    engine = engine_on()
    assert engine.acquire("lock:r", "me", 10_000).acquired
    redislock_server.restart()  # the dataset and the script cache are gone, the socket broken
    assert engine.acquire("lock:r", "me", 10_000).status is AcquireStatus.TAKEN
    assert engine.release("lock:r", "me") is True  # EVALSHA answered NOSCRIPT: EVAL
    assert engine.release("lock:r", "me") is False


class Interrupted(BaseException):
    """Stands for what a signal handler raises mid-call (Celery's soft time limit)."""


class InterruptedOnce(redis.Connection):
    """A connection whose next read is interrupted before it reads anything, once: the reply
    stays unread on the socket, as when a signal lands between a command's send and its read."""

    interrupt = False

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if InterruptedOnce.interrupt:
            InterruptedOnce.interrupt = False
            raise Interrupted
        return super().read_response(*args, **kwargs)


@pytest.mark.parametrize("hold", HOLD)
def test_a_call_interrupted_before_its_reply_is_read_leaves_no_reply_for_the_next_call(
    redislock_server: RedisServer, hold: bool
) -> None:
    pool = redis.ConnectionPool(
        connection_class=InterruptedOnce, host="127.0.0.1", port=redislock_server.port
    )
    client = redis.Redis(connection_pool=pool)
    try:
        runner = LockEngine(client, hold_connection=hold).runner
        assert runner.execute("ECHO", "first") == b"first"
        InterruptedOnce.interrupt = True
        with pytest.raises(Interrupted):
            runner.execute("ECHO", "interrupted")
        # Its reply, still on that connection's socket, must never be read as this one's.
        assert runner.execute("ECHO", "next") == b"next"
    finally:
        InterruptedOnce.interrupt = False
        client.close()


@pytest.mark.parametrize("hold", HOLD)
def test_a_tasks_calls_go_through_execute_command_where_instrumentation_sees_them(
    redislock_server: RedisServer, monkeypatch: pytest.MonkeyPatch, hold: bool
) -> None:
    # OpenTelemetry's redis instrumentation (and others) wraps Redis.execute_command on the
    # class: a call that goes around it is invisible to tracing and metrics.
    seen: list[str] = []
    original = redis.Redis.execute_command

    def traced(self: redis.Redis, *args: Any, **options: Any) -> Any:
        seen.append(str(args[0]))
        return original(self, *args, **options)

    monkeypatch.setattr(redis.Redis, "execute_command", traced)
    client = redislock_server.client()
    try:
        engine = LockEngine(client, hold_connection=hold)
        assert engine.acquire("lock:seen", "me", 10_000).acquired
        assert engine.release("lock:seen", "me") is True
        assert engine.acquire("lock:seen", "me", 10_000, expect_free=False).acquired  # the script
    finally:
        client.close()
    # The first release also asks which conditional delete the server has.
    assert seen[0] == "SET" and "COMMAND LIST" in seen
    assert seen[-2] in ("EVALSHA", "DELIFEQ", "DELEX") and seen[-1] in ("EVALSHA", "EVAL")


class CountingBackoff(NoBackoff):
    """A Backoff of the client's Retry that notes each failure it is asked to wait after (the
    Retry asks only when it is going to try again). Noted on the class: each connection gets a
    deep copy of the client's Retry."""

    failures: ClassVar[list[int]] = []

    def compute(self, failures: int) -> float:
        CountingBackoff.failures.append(failures)
        return 0


def kill_connections(redislock_redis: redis.Redis, name: str) -> None:
    """Close, server side, every connection named ``name``: as a restart or a proxy drops them."""
    killed = 0
    for client in redislock_redis.client_list():
        if client["name"] == name:
            killed += redislock_redis.execute_command("CLIENT", "KILL", "ID", client["id"])
    assert killed >= 1


@pytest.mark.parametrize("retries", [2, 0])
def test_a_held_connection_dropped_between_calls_is_retried_as_the_client_retries(
    redislock_server: RedisServer, redislock_redis: redis.Redis, retries: int
) -> None:
    name = f"dropped-{uuid.uuid4().hex[:8]}"
    CountingBackoff.failures = []
    client = redislock_server.client(client_name=name, retry=Retry(CountingBackoff(), retries))
    try:
        engine = LockEngine(client, hold_connection=True)
        assert engine.acquire("lock:dropped", "me", 10_000).acquired
        kill_connections(redislock_redis, name)
        assert engine.release("lock:dropped", "me") is True  # sent again, once, and done
        assert redislock_redis.exists("lock:dropped") == 0
        # With retries, the client's Retry sent it again on the same connection (connected
        # anew), as its execute_command does; with none, the pool did, as it does for an idle
        # connection found closed.
        assert CountingBackoff.failures == ([1] if retries else [])
        assert engine.acquire("lock:dropped", "me", 10_000).acquired
    finally:
        client.close()
