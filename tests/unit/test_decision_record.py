"""The record of decisions, pure parts: the uncontended path's record packed by hand is the
commands ``quiet_commands`` packs; an entry reads back, an untimed one timed by its TTL left."""

from __future__ import annotations

import json

import pytest

from celery_redislock.engine.decision_record import Recorder, parse_entry, recorded_script
from celery_redislock.engine.keys import record_key, slot_key
from celery_redislock.engine.quiet_commands import quiet_commands, unpack_quiet

KEY = "redislock:tasks.build:0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    ("prefix", "task_id", "task_name"),
    [
        ("redislock", "0f1e2d3c-aaaa-bbbb-cccc-111122223333", "tasks.build"),
        ("{tag}redislock", "0f1e2d3c-aaaa-bbbb-cccc-111122223333", "tasks.build"),  # a hash tag kept
        ("redislock", "id-with-{braces}", "tasks.build"),
        ("redislock", "idé", "tasks.build"),  # not ASCII: bytes counted, not characters
        ("redislock", "plain-id", 'tasks."quoted"'),  # a key JSON must escape
    ],
)
def test_the_packed_take_is_the_commands_it_stands_for(prefix: str, task_id: str, task_name: str) -> None:
    key = f"{prefix}:{task_name}:0123456789abcdef0123456789abcdef"
    recorder = Recorder(prefix, 3600)
    record = record_key(prefix, task_id).encode()
    entry = json.dumps([0, "take", 3_600_000, key], separators=(",", ":")).encode()
    packed = recorder.take_quiet(task_id, key, task_name)
    assert packed == quiet_commands((b"LPUSH", record, entry), (b"PEXPIRE", record, b"3600000"))
    assert unpack_quiet(packed) == [(b"LPUSH", record, entry), (b"PEXPIRE", record, b"3600000")]
    assert json.loads(unpack_quiet(packed)[0][2]) == [0, "take", 3_600_000, key]


def test_on_a_cluster_the_take_is_recorded_in_the_lock_keys_slot() -> None:
    recorder = Recorder("redislock", 60, cluster=True)
    [(_, record, _), _] = unpack_quiet(recorder.take_quiet("t1", KEY, "tasks.build"))
    assert record.decode() == slot_key(KEY, "explain:t1") == "{" + KEY + "}:explain:t1"


def test_an_untimed_entry_is_timed_by_the_records_ttl_left() -> None:
    raw = json.dumps([0, "take", 86_400_000, KEY])
    # Written when its TTL was set: a day from then, 86_399_000 ms left at server ms 1_000_000.
    entry = parse_entry(raw, now_ms=1_000_000, pttl_ms=86_399_000)
    assert entry is not None and entry.time == 999.0 and entry.fields == (KEY,) and entry.reply is None
    timed = parse_entry(json.dumps([1_700_000_000_123, "lock", ["1", "5"], KEY]))
    assert timed is not None and timed.time == 1_700_000_000.123 and timed.reply == ["1", "5"]
    assert parse_entry("not json") is None and parse_entry('{"a": 1}') is None


def test_a_recorded_script_wraps_the_body_once() -> None:
    wrapped = recorded_script("return 1")
    assert wrapped.count("return 1") == 1 and recorded_script("return 1") is wrapped
    assert "-- BODY" not in wrapped
