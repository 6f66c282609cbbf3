"""The dedup modes' scripts on one real Redis: the decisions keep_latest.lua and debounce's
scripts take atomically."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine.holders import any_delivery_prefix
from celery_redislock.engine.script_runner import ScriptRunner
from celery_redislock.modes import debounce, keep_latest
from celery_redislock.modes.keep_latest import latest_key

KEY = "redislock:modes.t:0123"


@pytest.fixture
def client(redislock_server: RedisServer) -> Iterator[redis.Redis]:
    client = redislock_server.client(db=6)
    client.flushdb()
    yield client
    client.close()


def step(scripts: ScriptRunner, task_id: str, delivery: int, *, recheck: bool = False) -> tuple[str, str]:
    reply = keep_latest.step(
        scripts,
        KEY,
        f"{task_id}@w:{delivery}",
        10_000,
        task_id,
        60_000,
        recheck=recheck,
        deliveries=any_delivery_prefix(task_id),
    )
    return reply.status, reply.other


def test_a_redelivered_copy_of_the_running_message_does_not_replace_the_pending_call(
    client: redis.Redis,
) -> None:
    modes = ScriptRunner(client)
    assert step(modes, "a", 1) == ("run", "")
    assert step(modes, "b", 1) == ("pending", "a@w:1")
    # The broker gives "a" out again while it runs: not a new call, the pending "b" stays latest.
    assert step(modes, "a", 2) == ("pending", "a@w:1")
    assert client.get(latest_key(KEY)) == b"b"
    assert step(modes, "b", 1, recheck=True) == ("pending", "a@w:1")
    client.delete(KEY)  # "a" ends
    assert step(modes, "b", 1, recheck=True) == ("run", "")


def test_a_later_call_replaces_the_pending_one_and_only_the_latest_runs(client: redis.Redis) -> None:
    modes = ScriptRunner(client)
    assert step(modes, "a", 1) == ("run", "")
    assert step(modes, "b", 1) == ("pending", "a@w:1")
    assert step(modes, "c", 1) == ("pending", "a@w:1")
    client.delete(KEY)
    assert step(modes, "b", 1, recheck=True) == ("replaced", "c")
    assert step(modes, "c", 1, recheck=True) == ("run", "")
    assert 0 < client.pttl(latest_key(KEY)) <= 60_000  # every key has a TTL


def test_a_burst_s_keys_last_until_its_last_call_comes_due_in_any_order(client: redis.Redis) -> None:
    modes = ScriptRunner(client)
    for call in ("a", "b", "c"):
        debounce.debounce_call(modes, KEY, call, 1_000, 0, 3_600_000, 3_600_000)
    assert debounce.debounce_run(modes, KEY, "c")[0] is True  # the latest runs first...
    # ...and a superseded call due before it but taken late (a busy worker) is still skipped.
    assert debounce.debounce_run(modes, KEY, "a")[0] == "c"
    assert client.exists(*debounce.debounce_keys(KEY)) == 2  # "b" is still queued
    assert debounce.debounce_run(modes, KEY, "b")[0] == "c"
    assert client.exists(*debounce.debounce_keys(KEY)) == 0  # the last call out deleted them
    # A copy of a call the broker gives out again finds nothing recorded (the task decides).
    assert debounce.debounce_run(modes, KEY, "a")[0] is False


def test_a_call_with_a_longer_countdown_keeps_its_burst_s_record_as_long(client: redis.Redis) -> None:
    modes = ScriptRunner(client)
    debounce.debounce_call(modes, KEY, "a", 1_000, 0, 7_200_000, 3_600_000)  # countdown: 2 h
    debounce.debounce_call(modes, KEY, "b", 1_000, 0, 3_600_000, 3_600_000)
    debounce_key, _, calls_key = debounce.debounce_keys(KEY)
    assert client.pttl(debounce_key) > 3_600_000 and client.pttl(calls_key) > 3_600_000
    # No debounce_max: the burst's first-call time is never read, so never written.
    assert client.exists(debounce.debounce_keys(KEY)[1]) == 0
