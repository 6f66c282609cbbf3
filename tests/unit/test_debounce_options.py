"""Which options combine with ``debounce``: every other option is either accepted with it or
refused with an OptionError naming both; and which ``max_retries`` bounds a debounced call's
wait (one the task sets, never Celery's default)."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

import celery_redislock.gates
import celery_redislock.modes  # noqa: F401  (registers the modes and their options)
from celery_redislock import SingletonTask
from celery_redislock.config.options import LockOptions, option_names, resolve, validate
from celery_redislock.errors import OptionError
from celery_redislock.modes.debounce import user_max_retries

OPTION_NAMES = option_names()

TASK = "task 'proj.reindex'"

#: Options that go with debounce, each with a value other than its default.
COMBINES: dict[str, Any] = {
    "lock_timeout": 60,
    "renew_interval": 5,
    "lock_key": ["doc"],
    "on_duplicate": "wait",  # the latest waits acquire_timeout in the worker, then is re-queued
    "acquire_timeout": 2,
    "retry_countdown": 1,
    "release_on_retry": False,
    "lock_on": "execute",
    "queued_timeout": 600,
    "on_redis_error": "fail",
    "max_concurrency": 1,
    "lock_until": "finished",
    "debounce_max": 10,
    "fencing": True,
    "skip_result": "success",  # what a superseded call stores
    "rate_limit_key": ["doc"],  # no rate limit: a partition of nothing
    "rate_cost": 2,  # no rate limit: a cost of nothing
    "fair_lanes": 4,  # no tenant: lanes of nothing
}

#: Options refused with debounce: a value, and the reason the error gives.
REFUSED: list[tuple[str, Any, str]] = [
    ("max_concurrency", 2, "cannot be used with max_concurrency=2 (use 1"),
    ("lock_on", "enqueue", "cannot be used with lock_on='enqueue'"),
    ("lock_until", "started", "cannot be used with lock_until='started'"),
    ("throttle", 5, "cannot be used with throttle (choose one mode)"),
    ("keep_latest", True, "cannot be used with keep_latest (choose one mode)"),
    ("on_duplicate", "skip", "cannot be used with on_duplicate='skip'"),
    ("on_duplicate", "raise", "cannot be used with on_duplicate='raise'"),
    ("global_rate_limit", "10/m", "cannot be used with global_rate_limit (a burst's superseded calls"),
    ("rate_limits", ["partner"], "cannot be used with rate_limits (a burst's superseded calls"),
    ("fair_key", ["doc"], "cannot be used with fair_key (debounce re-publishes calls outside"),
    ("fair_cap", 2, "cannot be used with fair_cap"),
    ("fair_weights", {"a": 2}, "cannot be used with fair_weights"),
    ("lock", False, "cannot be used with lock=False (the debounce mode works through the lock)"),
]


def test_every_option_is_decided_for_debounce() -> None:
    refused = {name for name, _, _ in REFUSED}
    assert set(COMBINES) | refused | {"debounce"} == OPTION_NAMES


def test_the_options_that_combine_are_accepted_together() -> None:
    options = validate({"debounce": 2, **COMBINES}, TASK)
    assert resolve(options, {}, {}, task_source=TASK, queue_source="q").value("debounce") == 2
    assert validate({"debounce": 2, "on_duplicate": "retry"}, TASK)["on_duplicate"] == "retry"


@pytest.mark.parametrize(("name", "value", "problem"), REFUSED)
def test_a_refused_option_names_both(name: str, value: Any, problem: str) -> None:
    with pytest.raises(OptionError) as caught:
        validate({"debounce": 2, name: value}, TASK)
    assert caught.value.option == "debounce"
    assert str(caught.value).startswith(f"{TASK}: option 'debounce' {problem}")
    assert str(caught.value).endswith("set in the same place")


@pytest.mark.parametrize(("name", "value"), [("max_concurrency", 2), ("lock_on", "enqueue"), ("throttle", 5)])
def test_a_refused_option_from_another_layer_is_refused_merged(name: str, value: Any) -> None:
    with pytest.raises(OptionError) as caught:
        resolve({"debounce": 2}, {}, {name: value}, task_source=TASK, queue_source="q")
    assert caught.value.source == TASK and name in str(caught.value)


@pytest.mark.parametrize("strategy", ["skip", "raise"])
def test_on_duplicate_of_another_layer_is_a_default_that_does_not_apply(strategy: str) -> None:
    # An app-wide on_duplicate is meant for the app's other tasks: it does not stop a debounced one.
    options = resolve({"debounce": 2}, {}, {"on_duplicate": strategy}, task_source=TASK, queue_source="q")
    assert (options.value("debounce"), options.on_duplicate) == (2, strategy)


def test_debounce_with_the_defaults_is_valid() -> None:
    assert LockOptions(debounce=1).max_concurrency == 1


def test_only_a_max_retries_the_task_sets_bounds_the_wait() -> None:
    app = Celery("bounds", set_as_current=False)
    app.conf.task_annotations = {"proj.annotated": {"max_retries": 4}}

    @app.task(base=SingletonTask, shared=False, name="proj.default", debounce=1)
    def default() -> None: ...

    @app.task(base=SingletonTask, shared=False, name="proj.set", debounce=1, max_retries=2)
    def bounded() -> None: ...

    @app.task(base=SingletonTask, shared=False, name="proj.unbounded", debounce=1, max_retries=None)
    def unbounded() -> None: ...

    @app.task(base=SingletonTask, shared=False, name="proj.annotated", debounce=1)
    def annotated() -> None: ...

    class Base(SingletonTask):
        max_retries = 7

    @app.task(base=Base, shared=False, name="proj.subclass", debounce=1)
    def subclassed() -> None: ...

    def bound(name: str) -> int | None:
        return user_max_retries(app.tasks[name])  # the task itself, not its lazy proxy

    assert app.tasks["proj.default"].max_retries == 3  # Celery's default: no bound the user chose
    assert bound("proj.default") is None
    assert bound("proj.set") == 2
    assert bound("proj.unbounded") is None
    assert bound("proj.annotated") == 4
    assert bound("proj.subclass") == 7
