"""The operator's holds against a real redis-server: what a worker's background read
(``peek_holds``: no script, no write) finds is what the script's read finds, a hold that ended
left out (and left for the script to delete), a field or value written by hand ignored."""

from __future__ import annotations

import redis

from celery_redislock.contrib.testing import poll
from celery_redislock.engine.holds import Hold, hold_id, peek_holds, read_holds, set_hold
from celery_redislock.engine.keys import holds_key
from celery_redislock.engine.script_runner import ScriptRunner


def test_the_background_read_finds_what_the_script_finds_and_writes_nothing(
    redislock_redis: redis.Redis,
) -> None:
    scripts = ScriptRunner(redislock_redis)
    key = holds_key("peek")
    set_hold(scripts, "peek", "proj.sync", (("tenant", "acme"),), None)
    set_hold(scripts, "peek", "proj.sync", (), 600)
    set_hold(scripts, "peek", "proj.ended", (), 0.05)
    redislock_redis.hset(key, "not a hold id", "0")
    redislock_redis.hset(key, hold_id("proj.bad", ()), "not a time")
    stats = redislock_redis.info("commandstats")
    scripts_before = stats.get("cmdstat_evalsha", {}).get("calls", 0) + stats.get("cmdstat_eval", {}).get(
        "calls", 0
    )

    assert poll(lambda: [hold.task for hold in peek_holds(redislock_redis, "peek")] == ["proj.sync"] * 2, 5)
    peeked = peek_holds(redislock_redis, "peek")
    assert peeked[1] == Hold("proj.sync", (("tenant", "acme"),), None)
    assert peeked[0].key == () and peeked[0].left is not None and 590 < peeked[0].left <= 600
    stats = redislock_redis.info("commandstats")
    scripts_after = stats.get("cmdstat_evalsha", {}).get("calls", 0) + stats.get("cmdstat_eval", {}).get(
        "calls", 0
    )
    assert scripts_after == scripts_before  # no script run
    assert redislock_redis.hexists(key, hold_id("proj.ended", ()))  # ended, left in place

    read = read_holds(scripts, "peek")
    assert [(hold.task, hold.key, hold.left is None) for hold in read] == [
        (hold.task, hold.key, hold.left is None) for hold in peeked
    ]
    assert not redislock_redis.hexists(key, hold_id("proj.ended", ()))  # the script deletes it
    redislock_redis.delete(key)
