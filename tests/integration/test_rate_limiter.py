"""RedisRateLimiter against a real redis-server: no window of one period holds more than N starts
(by the server's clock), a blocking acquire waits for its reserved slot and is not overtaken,
partitions are independent, and a Redis Cluster keeps each partition on its node."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from celery_redislock import OptionError, RedisRateLimiter
from celery_redislock.config.lock_client import make_client
from celery_redislock.contrib.testing import ClusterSet, RedisServer, SentinelSet, poll
from celery_redislock.engine.timing import server_time
from tests.harness import GrantRecorder, contend, counting_client, most_in_a_window


def test_no_window_of_one_period_holds_more_than_n_starts_and_the_limit_is_used(
    redislock_redis: redis.Redis,
) -> None:
    key = "redislock:rate:api"
    record = GrantRecorder(redislock_redis, key)
    granted = contend(lambda: RedisRateLimiter(redislock_redis, "api", "10/s"), threads=8, seconds=3.2)
    starts = record.stop()
    assert len(starts) == granted
    assert most_in_a_window(starts, 1.0) == 10
    # Blocking callers keep the limit busy: 10 at once, then 10 a second.
    assert granted >= 10 + 2 * 10 * 0.95


def test_try_acquire_says_how_long_to_wait_and_reserves_nothing(redislock_redis: redis.Redis) -> None:
    limiter = RedisRateLimiter(redislock_redis, "calls", "2/s")
    assert limiter.try_acquire() and limiter.try_acquire()
    first, second = sorted(
        score / 1000 for member, score in redislock_redis.zrange(limiter.key, 0, -1, withscores=True)
    )

    def names_the_free_slot(before: float, wait: float, after: float) -> None:
        # By the server's clock, which the answer is on (the caller's pace is the load's): the
        # slot it names is when the first start has left the window, not sooner, and not later
        # than when the newest has. Told between two readings of TIME (a millisecond's rounding).
        assert after + wait >= first + 1.0 and before - 0.001 + wait <= second + 1.001, (first, second)

    before = server_time(redislock_redis)
    refused = limiter.try_acquire()
    names_the_free_slot(before, refused.wait, server_time(redislock_redis))
    assert not refused and not refused.reserved
    assert not [m for m in redislock_redis.zrange(limiter.key, 0, -1) if m.startswith(b"r:")]
    before = server_time(redislock_redis)
    state = limiter.state()
    assert state is not None and state.started == 2 and state.reserved == 0
    names_the_free_slot(before, state.next_free, server_time(redislock_redis))


def test_a_blocking_acquire_waits_for_its_slot_and_gives_up_past_its_timeout(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    client, trips = counting_client(redislock_server.url)
    limiter = RedisRateLimiter(client, "slow", "2/s")
    record = GrantRecorder(redislock_redis, limiter.key)
    assert limiter.acquire() and limiter.acquire()
    began = time.monotonic()
    trips.reset()
    assert not limiter.acquire(timeout=0.3)  # the next slot is ~1 s away: nothing reserved
    # Given up at once: one decision, not a wait and a second look (counted, not timed).
    assert trips.count == 1
    assert redislock_redis.zcard(limiter.key) == 2
    assert limiter.acquire(timeout=5)
    assert time.monotonic() - began > 0.85  # it waited, in the caller
    # For its slot, by the server's clock: a period after the first start.
    first, _, third = record.stop()
    assert third - first > 1.0  # a closed window of one period holds the first two only
    client.close()


def test_a_waiting_caller_is_not_overtaken_by_later_ones(redislock_redis: redis.Redis) -> None:
    first = RedisRateLimiter(redislock_redis, "fifo", "1/s")
    assert first.acquire()
    order: list[str] = []
    waiter = threading.Thread(target=lambda: (first.acquire(), order.append("waiter")))
    waiter.start()
    assert poll(lambda: redislock_redis.zcount(first.key, "-inf", "+inf") == 2)  # its slot reserved
    later = RedisRateLimiter(redislock_redis, "fifo", "1/s")
    refused = later.try_acquire()
    # The slot after the reserved one: a period after it, not the reserved one's.
    assert not refused and refused.wait > 1.5
    waiter.join(5)
    assert order == ["waiter"]
    state = later.state()
    assert state is not None and state.started == 1 and state.reserved == 0  # the waiter's


def test_partitions_are_independent(redislock_redis: redis.Redis) -> None:
    a = RedisRateLimiter(redislock_redis, "account:a", "3/m")
    b = RedisRateLimiter(redislock_redis, "account:b", "3/m")
    assert [bool(a.try_acquire()) for _ in range(4)] == [True, True, True, False]
    assert [bool(b.try_acquire()) for _ in range(3)] == [True, True, True]
    assert 59 < a.try_acquire().wait <= 60.001


def test_the_log_expires_when_no_entry_matters_any_more(redislock_redis: redis.Redis) -> None:
    limiter = RedisRateLimiter(redislock_redis, "brief", "5/s", prefix="{tenant}:rate")
    assert limiter.key == "{tenant}:rate:brief"
    assert limiter.try_acquire()
    assert 0 < redislock_redis.pttl(limiter.key) <= 1001
    assert poll(lambda: redislock_redis.exists(limiter.key) == 0, timeout=3)


@pytest.mark.parametrize(
    ("rate", "problem"),
    [
        (
            "10/x",
            "must be a rate 'N/s', 'N/m' or 'N/h' (N an int from 1 to 1000000000), optionally with a burst: "
            "'N/s burst B' (B an int from 1 to 1000000000), got '10/x'",
        ),
        ("10/s burst 0", "got '10/s burst 0' (B is 0)"),
        ("5/s, 5/s", "must not name a rate twice, got '5/s, 5/s'"),
        ([], "or several, got [] (a list)"),
        ("0/s", "got '0/s' (N is 0)"),
        (10, "got 10 (a int)"),
        ("ten/m", "got 'ten/m'"),
    ],
)
def test_a_bad_rate_is_refused_naming_it(redislock_redis: redis.Redis, rate: object, problem: str) -> None:
    with pytest.raises(OptionError, match=r"^RedisRateLimiter\('api'\): option 'rate' ") as raised:
        RedisRateLimiter(redislock_redis, "api", rate)
    assert problem in str(raised.value)


@pytest.fixture
def cluster_client(cluster: ClusterSet) -> Iterator[RedisCluster]:
    client = make_client(cluster.url)
    assert isinstance(client, RedisCluster)
    yield client
    client.close()


def test_on_a_cluster_each_partition_is_limited_on_its_node(cluster_client: RedisCluster) -> None:
    limiters = [RedisRateLimiter(cluster_client, f"p{n}", "3/s") for n in range(12)]
    nodes = {cluster_client.get_node_from_key(limiter.key).name for limiter in limiters}
    assert len(nodes) == 3, "the partitions must spread over the three primaries"
    for limiter in limiters:
        assert [bool(limiter.try_acquire()) for _ in range(4)] == [True, True, True, False]
    record = GrantRecorder(cluster_client, limiters[0].key)
    granted = contend(lambda: RedisRateLimiter(cluster_client, "p0", "3/s"), threads=4, seconds=2.2)
    assert most_in_a_window(record.stop(), 1.0) <= 3
    assert granted >= 4  # the next second's slots, one every third of a second from 1 s on


def test_through_sentinel(sentinels: SentinelSet) -> None:
    client = make_client(sentinels.url, sentinels.transport_options, socket_timeout=5)
    try:
        limiter = RedisRateLimiter(client, "sentinel", "2/s")
        assert [bool(limiter.try_acquire()) for _ in range(3)] == [True, True, False]
        assert limiter.acquire(timeout=3)
    finally:
        client.close()
