"""The ``fencing`` option: a flag, refused where a token cannot mean anything; the counter's key."""

from __future__ import annotations

import pytest

import celery_redislock.gates
import celery_redislock.modes  # noqa: F401  (registers the until-started mode, lock_until's owner)
from celery_redislock.config.options import LockOptions, resolve, validate
from celery_redislock.engine.keys import fence_key
from celery_redislock.errors import OptionError

TASK = "task 'proj.write'"


def test_fencing_is_off_by_default_and_a_flag() -> None:
    assert LockOptions().fencing is False
    assert LockOptions(fencing=True).fencing is True
    with pytest.raises(OptionError) as caught:
        validate({"fencing": "yes"}, TASK)
    assert str(caught.value) == f"{TASK}: option 'fencing' must be True or False, got 'yes' (a str)"


@pytest.mark.parametrize(
    ("other", "problem"),
    [
        ({"max_concurrency": 2}, "True cannot be used with max_concurrency=2 (use 1)"),
        (
            {"lock_on": "enqueue", "lock_until": "started"},
            "True cannot be used with lock_until='started' (the body runs unlocked)",
        ),
    ],
)
def test_fencing_is_refused_where_no_single_holder_runs_the_body(
    other: dict[str, object], problem: str
) -> None:
    with pytest.raises(OptionError) as caught:
        validate({"fencing": True, **other}, TASK)
    assert str(caught.value) == f"{TASK}: option 'fencing' {problem} set in the same place"
    # Across layers too: the task asks for fencing, the app's settings make it a semaphore.
    with pytest.raises(OptionError, match="option 'fencing' True cannot be used"):
        resolve({"fencing": True}, {}, other, task_source=TASK, queue_source="q")
    assert validate({"fencing": False, **other}, TASK)


@pytest.mark.parametrize(
    ("key", "counter"),
    [
        ("redislock:proj.add:0123", "{redislock:proj.add:0123}:fence"),  # the key's own slot
        ("jobs:{tenant1}:lock", "jobs:{tenant1}:lock:fence"),  # a hash tag already: kept
        ("odd}name", "odd}name:fence"),  # cannot be wrapped: suffixed (one Redis only)
    ],
)
def test_the_fence_counter_key_stays_in_the_slot_of_the_lock_key(key: str, counter: str) -> None:
    assert fence_key(key) == counter
