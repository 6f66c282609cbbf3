"""Limits v2 of RedisRateLimiter against a real redis-server: several rates and several limiters
decided together (a call refused by one takes no unit of another), a cost per call, a burst, a
pause, runtime rates, and the same on a Redis Cluster. Every promise is read on the server's clock,
from the limiter's own records (its log's grants, its pause key), never the test's clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from celery_redislock import OptionError, RedisRateLimiter
from celery_redislock.config.lock_client import make_client
from celery_redislock.contrib.testing import ClusterSet, poll
from celery_redislock.engine.keys import limit_keys
from celery_redislock.engine.rate_decisions import Limit, cancel_limits, decide_limits
from celery_redislock.engine.rates import Rate
from celery_redislock.engine.script_runner import ScriptRunner
from celery_redislock.engine.timing import server_time, to_ms, to_seconds
from tests.harness import GrantRecorder, contend, most_in_a_window


def grants(client: redis.Redis | RedisCluster, key: str) -> list[bytes]:
    """Every grant entry (a unit each) the log at ``key`` holds."""
    return [member for member in client.zrange(key, 0, -1) if member.startswith(b"g")]


def test_five_a_second_and_twenty_a_minute_are_both_held(redislock_redis: redis.Redis) -> None:
    key = "redislock:rate:both"
    record = GrantRecorder(redislock_redis, key)
    granted = contend(lambda: RedisRateLimiter(redislock_redis, "both", "5/s, 20/m"), threads=6, seconds=5)
    starts = record.stop()
    assert len(starts) == granted == 20  # 5 at once, then 5 a second until the minute's 20
    assert most_in_a_window(starts, 1.0) == 5
    # The 21st waits for the minute's first start to leave, by the server's clock.
    refused = RedisRateLimiter(redislock_redis, "both", ["5/s", "20/m"]).try_acquire()
    assert not refused
    assert refused.wait == pytest.approx(starts[0] + 60.001 - server_time(redislock_redis), abs=0.05)


def test_a_call_refused_by_one_limit_takes_no_unit_of_another(redislock_redis: redis.Redis) -> None:
    api = RedisRateLimiter(redislock_redis, "api", "100/m")
    user = RedisRateLimiter(redislock_redis, "user:7", "2/m", also=[api])
    assert [bool(user.try_acquire()) for _ in range(3)] == [True, True, False]
    assert not user.acquire(timeout=1)  # a slot a minute away: nothing reserved either
    assert len(grants(redislock_redis, api.key)) == 2
    assert redislock_redis.zcard(api.key) == redislock_redis.zcard(user.key) == 2
    # The other way round: the shared limit full, the user's own takes nothing.
    other = RedisRateLimiter(
        redislock_redis, "user:8", "5/m", also=[RedisRateLimiter(redislock_redis, "api", "2/m")]
    )
    assert not other.try_acquire()
    assert redislock_redis.zcard(other.key) == 0


def test_a_call_costing_three_of_thirty_a_second_starts_at_most_ten_a_second(
    redislock_redis: redis.Redis,
) -> None:
    key = "redislock:rate:tokens"
    record = GrantRecorder(redislock_redis, key)  # the first unit of each call: one per call
    granted = contend(
        lambda: RedisRateLimiter(redislock_redis, "tokens", "30/s"), threads=6, seconds=3.2, cost=3
    )
    calls = record.stop()
    assert len(calls) == granted
    assert most_in_a_window(calls, 1.0) == 10
    assert granted >= 10 + 2 * 10 * 0.95  # the limit is used: 10 at once, then 10 a second
    # Every unit is in the log: three per call of the last second.
    since = to_ms(server_time(redislock_redis) - 1)
    units = [
        m for m, at in redislock_redis.zrange(key, 0, -1, withscores=True) if m[:1] == b"g" and at >= since
    ]
    assert len(units) % 3 == 0 and len(units) <= 30


def test_a_cost_above_a_limit_is_refused_naming_the_limit(redislock_redis: redis.Redis) -> None:
    api = RedisRateLimiter(redislock_redis, "api", "10/s burst 20")
    user = RedisRateLimiter(redislock_redis, "user", "30/s", also=[api])
    with pytest.raises(OptionError, match=r"option 'cost' is 25, more than limit 'api' \(10/s burst 20\)"):
        user.try_acquire(cost=25)
    with pytest.raises(OptionError, match=r"option 'cost' must be an int >= 1, got 0"):
        user.acquire(cost=0)
    with pytest.raises(OptionError, match=r"names no limiter of this one: \['apl'\]"):
        user.try_acquire(cost={"apl": 2})
    assert user.try_acquire(cost={"api": 20, "user": 1})  # a cost per limiter
    assert not redislock_redis.exists(limit_keys(api.key)[0])  # a bucket-only limiter keeps no log
    assert redislock_redis.zcard(user.key) == 1


def test_a_burst_goes_through_at_once_then_the_steady_rate(redislock_redis: redis.Redis) -> None:
    limiter = RedisRateLimiter(redislock_redis, "bursty", "10/s burst 50")
    record = GrantRecorder(redislock_redis, limiter.key)
    assert all(limiter.try_acquire() for _ in range(50))  # a full bucket: 50 whatever the time taken
    granted = contend(
        lambda: RedisRateLimiter(redislock_redis, "bursty", "10/s burst 50"), threads=4, seconds=2.5
    )
    starts = record.stop()
    assert len(starts) == 50 + granted
    # The bucket's promise, by the server's clock (whole ms): at most 50 + 10 a second in any
    # window, so one start every 0.1 s after the burst.
    ms = [to_ms(at) for at in starts]
    for first in range(len(ms)):
        for last in range(first, len(ms)):
            assert last - first + 1 <= 50 + (ms[last] - ms[first]) // 100
    steady = starts[50:]  # and the steady rate is used
    assert len(steady) >= 0.9 * 10 * (steady[-1] - starts[0])


def test_a_pause_stops_every_start_until_its_end_and_loses_no_reservation(
    redislock_redis: redis.Redis,
) -> None:
    limiter = RedisRateLimiter(redislock_redis, "partner", "2/s")
    record = GrantRecorder(redislock_redis, limiter.key)
    assert limiter.try_acquire() and limiter.try_acquire()
    waited: list[bool] = []
    waiter = threading.Thread(target=lambda: waited.append(limiter.acquire(timeout=10)))
    waiter.start()
    assert poll(lambda: redislock_redis.zcard(limit_keys(limiter.key)[1]) == 1)  # its slot reserved
    assert 1.4 < limiter.pause(1.5) <= 1.5
    ends = to_seconds(int(redislock_redis.get(limit_keys(limiter.key)[4]) or 0))
    refused = limiter.try_acquire()
    assert not refused and refused.wait == pytest.approx(ends - server_time(redislock_redis), abs=0.05)
    assert limiter.pause(0.5) > 1.0  # a shorter pause keeps the longer one's end
    state = limiter.state()
    assert state is not None and state.paused > 1.0
    waiter.join(15)
    assert waited == [True]  # its reservation kept through the pause
    starts = record.stop()
    assert len(starts) == 3 and starts[2] >= ends
    assert limiter.try_acquire()
    assert not limiter.resume()  # over already


def test_a_runtime_rate_is_obeyed_at_the_next_decision_and_reset(redislock_redis: redis.Redis) -> None:
    worker = RedisRateLimiter(redislock_redis, "api", "10/m")
    operator = RedisRateLimiter(redislock_redis, "api", "10/m")  # another process, the same name
    assert worker.try_acquire()
    assert operator.set_rate("2/m") == (Rate(2, 60),)
    assert [bool(worker.try_acquire()) for _ in range(2)] == [True, False]  # 2 in the window now
    assert worker.current_rates() == (Rate(2, 60),)
    # A cost the runtime rate cannot admit at once waits for the limit (the declared one admits
    # it): told so, re-checked a period later, never refused (seen red: an OptionError).
    over = worker.try_acquire(cost=3)
    assert (over.allowed, over.status, over.limit, over.wait) == (False, "over", "api", 60.0)
    assert operator.reset_rate() and not operator.reset_rate()
    assert [bool(worker.try_acquire()) for _ in range(9)] == [True] * 8 + [False]
    with pytest.raises(OptionError, match=r"runtime rate of 'api': option 'rate' must be a rate"):
        operator.set_rate("2/d")
    # Something not written by set_rate is an error naming the limit and the hash, not a guess.
    redislock_redis.hset(worker.overrides, "api", "2/s")
    with pytest.raises(
        redis.ResponseError, match=r"runtime rates of api in .*overrides are not in the wire form"
    ):
        worker.try_acquire()


def test_a_prefix_with_a_hash_tag_shares_its_runtime_rates(redislock_redis: redis.Redis) -> None:
    one = RedisRateLimiter(redislock_redis, "a", "5/s", prefix="{partner}:rate")
    two = RedisRateLimiter(redislock_redis, "b", "5/s", prefix="{partner}:rate")
    assert one.overrides == two.overrides == "{partner}:rate:overrides"
    one.set_rate("1/m")
    assert two.current_rates() == (Rate(5, 1),) and one.current_rates() == (Rate(1, 60),)
    assert RedisRateLimiter(redislock_redis, "a", "5/s").overrides == "{redislock:rate:a}:overrides"


def test_a_slot_given_back_leaves_no_unit_in_any_limit(redislock_redis: redis.Redis) -> None:
    scripts = ScriptRunner(redislock_redis)
    # A window of 2 a minute and a bucket of 4 refilled one a minute; calls of 2 units.
    limits = (Limit("w:log", (Rate(2, 60),)), Limit("b:log", (Rate(1, 60, burst=4),)))
    assert decide_limits(scripts, limits, "a", reserve=True, cost=2)
    reserved = decide_limits(scripts, limits, "b", reserve=True, cost=2)
    assert reserved.status == "reserved" and 50 < reserved.wait <= 60.001
    bucket = limit_keys("b:log")[3]

    def scheduled() -> float:  # the bucket's schedule, seconds ahead of the server's clock
        return to_seconds(round(float(redislock_redis.hget(bucket, "s1") or 0))) - server_time(
            redislock_redis
        )

    assert 239 < scheduled() <= 240.001  # past the reserved slot, two units of a minute each
    assert cancel_limits(scripts, limits, "b", cost=2)
    assert redislock_redis.zcard(limit_keys("w:log")[1]) == 0  # both units of the reservation gone
    assert 119 < scheduled() <= 120.001
    assert not cancel_limits(scripts, limits, "b", cost=2)


@pytest.fixture
def cluster_client(cluster: ClusterSet) -> Iterator[RedisCluster]:
    client = make_client(cluster.url)
    assert isinstance(client, RedisCluster)
    yield client
    client.close()


def test_on_a_cluster_limits_of_one_hash_tag_are_decided_together(cluster_client: RedisCluster) -> None:
    prefix = "{partner}:rate"
    api = RedisRateLimiter(cluster_client, "api", "3/m", prefix=prefix)
    users = [
        RedisRateLimiter(cluster_client, f"user:{n}", "2/m", prefix=prefix, also=[api]) for n in range(2)
    ]
    assert [bool(users[0].try_acquire()) for _ in range(3)] == [True, True, False]
    assert [bool(users[1].try_acquire()) for _ in range(2)] == [True, False]  # the api's third
    assert len(grants(cluster_client, api.key)) == 3
    api.set_rate("5/m")
    assert users[1].try_acquire()
    assert api.pause(2) > 1.5
    assert not users[0].try_acquire() and not users[1].try_acquire()
    api.resume()
    # Limits without one tag land in different slots: refused when made, naming them.
    spread = [RedisRateLimiter(cluster_client, f"p{n}", "1/s") for n in range(12)]
    assert len({cluster_client.get_node_from_key(limiter.key).name for limiter in spread}) == 3
    with pytest.raises(OptionError, match=r"'p1', 'p0' are in different Redis Cluster slots"):
        RedisRateLimiter(cluster_client, "p1", "1/s", also=[spread[0]])


def test_a_call_re_queued_by_a_pause_is_a_new_attempt_and_its_copy_is_told(
    redislock_redis: redis.Redis,
) -> None:
    # What the task gate asks after a pause: the same task id and retries, one pause more.
    scripts = ScriptRunner(redislock_redis)
    limits = (Limit("redislock:rate:paused", (Rate(10, 1),)),)
    assert decide_limits(scripts, limits, "t", reserve=True, attempt=1).status == "granted"
    assert decide_limits(scripts, limits, "t", reserve=True, attempt=1).status == "started"
    assert decide_limits(scripts, limits, "t", reserve=True, attempt=1, pauses=1).status == "granted"
    assert decide_limits(scripts, limits, "t", reserve=True, attempt=1, pauses=1).status == "started"
    assert sorted(grants(redislock_redis, limits[0].key)) == [b"g:t:1", b"g:t:1.p1"]


def test_a_bucket_s_state_is_its_units_and_its_tat(redislock_redis: redis.Redis) -> None:
    # A unit a minute: nothing refills while the test reads it. Seen red when the state counted a
    # bucket as a window of N a period (3 started, the bucket's units unknown).
    limiter = RedisRateLimiter(redislock_redis, "bucket", "1/m burst 5")
    assert all(limiter.try_acquire() for _ in range(3))
    state = limiter.state()
    assert state is not None and state.burst == 5
    assert (state.tokens, state.next_free, state.paused) == (2, 0.0, 0.0)
    assert 170.0 < state.full_in <= 180.0  # three units of 60 s to refill
    assert limiter.try_acquire(cost=2)
    empty = limiter.state()
    assert empty is not None and empty.tokens == 0
    assert 50.0 < empty.next_free <= 60.0  # one unit's refill
    assert 299.0 < empty.full_in <= 300.0
    window = RedisRateLimiter(redislock_redis, "window", "5/m")
    assert window.try_acquire()
    counted = window.state()
    assert counted is not None and (counted.burst, counted.started) == (None, 1)
