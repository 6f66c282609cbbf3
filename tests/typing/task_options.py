"""What type checkers see of ``SingletonTask``'s options: checked by ``mypy --strict`` (this file is
in the project's mypy ``files``) and by ``test_task_options.py``; never run."""

# ruff reads one class at a time: it cannot see that SingletonTask declares these ClassVars.
# ruff: noqa: RUF012

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from typing_extensions import assert_type

from celery_redislock import SingletonTask


def report_key(task: Any, args: Any, kwargs: Any) -> str:
    return str(args[0])


class Reports(SingletonTask):
    lock_timeout = 60  # an int is a float to type checkers, as to the option's check
    renew_interval = None
    lock_key = ["report_id"]
    on_duplicate = "retry"
    release_on_retry = False
    max_concurrency = 2
    fencing = True
    throttle = 2.5
    global_rate_limit = "10/s"
    rate_cost = {"partner": 2}


class Keyed(SingletonTask):
    lock_key = report_key
    debounce = 1.0
    rate_limits = {"partner": ["account"], "llm": None}


assert_type(SingletonTask.lock_timeout, "float | None")
assert_type(SingletonTask.lock_key, "list[str] | Callable[..., Any] | None")
assert_type(SingletonTask.on_duplicate, "str | None")
assert_type(SingletonTask.max_concurrency, "int | None")
assert_type(SingletonTask.keep_latest, "bool | None")
assert_type(SingletonTask.debounce, "float | None")
assert_type(SingletonTask.rate_cost, "int | Callable[..., Any] | dict[str, int | Callable[..., Any]] | None")


# A subclass's own values read back as what they are, within the option's type.
timeout: float | None = Reports.lock_timeout
key: list[str] | Callable[..., Any] | None = Keyed.lock_key
assert_type(Reports.throttle, float)


def timeout_of(task: SingletonTask) -> float | None:
    return task.lock_timeout
