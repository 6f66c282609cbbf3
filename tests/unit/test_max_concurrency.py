"""Options that cannot go with max_concurrency > 1, and the keys of a semaphore."""

from __future__ import annotations

import pytest

from celery_redislock.config.options import LockOptions, resolve, validate
from celery_redislock.engine.checks import check_argument
from celery_redislock.engine.keys import release_channel, semaphore_keys
from celery_redislock.errors import OptionError

TASK = "task 'proj.crunch'"


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("lock_on", "enqueue", "'enqueue' cannot be used with max_concurrency=3 (use 'execute')"),
        ("release_on_retry", False, "False cannot be used with max_concurrency=3 (use True)"),
    ],
)
def test_a_semaphore_refuses_enqueue_locking_and_keeping_it_across_retries(
    option: str, value: object, problem: str
) -> None:
    with pytest.raises(OptionError) as caught:
        validate({"max_concurrency": 3, option: value}, TASK)
    assert str(caught.value) == f"{TASK}: option {option!r} {problem} set in the same place"
    with pytest.raises(OptionError) as caught:
        resolve({"max_concurrency": 3}, {}, {option: value}, task_source=TASK, queue_source="q")
    assert caught.value.source == TASK  # the most specific layer involved
    assert str(caught.value) == (
        f"{TASK}: option {option!r} {problem} (from {TASK}; {option} from redislock_options)"
    )
    assert validate({"max_concurrency": 1, option: value}, TASK)  # the lock supports both


def test_a_semaphore_with_the_defaults_is_fine() -> None:
    assert LockOptions(max_concurrency=4).max_concurrency == 4


def test_arguments_are_checked_by_kind() -> None:
    assert check_argument("seconds", "timeout", 2, "RedisLock('x')") == 2.0
    assert check_argument("seconds or 0", "acquire_timeout", 0, "RedisLock('x')") == 0.0
    with pytest.raises(
        OptionError, match=r"RedisLock\('x'\): option 'timeout' must be a number of seconds > 0"
    ):
        check_argument("seconds", "timeout", -1, "RedisLock('x')")


@pytest.mark.parametrize(
    ("key", "queue"),
    [
        ("redislock:proj.add:0123", "{redislock:proj.add:0123}:queue"),  # wrapped: the key's own slot
        ("jobs:{tenant1}:sem", "jobs:{tenant1}:sem:queue"),  # a hash tag already: kept
        ("half{open", "{half{open}:queue"),  # no tag: wrapped, '{' inside is harmless
        ("odd}name", "odd}name:queue"),  # cannot be wrapped: suffixed
    ],
)
def test_semaphore_keys_stay_in_the_slot_of_the_key(key: str, queue: str) -> None:
    assert semaphore_keys(key)[0] == queue
    assert [k.rsplit(":", 1)[1] for k in semaphore_keys(key)] == ["queue", "alive", "ticket"]


def test_the_release_channel_is_the_key_and_released() -> None:
    assert release_channel("a:b") == "a:b:released"
