"""A plan has one mode: the registry refuses options that select two, whichever two, in one
layer or merged from several, naming both options. No mode names the modes it excludes."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import celery_redislock.gates
import celery_redislock.modes  # noqa: F401  (registers the modes)
from celery_redislock.config.options import resolve, validate
from celery_redislock.errors import OptionError
from celery_redislock.integration.mode import one_mode, registered

TASK = "task 'proj.mode'"

#: A value selecting each mode, with what its other options need to be valid alone.
SELECT: dict[str, dict[str, Any]] = {
    "until_started": {"lock_until": "started", "lock_on": "enqueue"},
    "throttle": {"throttle": 5},
    "keep_latest": {"keep_latest": True},
    "debounce": {"debounce": 2},
}

#: Each pair as the user reads it: the later registered mode's option, then the problem.
REFUSED = {
    ("until_started", "throttle"): ("throttle", "cannot be used with lock_until='started' (choose one mode)"),
    ("until_started", "keep_latest"): (
        "keep_latest",
        "True cannot be used with lock_until='started' (choose one mode)",
    ),
    ("until_started", "debounce"): ("debounce", "cannot be used with lock_until='started' (choose one mode)"),
    ("throttle", "keep_latest"): ("keep_latest", "True cannot be used with throttle (choose one mode)"),
    ("throttle", "debounce"): ("debounce", "cannot be used with throttle (choose one mode)"),
    ("keep_latest", "debounce"): ("debounce", "cannot be used with keep_latest (choose one mode)"),
}


def test_every_registered_mode_is_in_the_table() -> None:
    assert [mode.name for mode in registered()] == list(SELECT)
    assert set(REFUSED) == set(itertools.combinations(SELECT, 2))


@pytest.mark.parametrize(("earlier", "later"), sorted(REFUSED))
def test_two_modes_in_one_layer_are_refused_naming_both(earlier: str, later: str) -> None:
    option, problem = REFUSED[earlier, later]
    # The "started" of the until-started mode needs lock_on="enqueue", which some modes refuse
    # by their own rule: the registry's rule is asked first, so the message is about the modes.
    with pytest.raises(OptionError) as caught:
        validate({**SELECT[earlier], **SELECT[later]}, TASK)
    assert caught.value.option == option
    assert str(caught.value) == f"{TASK}: option {option!r} {problem} set in the same place"


@pytest.mark.parametrize(("earlier", "later"), sorted(REFUSED))
def test_two_modes_from_two_layers_are_refused_merged(earlier: str, later: str) -> None:
    option, problem = REFUSED[earlier, later]
    with pytest.raises(OptionError) as caught:
        resolve(SELECT[later], {}, SELECT[earlier], task_source=TASK, queue_source="q")
    assert caught.value.option == option and problem in str(caught.value)


def test_one_mode_alone_and_unselecting_values_pass() -> None:
    for options in SELECT.values():
        assert one_mode(options, 1, merged=False) is None
    # Values that select nothing: a mode's option may be set to them anywhere.
    assert (
        one_mode(
            {"throttle": None, "keep_latest": False, "lock_until": "finished", "debounce": 2}, 1, merged=True
        )
        is None
    )
