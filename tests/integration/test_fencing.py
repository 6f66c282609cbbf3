"""Fencing tokens against a real redis-server: issued by the acquire script in the one round trip,
growing with every acquisition (take-overs, re-entries, after the counter is lost), and on a
cluster in the lock key's slot."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from celery_redislock import OptionError, RedisLock
from celery_redislock.config.lock_client import make_client
from celery_redislock.contrib.testing import ClusterSet, RedisServer
from celery_redislock.engine import AcquireStatus, LockEngine, make_engine
from celery_redislock.engine.keys import fence_key
from celery_redislock.engine.lock_engine import FENCE_KEEP_MS
from tests.harness import RoundTrips, counting_client


@pytest.fixture
def counted(redislock_server: RedisServer) -> Iterator[tuple[LockEngine, RoundTrips]]:
    client, trips = counting_client(redislock_server.url)
    engine = LockEngine(client)
    engine.acquire("fence:warm", "w", 1000, fencing=True)  # loads the script: not counted
    engine.release("fence:warm", "w")
    trips.reset()
    yield engine, trips
    client.close()


def server_micros(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1_000_000 + int(micros)


def test_a_fenced_acquire_is_one_script_call_that_issues_a_token_from_the_server_clock(
    counted: tuple[LockEngine, RoundTrips], redislock_redis: redis.Redis
) -> None:
    engine, trips = counted
    before = server_micros(redislock_redis)
    result = engine.acquire("fence:a", "me", 5_000, fencing=True)
    after = server_micros(redislock_redis)

    assert trips.count == 1  # no SET NX first: straight to the script, which issues the token
    assert result.status is AcquireStatus.TAKEN
    assert result.token is not None and before <= result.token <= after
    assert result.server_time is not None and before <= result.server_time * 1e6 <= after + 1
    assert redislock_redis.get("fence:a") == b"me"
    assert redislock_redis.get("{fence:a}:fence") == str(result.token).encode()
    assert FENCE_KEEP_MS - 5_000 < redislock_redis.pttl("{fence:a}:fence") <= FENCE_KEEP_MS
    # Unfenced, nothing changes: the SET NX fast path, no token, no counter.
    plain = engine.acquire("fence:plain", "me", 5_000)
    assert (plain.token, plain.server_time, redislock_redis.exists("{fence:plain}:fence")) == (None, None, 0)


def test_tokens_grow_with_every_acquisition_take_over_re_entry_and_after_the_counter_is_lost(
    redislock_redis: redis.Redis,
) -> None:
    engine = LockEngine(redislock_redis)
    key = "fence:grow"
    tokens = [engine.acquire(key, "a", 5_000, fencing=True).token]
    tokens.append(engine.acquire(key, "a", 5_000, fencing=True).token)  # re-entry
    assert engine.transfer(key, "a", "t1@handover", 5_000)
    tokens.append(engine.acquire(key, "b", 5_000, "t1@handover", fencing=True).token)  # hand-over
    redislock_redis.set(key, "t2@queued", px=5_000)
    tokens.append(engine.acquire(key, "c", 5_000, takeover_suffix="@queued", fencing=True).token)
    refused = engine.acquire(key, "d", 5_000, fencing=True)
    assert (refused.acquired, refused.holder, refused.token) == (False, "c", None)
    assert engine.release(key, "c")
    # What a restart without persistence leaves: no lock, no counter. Seeded from TIME again,
    # so still above every token issued before (each was at most the clock when issued).
    redislock_redis.delete(key, fence_key(key))
    tokens.append(engine.acquire(key, "e", 5_000, fencing=True).token)
    engine.release(key, "e")
    # A counter ahead of the clock (a burst of acquisitions within a microsecond): +1 from it.
    ahead = server_micros(redislock_redis) + 10_000_000
    redislock_redis.set(fence_key(key), str(ahead))
    tokens.append(engine.acquire(key, "f", 5_000, fencing=True).token)

    assert all(isinstance(token, int) for token in tokens)
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), tokens
    assert tokens[-1] == ahead + 1 < 2**63


def test_redislock_with_fencing_has_a_token_while_held_and_checks_the_flag(
    redislock_redis: redis.Redis,
) -> None:
    first = RedisLock(redislock_redis, "fence:lock", timeout=5, fencing=True)
    with first:
        token = first.token
        assert token is not None
    assert first.token is None  # released: no token
    second = RedisLock(redislock_redis, "fence:lock", timeout=5, fencing=True)
    with second:
        assert second.token is not None and second.token > token
    assert RedisLock(redislock_redis, "fence:unfenced").token is None
    with pytest.raises(OptionError, match="fencing"):
        RedisLock(redislock_redis, "fence:lock", fencing="yes")  # type: ignore[arg-type]


def test_the_fence_counter_shares_the_lock_key_slot_on_a_cluster(cluster: ClusterSet) -> None:
    client = make_client(cluster.url)
    assert isinstance(client, RedisCluster)
    engine = make_engine(client)
    try:
        for name in ("redislock:t:abc", "a{tag}b", "x}y"):
            if "}" in name and "{" not in name:
                continue  # one Redis only: no hash tag can name its slot
            result = engine.acquire(name, "me", 5_000, fencing=True)
            assert result.token is not None, name
            assert client.keyslot(fence_key(name)) == client.keyslot(name)
            assert engine.release(name, "me")
    finally:
        client.close()
