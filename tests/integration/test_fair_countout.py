"""Fair share's count-out thread against a real redis-server: the tickets a worker receives are
counted out by the process's thread, one script call per queue for a batch, each once; what is
still buffered at ``stop()`` is counted out then."""

from __future__ import annotations

import redis

from celery_redislock.contrib.testing import poll
from celery_redislock.engine.fair_countout import CountOut
from celery_redislock.engine.fair_lanes import FairLanes
from celery_redislock.engine.script_runner import ScriptRunner


def script_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval"))


def test_a_batch_is_one_script_call_per_queue_and_counts_each_ticket_out_once(
    redislock_redis: redis.Redis,
) -> None:
    runner = ScriptRunner(redislock_redis)
    queues = {queue: FairLanes(runner, "redislock", queue) for queue in ("q1", "q2")}
    for queue, lanes in queues.items():
        for n in range(300):
            lanes.assign(f"tenant{n % 7}", f"{queue}-{n}", 4)
    # A delay no test waits out: the batch is counted out by stop(), all of it at once.
    countout = CountOut(delay=3600)
    for n in range(300):
        for queue in queues:
            countout.add(runner, "redislock", queue, f"{queue}-{n}")
    countout.add(runner, "redislock", "q1", "q1-0")  # given out twice: counted out once
    assert countout.pending() == 601
    assert all(lanes.state().queued == 300 for lanes in queues.values())  # nothing counted yet
    queues["q1"].started("never-assigned")  # its script known to the server: no NOSCRIPT retry below
    before = script_calls(redislock_redis)
    assert countout.stop() == 600
    assert script_calls(redislock_redis) - before == 2  # one call per queue for the batch
    assert not redislock_redis.keys("*fair*")


def test_the_thread_counts_out_what_arrives_without_being_told(redislock_redis: redis.Redis) -> None:
    runner = ScriptRunner(redislock_redis)
    lanes = FairLanes(runner, "redislock", "q")
    countout = CountOut(delay=0.01)
    try:
        for n in range(3):
            lanes.assign("a", f"t{n}", 2)
        for n in range(3):
            countout.add(runner, "redislock", "q", f"t{n}")
            assert poll(lambda left=2 - n: lanes.state().queued == left, 10)
    finally:
        assert countout.stop() == 0
