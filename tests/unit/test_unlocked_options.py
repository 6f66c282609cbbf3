"""``lock=False``: the options that only mean something with a lock are refused with it, naming
both, where it is given or more specifically; a broader layer's are left out of it; the options
that still apply (the gates', the timing of a fair_cap slot, on_redis_error) are accepted; and
what a body sees of its lock (``self.request.redislock``) still pauses its rate limits."""

from __future__ import annotations

from typing import Any

import pytest

import celery_redislock.gates
import celery_redislock.modes  # noqa: F401  (registers the modes and their options)
from celery_redislock.config.lock_only import LOCK_ONLY
from celery_redislock.config.options import LockOptions, option_names, resolve, validate
from celery_redislock.errors import LockUnavailableError, OptionError, RateLimitPaused
from celery_redislock.integration.request_lock import UNLOCKED

TASK = "task 'proj.fair'"
QUEUE = "redislock_queues['q']"

#: A value other than its default for each option that needs the lock.
NEEDS_LOCK: dict[str, Any] = {
    "lock_key": ["tenant"],
    "on_duplicate": "retry",
    "acquire_timeout": 2,
    "release_on_retry": False,
    "lock_on": "enqueue",
    "queued_timeout": 60,
    "max_concurrency": 2,
    "fencing": True,
    "skip_result": "success",
    "lock_until": "started",
    "throttle": 5,
    "keep_latest": True,
    "debounce": 2,
    "debounce_max": 10,
}

#: Options that apply to a call without its lock, each with a value other than its default.
STILL_APPLY: dict[str, Any] = {
    "lock_timeout": 60,  # the TTL of a fair_cap slot
    "renew_interval": 5,  # its renewal
    "retry_countdown": 1,  # on_redis_error="retry"
    "on_redis_error": "fail",  # a gate's Redis unreachable
    "fair_key": ["tenant"],
    "fair_lanes": 4,
    "fair_weights": {"a": 2},
    "fair_cap": 2,
    "global_rate_limit": "10/s",
    "rate_limit_key": ["tenant"],
    "rate_limits": ["partner"],
    "rate_cost": 2,
}


def test_every_option_is_decided_for_lock_false() -> None:
    assert set(NEEDS_LOCK) | set(STILL_APPLY) | {"lock"} == option_names()
    assert set(NEEDS_LOCK) == set(LOCK_ONLY)


@pytest.mark.parametrize("name", sorted(NEEDS_LOCK))
def test_an_option_needing_the_lock_is_refused_naming_both(name: str) -> None:
    # Seen red before lock_only existed: validate accepted all of them.
    with pytest.raises(OptionError) as caught:
        validate({"lock": False, name: NEEDS_LOCK[name]}, TASK)
    assert caught.value.option == name
    assert "cannot be used with lock=False (" in str(caught.value)
    assert str(caught.value).endswith("set in the same place")


def test_the_options_that_still_apply_are_accepted_together() -> None:
    options = resolve({"lock": False, **STILL_APPLY}, {}, {}, task_source=TASK, queue_source=QUEUE)
    assert options.lock is False and options.value("fair_cap") == 2


def test_an_option_at_its_default_is_no_clash() -> None:
    assert validate({"lock": False, "on_duplicate": "skip", "max_concurrency": 1}, TASK)["lock"] is False
    assert LockOptions(lock=False).on_duplicate == "skip"


@pytest.mark.parametrize("name", ["on_duplicate", "max_concurrency", "throttle", "lock_on"])
def test_a_broader_layers_option_needing_the_lock_is_left_out(name: str) -> None:
    # Given app-wide it is meant for the tasks that lock, not one with lock=False.
    for task, queue, app in (
        ({"lock": False}, {}, {name: NEEDS_LOCK[name]}),
        ({}, {"lock": False}, {name: NEEDS_LOCK[name]}),
    ):
        options = resolve(task, queue, app, task_source=TASK, queue_source=QUEUE)
        assert options.lock is False
        assert options.value(name) == LockOptions().value(name)


def test_a_more_specific_option_needing_the_lock_is_refused_blaming_it() -> None:
    with pytest.raises(OptionError) as caught:
        resolve({"on_duplicate": "retry"}, {}, {"lock": False}, task_source=TASK, queue_source=QUEUE)
    assert caught.value.option == "on_duplicate" and caught.value.source == TASK
    assert "lock=False" in str(caught.value)


def test_a_locked_task_keeps_the_broader_options() -> None:
    options = resolve({}, {}, {"on_duplicate": "retry"}, task_source=TASK, queue_source=QUEUE)
    assert options.lock is True and options.on_duplicate == "retry"


def test_what_an_unlocked_body_sees_of_its_lock_still_pauses() -> None:
    assert not UNLOCKED and UNLOCKED.key is None and UNLOCKED.token is None
    with pytest.raises(RateLimitPaused) as caught:
        UNLOCKED.pause(2, ["partner"])
    assert (caught.value.retry_after, caught.value.limits) == (2.0, ("partner",))


def test_redis_unreachable_for_a_task_without_its_lock_says_what_asked_it() -> None:
    unlocked = str(LockUnavailableError("t.fair", "id1", "", "redis://h:6379/0", "ConnectionError: refused"))
    assert unlocked.startswith("Cannot run t.fair[id1]: Redis at redis://h:6379/0 is unreachable")
    assert "fair share or rate limits" in unlocked and "while taking" not in unlocked
    locked = str(LockUnavailableError("t.job", "id2", "redislock:t.job:k", "redis://h:6379/0", "refused"))
    assert locked.startswith("Cannot lock t.job[id2]") and locked.endswith("while taking redislock:t.job:k")
