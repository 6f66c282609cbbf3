"""LockEngine against a real redis-server: contention, re-entry, release, expiry, batch renewal."""

from __future__ import annotations

import threading

import pytest
import redis

from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine import AcquireStatus, Lease, LockEngine
from celery_redislock.engine.scripts import RENEW_CHUNK
from tests.harness import counting_client

from .helpers import poll, script_calls


@pytest.fixture
def engine(redislock_redis: redis.Redis) -> LockEngine:
    return LockEngine(redislock_redis)


def test_two_holders_contend_and_exactly_one_wins(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    contenders = 16
    barrier = threading.Barrier(contenders)
    winners: list[str] = []
    losers: list[str] = []

    def contend(n: int) -> None:
        engine = LockEngine(redislock_server.client())  # a connection of its own, like a process
        barrier.wait()
        result = engine.acquire("lock:a", f"holder-{n}", 10_000)
        (winners if result.acquired else losers).append(result.holder)

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(winners) == 1
    assert len(losers) == contenders - 1
    assert set(losers) == set(winners)  # every loser was told who won
    assert redislock_redis.get("lock:a") == winners[0].encode()


def test_acquire_sets_the_holder_with_a_millisecond_ttl(
    engine: LockEngine, redislock_redis: redis.Redis
) -> None:
    result = engine.acquire("lock:ttl", "me", 1500)
    assert result.status is AcquireStatus.TAKEN
    assert result.holder == "me"
    assert redislock_redis.get("lock:ttl") == b"me"
    assert 1000 < redislock_redis.pttl("lock:ttl") <= 1500


def test_same_holder_reenters_and_refreshes_the_ttl(engine: LockEngine, redislock_redis: redis.Redis) -> None:
    engine.acquire("lock:re", "me", 1000)
    result = engine.acquire("lock:re", "me", 60_000)
    assert result.status is AcquireStatus.REENTERED
    assert redislock_redis.pttl("lock:re") > 50_000


def test_other_holder_is_refused_and_told_the_holder(engine: LockEngine) -> None:
    engine.acquire("lock:b", "first", 10_000)
    result = engine.acquire("lock:b", "second", 10_000)
    assert not result.acquired
    assert result.status is None
    assert result.holder == "first"


def test_handover_lets_the_named_successor_take_over(
    engine: LockEngine, redislock_redis: redis.Redis
) -> None:
    engine.acquire("lock:h", "task-1@queued", 10_000)
    assert not engine.acquire("lock:h", "task-2@w1:1", 10_000, handover="task-2@queued").acquired
    result = engine.acquire("lock:h", "task-1@w1:1", 20_000, handover="task-1@queued")
    assert result.status is AcquireStatus.TAKEN_OVER
    assert redislock_redis.get("lock:h") == b"task-1@w1:1"
    assert redislock_redis.pttl("lock:h") > 15_000


def test_release_by_a_non_holder_deletes_nothing(engine: LockEngine, redislock_redis: redis.Redis) -> None:
    engine.acquire("lock:c", "owner", 10_000)
    assert engine.release("lock:c", "intruder") is False
    assert engine.release("lock:c", "own") is False  # a prefix of the holder id is not it
    assert redislock_redis.get("lock:c") == b"owner"
    assert engine.release("lock:c", "owner") is True
    assert redislock_redis.exists("lock:c") == 0
    assert engine.release("lock:c", "owner") is False  # already gone


def test_release_by_holder_prefix_frees_a_dead_process_lock_only(
    engine: LockEngine, redislock_redis: redis.Redis
) -> None:
    engine.acquire("lock:p", "task-1@host:4242:7", 10_000)
    assert engine.release_holder_prefix("lock:p", "task-1@host:4243:") is False
    assert engine.release_holder_prefix("lock:p", "task-2@host:4242:") is False
    assert redislock_redis.exists("lock:p") == 1
    assert engine.release_holder_prefix("lock:p", "task-1@host:4242:") is True
    assert redislock_redis.exists("lock:p") == 0


def test_holders_names_the_one_holder_of_a_lock(engine: LockEngine) -> None:
    assert engine.holders("lock:h") == ()
    engine.acquire("lock:h", "task-1@host:4242:7", 10_000)
    assert engine.holders("lock:h") == ("task-1@host:4242:7",)


def test_release_publishes_the_key_for_waiters(engine: LockEngine, redislock_redis: redis.Redis) -> None:
    pubsub = redislock_redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe("released")
    assert pubsub.get_message(timeout=1.0) is None  # consumes the subscribe confirmation
    engine.acquire("lock:n", "me", 10_000)
    assert engine.release("lock:n", "someone-else", notify="released") is False
    assert pubsub.get_message(timeout=0.2) is None  # nothing deleted, nothing published
    assert engine.release("lock:n", "me", notify="released") is True
    message = pubsub.get_message(timeout=2.0)
    assert message is not None and message["data"] == b"lock:n"
    pubsub.close()


def test_lock_expires_after_its_ttl(engine: LockEngine, redislock_redis: redis.Redis) -> None:
    engine.acquire("lock:e", "me", 100)
    # The promise on the server's clock: the key lives at most its TTL (the poll's deadline only
    # bounds a hang; how soon the caller sees it gone depends on the machine's load).
    assert 0 < redislock_redis.pttl("lock:e") <= 100
    assert poll(lambda: redislock_redis.exists("lock:e") == 0, timeout=10.0)
    assert engine.acquire("lock:e", "next", 1000).status is AcquireStatus.TAKEN


def test_each_operation_is_one_round_trip(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    client, trips = counting_client(redislock_server.url)
    engine = LockEngine(client)
    engine.acquire("lock:rt", "me", 10_000)  # the first call also loads the script (NOSCRIPT)
    engine.release("lock:rt", "me")
    engine.renew_many([Lease("lock:rt", "me", 10_000)])
    trips.count = 0
    engine.acquire("lock:rt2", "me", 10_000)
    assert trips.count == 1
    engine.renew_many([Lease("lock:rt2", "me", 10_000)])
    assert trips.count == 2
    engine.release("lock:rt2", "me")
    assert trips.count == 3
    client.close()


def test_scripts_are_reloaded_after_script_flush(engine: LockEngine, redislock_redis: redis.Redis) -> None:
    engine.acquire("lock:f", "me", 10_000)
    redislock_redis.script_flush()
    assert engine.release("lock:f", "me") is True
    assert engine.acquire("lock:f", "me", 10_000).status is AcquireStatus.TAKEN


def test_works_with_a_decoding_client(redislock_server: RedisServer) -> None:
    client = redislock_server.client(decode_responses=True)
    engine = LockEngine(client)
    engine.acquire("lock:d", "first", 10_000)
    assert engine.acquire("lock:d", "second", 10_000).holder == "first"
    report = engine.renew_many([Lease("lock:d", "second", 10_000)])
    assert report.stolen == [(Lease("lock:d", "second", 10_000), "first")]
    client.close()


def test_ttl_must_be_positive(engine: LockEngine) -> None:
    with pytest.raises(ValueError, match="positive number of milliseconds"):
        engine.acquire("lock:z", "me", 0)


def test_batch_renewal_of_10000_locks_is_one_round_trip_of_chunked_calls(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    client, trips = counting_client(redislock_server.url)
    engine = LockEngine(client)
    leases = [Lease(f"lock:many:{n}", f"holder-{n}", 2_000) for n in range(10_000)]
    with redislock_redis.pipeline(transaction=False) as pipe:
        for lease in leases:
            pipe.set(lease.key, lease.holder, px=2_000)
        pipe.execute()
    gone = leases[:10]
    stolen = leases[10:20]
    redislock_redis.delete(*[lease.key for lease in gone])
    for lease in stolen:
        redislock_redis.set(lease.key, "intruder", px=60_000)
    engine.renew_many([Lease("lock:warm", "w", 1000)])  # load the script outside the count
    before = script_calls(redislock_redis)
    trips.count = 0

    report = engine.renew_many([Lease(lease.key, lease.holder, 60_000) for lease in leases])

    assert trips.count == 1
    # Cut into script calls of RENEW_CHUNK locks (Redis serves others between two), pipelined.
    assert script_calls(redislock_redis) - before == 10_000 // RENEW_CHUNK
    assert len(report.renewed) == 10_000 - 20
    assert [lease.key for lease in report.retaken] == [lease.key for lease in gone]
    assert [(lease.key, holder) for lease, holder in report.stolen] == [
        (lease.key, "intruder") for lease in stolen
    ]
    # renewed and re-taken keys now carry the new TTL and their holder; stolen ones are untouched
    assert redislock_redis.pttl(leases[500].key) > 50_000
    assert redislock_redis.get(gone[0].key) == gone[0].holder.encode()
    assert redislock_redis.pttl(gone[0].key) > 50_000
    assert redislock_redis.get(stolen[0].key) == b"intruder"
    client.close()


def test_renewal_after_a_redis_restart_retakes_the_lock(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    client = redislock_server.client()
    engine = LockEngine(client)
    engine.acquire("lock:r", "me", 30_000)
    redislock_server.restart()  # no persistence: the lock is gone
    assert redislock_redis.exists("lock:r") == 0

    report = engine.renew_many([Lease("lock:r", "me", 30_000)])

    assert [lease.key for lease in report.retaken] == ["lock:r"]
    assert redislock_redis.get("lock:r") == b"me"
    assert engine.acquire("lock:r", "other", 30_000).holder == "me"
    client.close()


def test_a_chunked_renewal_on_a_server_that_lost_its_scripts_loads_them_and_reports_once(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    client, trips = counting_client(redislock_server.url)
    engine = LockEngine(client)
    leases = [Lease(f"lock:flushed:{n}", "me", 60_000) for n in range(2 * RENEW_CHUNK + 5)]
    for lease in leases[1:]:
        redislock_redis.set(lease.key, "me", px=60_000)
    redislock_redis.script_flush()  # as a restarted Redis: every chunk is answered NOSCRIPT
    trips.count = 0

    report = engine.renew_many(leases)

    assert trips.count == 3  # the pipeline, SCRIPT LOAD, the pipeline again
    assert [lease.key for lease in report.retaken] == [leases[0].key]  # not re-renewed as "renewed"
    assert len(report.renewed) == len(leases) - 1 and not report.stolen
