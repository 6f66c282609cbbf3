"""RedisSemaphore against a real redis-server: the limit under contention, fairness, dead holders
and waiters, renewal, and the engine's scripts."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from celery_redislock import LockAcquireError, LockNotOwnedError, OptionError, RedisSemaphore
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine import AcquireStatus, Lease, SemaphoreEngine, SemaphoreLease
from celery_redislock.engine.renewal import LeaseEvent, add_listener, get_renewer, remove_listener
from tests.harness import counting_client

from .helpers import contenders, holder_process, inside_function, killed_holder, poll


@pytest.fixture
def engine(redislock_redis: redis.Redis) -> SemaphoreEngine:
    return SemaphoreEngine(redislock_redis)


def test_at_most_limit_holders_and_the_next_gets_in_when_one_leaves(redislock_redis: redis.Redis) -> None:
    held = [RedisSemaphore(redislock_redis, "pool", 3, timeout=5) for _ in range(3)]
    assert all(s.acquire() for s in held)
    assert all(s.owned() for s in held)
    fourth = RedisSemaphore(redislock_redis, "pool", 3, timeout=5, blocking=False)
    assert fourth.locked()
    assert not fourth.acquire()
    with pytest.raises(LockAcquireError, match="Could not acquire pool without blocking: it is held by "):
        fourth.__enter__()
    assert set(redislock_redis.zrange("pool", 0, -1)) == {str(s.holder).encode() for s in held}
    held[0].release()
    assert not fourth.locked()
    assert fourth.acquire()
    for s in [*held[1:], fourth]:
        s.release()
    assert redislock_redis.exists("pool") == 0  # the last one out deletes the set


def test_fifty_threads_never_more_than_limit_inside_and_all_served(redislock_server: RedisServer) -> None:
    client = redislock_server.client()
    inside = inside_function()
    barrier = threading.Barrier(50)

    def contend() -> None:
        barrier.wait()
        with RedisSemaphore(client, "fifty", 3, timeout=10, retry_delay=0.2):
            inside(client, "f", 3, 0.005)
        client.rpush("f:served", 1)

    threads = [threading.Thread(target=contend) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    assert client.llen("f:served") == 50
    seen = [int(n) for n in client.lrange("f:seen", 0, -1)]
    assert max(seen) <= 3
    assert max(seen) > 1  # it did let several in at once
    assert client.llen("f:overflow") == 0  # never a fourth slot claimed
    assert client.exists("fifty", "{fifty}:queue", "{fifty}:alive") == 0


@pytest.mark.slow
def test_processes_and_threads_contend_within_the_limit(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    with contenders(
        redislock_server.url, "m", "semaphore", "across", 2, processes=3, threads=5, rounds=2, hold=0.005
    ) as procs:
        for process in procs:
            assert process.wait(120) == 0
    assert redislock_redis.llen("m:served") == 3 * 5 * 2
    assert max(int(n) for n in redislock_redis.lrange("m:seen", 0, -1)) <= 2
    assert redislock_redis.llen("m:overflow") == 0


def test_waiters_are_served_in_arrival_order(redislock_redis: redis.Redis) -> None:
    gate = RedisSemaphore(redislock_redis, "fair", 1, timeout=30)
    assert gate.acquire()
    order: list[int] = []

    def wait(n: int) -> None:
        with RedisSemaphore(redislock_redis, "fair", 1, timeout=30, retry_delay=0.2, acquire_timeout=60):
            order.append(n)

    threads = []
    for n in range(8):
        thread = threading.Thread(target=wait, args=(n,))
        thread.start()
        threads.append(thread)
        # Arrival order: the next one starts only once this one has its ticket.
        assert poll(lambda n=n: redislock_redis.zcard("{fair}:queue") == n + 1)
    tickets = [int(score) for _, score in redislock_redis.zrange("{fair}:queue", 0, -1, withscores=True)]
    assert tickets == sorted(tickets) and len(set(tickets)) == 8
    gate.release()
    for thread in threads:
        thread.join(60)
    assert order == list(range(8))


def test_waiters_that_time_out_leave_the_queue(redislock_redis: redis.Redis) -> None:
    gate = RedisSemaphore(redislock_redis, "shut", 1, timeout=30)
    gate.acquire()
    results: list[bool] = []

    def wait() -> None:
        results.append(
            RedisSemaphore(redislock_redis, "shut", 1, acquire_timeout=0.5, retry_delay=0.1).acquire()
        )

    threads = [threading.Thread(target=wait) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [False] * 10
    assert redislock_redis.zcard("{shut}:queue") == 0 and redislock_redis.zcard("{shut}:alive") == 0
    assert redislock_redis.zrange("shut", 0, -1) == [str(gate.holder).encode()]
    gate.release()


def test_a_non_blocking_acquire_never_takes_a_slot_a_waiter_is_owed(engine: SemaphoreEngine) -> None:
    assert engine.acquire("owed", "h", 1, 30_000).status is AcquireStatus.TAKEN
    queued = engine.acquire("owed", "w", 1, 30_000, wait_ttl_ms=30_000)
    assert not queued.acquired and queued.holders == ("h",) and queued.ticket == 1
    assert engine.release("owed", "h")
    jumper = engine.acquire("owed", "x", 1, 30_000)
    assert not jumper.acquired and jumper.holders == () and jumper.ticket == 0
    assert engine.acquire("owed", "w", 1, 30_000, wait_ttl_ms=30_000, ticket=1).acquired
    assert engine.acquire("owed", "w", 1, 30_000).status is AcquireStatus.REENTERED


def test_a_waiter_dropped_while_alive_gets_its_place_back(
    engine: SemaphoreEngine, redislock_redis: redis.Redis
) -> None:
    engine.acquire("back", "h", 1, 30_000)
    first = engine.acquire("back", "first", 1, 30_000, wait_ttl_ms=30_000)
    engine.acquire("back", "second", 1, 30_000, wait_ttl_ms=30_000)
    redislock_redis.zrem("{back}:queue", "first")  # as if its liveness had lapsed
    redislock_redis.zrem("{back}:alive", "first")
    engine.acquire("back", "first", 1, 30_000, wait_ttl_ms=30_000, ticket=first.ticket)
    engine.release("back", "h")
    assert not engine.acquire("back", "second", 1, 30_000, wait_ttl_ms=30_000).acquired
    assert engine.acquire("back", "first", 1, 30_000, wait_ttl_ms=30_000, ticket=first.ticket).acquired


def test_a_killed_holder_process_is_replaced_after_its_timeout(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    dead = killed_holder(redislock_redis, redislock_server.url, "semaphore", "dies", 1, 1.0, "d")
    assert redislock_redis.zrange("dies", 0, -1) == [dead]  # its slot is still counted
    successor = RedisSemaphore(redislock_redis, "dies", 1, timeout=30, acquire_timeout=30, retry_delay=0.1)
    assert successor.acquire()
    assert redislock_redis.zrange("dies", 0, -1) == [str(successor.holder).encode()]
    successor.release()


def test_a_killed_waiter_does_not_block_the_queue(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    gate = RedisSemaphore(redislock_redis, "stuck", 1, timeout=30)
    gate.acquire()
    with holder_process(redislock_server.url, "waiter", "stuck", 1, 30, "w") as process:
        assert poll(lambda: redislock_redis.zcard("{stuck}:queue") == 1)  # first in line
        results: list[bool] = []
        behind = RedisSemaphore(redislock_redis, "stuck", 1, timeout=30, acquire_timeout=60, retry_delay=0.2)
        thread = threading.Thread(target=lambda: results.append(behind.acquire()))
        thread.start()
        assert poll(lambda: redislock_redis.zcard("{stuck}:queue") == 2)
        process.kill()
        process.wait(10)
    gate.release()
    thread.join(60)
    assert results == [True]  # served once the dead waiter's liveness lapsed
    behind.release()


def test_a_renewed_slot_outlives_its_timeout_and_a_lost_one_is_retaken(redislock_redis: redis.Redis) -> None:
    retaken: list[str] = []

    def told(event: LeaseEvent, lease: Lease, other: str | None) -> None:
        if event == "retaken":
            retaken.append(lease.holder)

    add_listener(told)
    sem = RedisSemaphore(redislock_redis, "renewed", 2, timeout=0.5)
    try:
        with sem:
            deadline = time.monotonic() + 1.0  # two timeouts: only renewal keeps it
            while time.monotonic() < deadline:
                assert sem.owned()
                time.sleep(0.05)
            redislock_redis.delete("renewed")  # Redis lost it (a restart)
            # Taken back by the next cycle: the timer's own, or this one if it comes first.
            get_renewer().renew_now()
            assert poll(lambda: retaken == [sem.holder], 5)
            assert sem.owned()
    finally:
        remove_listener(told)


def test_a_slot_lost_to_others_raises_on_release(redislock_redis: redis.Redis) -> None:
    sem = RedisSemaphore(redislock_redis, "lost", 1, timeout=0.2, renew=False)
    sem.acquire()
    other = RedisSemaphore(redislock_redis, "lost", 1, timeout=30, acquire_timeout=30, retry_delay=0.05)
    assert other.acquire()  # after ours expired on the server's clock
    with pytest.raises(LockNotOwnedError) as caught:
        sem.release()
    assert str(caught.value) == (
        f"Cannot release semaphore lost: it is not owned by {caught.value.holder}, it is now held by {other.holder}"
    )
    other.release()


def test_extend_reports_a_full_semaphore(redislock_redis: redis.Redis) -> None:
    sem = RedisSemaphore(redislock_redis, "ext", 1, timeout=0.2, renew=False)
    sem.acquire()
    other = RedisSemaphore(redislock_redis, "ext", 1, timeout=30, acquire_timeout=30, retry_delay=0.05)
    assert other.acquire()
    with pytest.raises(LockNotOwnedError, match=r"Cannot extend semaphore ext: .* now held by"):
        sem.extend()
    other.extend(60)
    assert redislock_redis.zscore("ext", str(other.holder)) is not None
    other.release()


def test_slots_and_locks_renew_in_one_round_trip_each(redislock_server: RedisServer) -> None:
    from celery_redislock import RedisLock

    client, trips = counting_client(redislock_server.url)
    held = [RedisSemaphore(client, f"s:{n}", 2, timeout=60) for n in range(10)]
    held += [RedisLock(client, f"l:{n}", timeout=60) for n in range(10)]  # type: ignore[misc]
    for item in held:
        item.acquire()
    get_renewer().renew_now()  # the first call of a script also loads it (NOSCRIPT, SCRIPT LOAD)
    trips.count = 0
    report = get_renewer().renew_now()
    assert {lease.key for lease in report.renewed} >= {item.name for item in held}
    assert trips.count == 2  # one for the locks, one for the semaphores of this client
    for item in held:
        item.release()


def test_a_plain_lock_at_the_key_counts_as_full(
    engine: SemaphoreEngine, redislock_redis: redis.Redis
) -> None:
    redislock_redis.set("typed", "lock-holder")
    result = engine.acquire("typed", "me", 3, 30_000)
    assert not result.acquired and result.holders == ("lock-holder",)
    assert engine.state("typed") is None
    assert not engine.release("typed", "lock-holder")
    assert redislock_redis.get("typed") == b"lock-holder"


def test_state_lists_live_holders_by_the_server_clock(engine: SemaphoreEngine) -> None:
    engine.acquire("st", "a", 3, 10_000)
    engine.acquire("st", "b", 3, 20_000)
    state = engine.state("st")
    assert state is not None and state.waiting == 0
    assert [h for h, _ in state.holders] == ["a", "b"]
    assert all(0 < left <= 20_000 for _, left in state.holders)
    assert engine.states(["st", "none"])[1] == type(state)((), 0)


def test_release_by_prefix_frees_a_dead_process_slots_only(engine: SemaphoreEngine) -> None:
    for holder in ("task1@node:11:1", "task1@node:11:2", "task2@node:12:1"):
        engine.acquire("pre", holder, 5, 30_000)
    assert engine.release_holder_prefix("pre", "task1@node:")
    state = engine.state("pre")
    assert state is not None and [h for h, _ in state.holders] == ["task2@node:12:1"]
    assert not engine.release_holder_prefix("pre", "task9@")


def test_holders_names_every_live_slot_holder(engine: SemaphoreEngine) -> None:
    assert engine.holders("hs") == ()
    for holder in ("task1@node:11:1", "task1@node:12:1"):
        engine.acquire("hs", holder, 3, 30_000)
    assert engine.holders("hs") == ("task1@node:11:1", "task1@node:12:1")


def test_a_sibling_holding_a_slot_refuses_another_delivery_of_its_task(engine: SemaphoreEngine) -> None:
    assert engine.acquire("sib", "other@a:1:1", 3, 30_000, siblings="task1@").acquired
    assert engine.acquire("sib", "task1@a:1:1", 3, 30_000, siblings="task1@").acquired
    # Two slots are free, but a delivery of task1 holds one: the copy is refused, named alone.
    copy = engine.acquire("sib", "task1@b:2:1", 3, 30_000, siblings="task1@")
    assert not copy.acquired and copy.holders == ("task1@a:1:1",) and copy.ticket == 0
    # The holder itself still re-enters; another task's delivery takes a free slot.
    assert (
        engine.acquire("sib", "task1@a:1:1", 3, 30_000, siblings="task1@").status is AcquireStatus.REENTERED
    )
    assert engine.acquire("sib", "task2@b:2:1", 3, 30_000, siblings="task2@").acquired


def test_the_lease_of_a_slot_carries_its_limit(engine: SemaphoreEngine) -> None:
    engine.acquire("lim", "a", 1, 30_000)
    report = engine.renew_many([SemaphoreLease("lim", "b", 30_000, 1)])
    assert report.stolen and report.stolen[0][1] == "a"


def test_a_bad_limit_is_named(redislock_redis: redis.Redis) -> None:
    with pytest.raises(
        OptionError, match=r"RedisSemaphore\('x'\): option 'limit' must be an int >= 1, got 0"
    ):
        RedisSemaphore(redislock_redis, "x", 0)


def test_a_lock_renewed_after_its_key_became_a_semaphore_is_reported_and_spares_the_batch(
    engine: SemaphoreEngine, redislock_redis: redis.Redis
) -> None:
    from celery_redislock.engine import Lease, LockEngine

    locks = LockEngine(redislock_redis)
    locks.acquire("plain", "me", 30_000)
    engine.acquire("changed", "task@w:1:1", 3, 30_000)  # max_concurrency went from 1 to 3
    report = locks.renew_many([Lease("changed", "me", 30_000), Lease("plain", "me", 30_000)])
    assert [lease.key for lease in report.renewed] == ["plain"]
    [(lease, other)] = report.stolen
    assert lease.key == "changed" and other.startswith("a semaphore (WRONGTYPE")


def test_shutdown_gives_back_the_slots_and_locks_the_process_holds(redislock_redis: redis.Redis) -> None:
    from celery_redislock import RedisLock

    sem = RedisSemaphore(redislock_redis, "down:s", 2, timeout=60)
    lock = RedisLock(redislock_redis, "down:l", timeout=60)
    sem.acquire()
    lock.acquire()
    assert get_renewer().release_all() == 2  # what worker shutdown calls
    assert redislock_redis.exists("down:s", "down:l") == 0
