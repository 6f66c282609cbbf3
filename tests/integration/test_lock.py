"""RedisLock against a real redis-server: threads and processes contend, expiry, renewal, errors."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from celery_redislock import LockAcquireError, LockError, LockNotOwnedError, OptionError, RedisLock
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine.renewal import get_renewer
from tests.harness import counting_client

from .helpers import contenders, inside_function, killed_holder, poll


def test_a_context_manager_holds_the_key_under_a_unique_holder_id(redislock_redis: redis.Redis) -> None:
    lock = RedisLock(redislock_redis, "jobs:42", timeout=5)
    with lock:
        holder = lock.holder
        assert holder is not None
        assert redislock_redis.get("jobs:42") == holder.encode()  # the key is the name, as given
        assert 0 < redislock_redis.pttl("jobs:42") <= 5000
        assert lock.owned() and lock.locked()
        assert not RedisLock(redislock_redis, "jobs:42").acquire(blocking=False)
    assert lock.holder is None
    assert not lock.locked() and not lock.owned()
    assert redislock_redis.exists("jobs:42") == 0
    with lock:  # a new acquisition is a new holder id
        assert lock.holder != holder


def test_fifty_threads_buy_ten_tickets_and_none_is_sold_twice(redislock_server: RedisServer) -> None:
    client = redislock_server.client()
    client.set("t:left", 10)
    inside = inside_function()
    barrier = threading.Barrier(50)

    def buyer() -> None:
        barrier.wait()
        with RedisLock(client, "tickets", timeout=10, retry_delay=0.2):
            inside(client, "t", 1, 0.002)

    threads = [threading.Thread(target=buyer) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    sold = sorted(int(n) for n in client.lrange("t:sold", 0, -1))
    assert sold == list(range(1, 11))  # each of the 10 tickets exactly once
    assert {int(n) for n in client.lrange("t:seen", 0, -1)} == {1}  # never two inside
    assert client.llen("t:seen") == 50  # every buyer got in
    assert client.exists("tickets") == 0


@pytest.mark.slow
def test_processes_and_threads_contend_and_never_two_are_inside(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    redislock_redis.set("p:left", 12)
    with contenders(
        redislock_server.url, "p", "lock", "shared", 1, processes=3, threads=4, rounds=2, hold=0.002
    ) as procs:
        for process in procs:
            assert process.wait(120) == 0
    assert redislock_redis.llen("p:served") == 3 * 4 * 2
    assert {int(n) for n in redislock_redis.lrange("p:seen", 0, -1)} == {1}
    assert redislock_redis.llen("p:overflow") == 0
    assert sorted(int(n) for n in redislock_redis.lrange("p:sold", 0, -1)) == list(range(1, 13))


def test_acquire_in_one_thread_release_in_another(redislock_redis: redis.Redis) -> None:
    lock = RedisLock(redislock_redis, "handed", timeout=5)
    thread = threading.Thread(target=lock.acquire)
    thread.start()
    thread.join()
    assert lock.owned()
    thread = threading.Thread(target=lock.release)
    thread.start()
    thread.join()
    assert redislock_redis.exists("handed") == 0


def test_one_object_is_one_holder(redislock_redis: redis.Redis) -> None:
    lock = RedisLock(redislock_redis, "once", timeout=5)
    with pytest.raises(LockError, match="Cannot release lock once: this object does not hold it"):
        lock.release()
    with pytest.raises(LockError, match="Cannot extend lock once"):
        lock.extend()
    assert lock.acquire()
    with pytest.raises(LockError, match=r"already held .* by this RedisLock object"):
        lock.acquire()
    lock.release()


def test_a_blocked_acquire_is_woken_by_the_release_not_by_polling(redislock_server: RedisServer) -> None:
    client, trips = counting_client(redislock_server.url)
    holder = RedisLock(redislock_server.client(), "woken", timeout=30)
    assert holder.acquire()
    redislock_server.client().script_flush()
    # The script is loaded once per server (the first call of a fresh one is answered NOSCRIPT
    # and sent again): not what this test counts.
    with RedisLock(client, "warm-up", timeout=30, blocking=False):
        RedisLock(client, "warm-up", blocking=False).acquire()
    trips.reset()
    # A minute between fallback attempts, and as long to wait in all: only the release's
    # notice can wake the waiter within the test's deadline.
    waiter = RedisLock(client, "woken", timeout=30, retry_delay=60, acquire_timeout=60)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire()))
    thread.start()
    assert poll(lambda: redislock_server.client().pubsub_numsub("woken:released")[0][1] == 1)
    holder.release()
    thread.join(30)
    assert got == [True]
    # The first attempt (SET NX finds it held, then the script), SUBSCRIBE, the attempt after
    # subscribing, one when the subscription is confirmed, the one after the notice.
    assert trips.count <= 6
    waiter.release()


def test_acquire_timeout_and_non_blocking_fail_with_the_holder_named(redislock_redis: redis.Redis) -> None:
    holder = RedisLock(redislock_redis, "busy", timeout=30)
    holder.acquire()
    assert RedisLock(redislock_redis, "busy", acquire_timeout=0.3, retry_delay=0.1).acquire() is False
    waiter = RedisLock(redislock_redis, "busy", acquire_timeout=0.3, retry_delay=0.1)
    with pytest.raises(
        LockAcquireError, match=f"Could not acquire busy within 0.3s: it is held by {holder.holder}"
    ):
        waiter.__enter__()
    with pytest.raises(LockAcquireError, match="without blocking") as caught:
        RedisLock(redislock_redis, "busy", blocking=False).__enter__()
    assert caught.value.holders == (holder.holder,) and caught.value.key == "busy"
    holder.release()


def test_releasing_a_lock_that_expired_and_was_taken_names_both_holders(redislock_redis: redis.Redis) -> None:
    mine = RedisLock(redislock_redis, "lapsed", timeout=0.2, renew=False)
    assert mine.acquire()
    assert poll(lambda: redislock_redis.exists("lapsed") == 0)  # expired: nothing renewed it
    theirs = RedisLock(redislock_redis, "lapsed", timeout=30)
    assert theirs.acquire()
    assert not mine.owned()
    with pytest.raises(LockNotOwnedError) as caught:
        mine.release()
    assert str(caught.value) == (
        f"Cannot release lock lapsed: it is not owned by {caught.value.holder}, it is now held by {theirs.holder}"
    )
    assert redislock_redis.get("lapsed") == str(theirs.holder).encode()  # untouched
    theirs.release()


def test_extend_of_a_lock_someone_else_took_raises(redislock_redis: redis.Redis) -> None:
    mine = RedisLock(redislock_redis, "taken", timeout=0.2, renew=False)
    mine.acquire()
    assert poll(lambda: redislock_redis.exists("taken") == 0)
    theirs = RedisLock(redislock_redis, "taken", timeout=30)
    theirs.acquire()
    with pytest.raises(LockNotOwnedError, match=r"Cannot extend lock taken: .* is now held by"):
        mine.extend()
    assert mine.holder is None  # no longer ours
    theirs.release()


def test_extend_resets_the_ttl_and_renewal_keeps_the_new_one(redislock_redis: redis.Redis) -> None:
    lock = RedisLock(redislock_redis, "longer", timeout=2)
    lock.acquire()
    lock.extend(60)
    assert redislock_redis.pttl("longer") > 30_000
    get_renewer().renew_now()
    assert redislock_redis.pttl("longer") > 30_000  # renewed with the extended TTL
    lock.release()


def test_a_renewed_lock_outlives_its_timeout(redislock_redis: redis.Redis) -> None:
    lock = RedisLock(redislock_redis, "kept", timeout=0.5)
    with lock:
        deadline = time.monotonic() + 1.0  # two timeouts: only renewal keeps it
        while time.monotonic() < deadline:
            assert lock.owned()
            time.sleep(0.05)
    assert all(lease.key != "kept" for _, lease in get_renewer().held())


def test_all_locks_of_a_client_renew_in_one_round_trip(redislock_server: RedisServer) -> None:
    client, trips = counting_client(redislock_server.url)
    locks = [RedisLock(client, f"many:{n}", timeout=60) for n in range(20)]
    for lock in locks:
        lock.acquire()
    get_renewer().renew_now()  # the first call of a script also loads it (NOSCRIPT, SCRIPT LOAD)
    trips.count = 0
    report = get_renewer().renew_now()
    assert {lease.key for lease in report.renewed} >= {lock.name for lock in locks}
    assert trips.count == 1
    for lock in locks:
        lock.release()


def test_a_killed_holder_process_is_replaced_after_its_timeout(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    dead = killed_holder(redislock_redis, redislock_server.url, "lock", "orphaned", 1, 1.0, "k")
    assert redislock_redis.get("orphaned") == dead  # still held: nobody released it
    successor = RedisLock(redislock_redis, "orphaned", timeout=30, acquire_timeout=30, retry_delay=0.1)
    assert successor.acquire()
    successor.release()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": 0}, "RedisLock('x'): option 'timeout' must be a number of seconds > 0, got 0"),
        ({"acquire_timeout": -1}, "option 'acquire_timeout' must be a number of seconds >= 0"),
        ({"retry_delay": "1"}, "option 'retry_delay' must be a number of seconds > 0, got '1' (a str)"),
        ({"renew": 1}, "option 'renew' must be True or False"),
    ],
)
def test_bad_arguments_are_named(
    redislock_redis: redis.Redis, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RedisLock(redislock_redis, "x", **kwargs)  # type: ignore[arg-type]


def test_a_name_must_be_a_non_empty_str(redislock_redis: redis.Redis) -> None:
    with pytest.raises(LockError, match="name must be a non-empty str, got ''"):
        RedisLock(redislock_redis, "")
