"""The ``lock_until`` option (the until-started mode's): its values, and its clash with ``lock_on``
in one layer and merged."""

from __future__ import annotations

import pytest

import celery_redislock.gates
import celery_redislock.modes  # noqa: F401  (registers the until-started mode, lock_until's owner)
from celery_redislock.config.options import LockOptions, resolve, validate
from celery_redislock.errors import OptionError

TASK = "task 'proj.export'"


def test_values_and_default() -> None:
    assert LockOptions().value("lock_until") == "finished"
    assert LockOptions(lock_on="enqueue", lock_until="started").value("lock_until") == "started"
    with pytest.raises(OptionError, match=r"option 'lock_until' must be one of 'finished', 'started'"):
        validate({"lock_until": "start"}, TASK)


def test_started_with_lock_on_execute_in_the_same_place_is_an_error() -> None:
    with pytest.raises(OptionError) as caught:
        validate({"lock_on": "execute", "lock_until": "started"}, TASK)
    assert caught.value.option == "lock_until"
    assert str(caught.value) == (
        f"{TASK}: option 'lock_until' 'started' cannot be used with lock_on='execute' (use "
        f"lock_on='enqueue': only a lock taken at enqueue can be released when the task starts) "
        f"set in the same place"
    )
    # lock_on may come from another layer: alone, lock_until="started" is fine in a layer.
    assert validate({"lock_until": "started"}, TASK) == {"lock_until": "started"}


def test_merged_layers_need_lock_on_enqueue() -> None:
    merged = resolve(
        {"lock_until": "started"}, {}, {"lock_on": "enqueue"}, task_source=TASK, queue_source="q"
    )
    assert (merged.lock_on, merged.value("lock_until")) == ("enqueue", "started")
    with pytest.raises(OptionError) as caught:
        resolve({"lock_until": "started"}, {}, {}, task_source=TASK, queue_source="q")
    assert caught.value.source == TASK
    assert "(from the default; lock_until from task 'proj.export')" in str(caught.value)
    with pytest.raises(OptionError) as caught:
        resolve({"lock_on": "execute"}, {}, {"lock_until": "started"}, task_source=TASK, queue_source="q")
    assert caught.value.source == TASK  # the most specific layer involved
    assert "(from task 'proj.export'; lock_until from redislock_options)" in str(caught.value)
