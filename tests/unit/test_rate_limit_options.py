"""``global_rate_limit`` and ``rate_limit_key``: valid on the task, in ``redislock_options`` and in
``redislock_queues``; a bad rate named with where it came from; the combinations refused naming
both options; and the partition a call falls in (its arguments, as ``lock_key`` reads them)."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

import celery_redislock.gates
import celery_redislock.modes  # noqa: F401  (registers the modes and the gate)
from celery_redislock import OptionError, SingletonTask
from celery_redislock.config.options import LockOptions, resolve, validate
from celery_redislock.engine.rates import Rate, parse_rate, rate_of
from celery_redislock.gates.rate_limit import GATE
from celery_redislock.gates.task_holds import GATE as HOLDS
from celery_redislock.integration.runtime import runtime_for

TASK = "task 'proj.sync'"


@pytest.mark.parametrize(
    ("text", "rate"), [("10/s", Rate(10, 1)), ("100/m", Rate(100, 60)), (" 7 / h ", Rate(7, 3600))]
)
def test_rates_in_celerys_format(text: str, rate: Rate) -> None:
    assert parse_rate(text) == rate == rate_of(str(rate))
    assert validate({"global_rate_limit": text}, TASK)["global_rate_limit"] == str(rate)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("10/d", "must be None or a rate 'N/s', 'N/m' or 'N/h' (N an int from 1 to 1000000000), got '10/d'"),
        ("-1/s", "got '-1/s'"),
        ("0/m", "got '0/m' (N is 0)"),
        (10, "got 10 (a int)"),
        (1.5, "got 1.5 (a float)"),
    ],
)
def test_a_bad_rate_names_the_option_and_the_value(value: Any, problem: str) -> None:
    with pytest.raises(OptionError, match=r"^task 'proj.sync': option 'global_rate_limit' ") as raised:
        validate({"global_rate_limit": value}, TASK)
    assert problem in str(raised.value)


def test_a_bad_partition_names_rate_limit_key() -> None:
    with pytest.raises(OptionError, match=r"option 'rate_limit_key' .*write \['account'\]"):
        validate({"global_rate_limit": "1/s", "rate_limit_key": "account"}, TASK)


def test_valid_on_the_task_in_redislock_options_and_in_redislock_queues(app: Celery) -> None:
    app.conf.redislock_options = {"global_rate_limit": "100/m"}
    app.conf.redislock_queues = {"api": {"global_rate_limit": "5/s", "rate_limit_key": ["account"]}}

    @app.task(base=SingletonTask, shared=False, name="proj.sync")
    def sync(account: str, document: str) -> None: ...

    @app.task(base=SingletonTask, shared=False, name="proj.own", global_rate_limit="1/h")
    def own(account: str) -> None: ...

    runtime = runtime_for(app)
    plan = runtime.plan(sync._get_current_object(), None)
    assert plan.gates == (HOLDS, GATE) and plan.options.value("global_rate_limit") == "100/m"
    plan = runtime.plan(sync._get_current_object(), "api")
    assert plan.options.value("global_rate_limit") == "5/s"
    assert plan.options.value("rate_limit_key") == ("account",)
    assert runtime.plan(own._get_current_object(), "api").options.value("global_rate_limit") == "1/h"


def test_no_rate_gate_without_a_rate(app: Celery) -> None:
    @app.task(base=SingletonTask, shared=False, name="proj.free")
    def free() -> None: ...

    # The operator's holds only: every call may be held.
    assert runtime_for(app).plan(free._get_current_object(), None).gates == (HOLDS,)


def test_a_bad_rate_in_the_app_configuration_is_named_there(app: Celery) -> None:
    app.conf.redislock_options = {"global_rate_limit": "fast"}

    @app.task(base=SingletonTask, shared=False, name="proj.sync")
    def sync() -> None: ...

    with pytest.raises(OptionError, match=r"redislock_options: option 'global_rate_limit' .* got 'fast'"):
        runtime_for(app).plan(sync._get_current_object(), None)


COMPOSES: list[dict[str, Any]] = [
    {"lock_key": ["document"]},
    {"max_concurrency": 3},
    {"throttle": 5},
    {"lock_on": "enqueue"},
    {"lock_on": "enqueue", "lock_until": "started"},
    {"on_duplicate": "retry"},
    {"on_duplicate": "raise"},
    {"fencing": True},
    {"on_redis_error": "run"},
]


@pytest.mark.parametrize("options", COMPOSES)
def test_what_composes_with_a_rate_limit(options: dict[str, Any]) -> None:
    layer = {"global_rate_limit": "10/m", "rate_limit_key": ["account"], **options}
    assert resolve(validate(layer, TASK), {}, {}, task_source=TASK, queue_source="q").value(
        "global_rate_limit"
    )


@pytest.mark.parametrize(
    ("options", "option", "problem"),
    [
        ({"on_duplicate": "wait"}, "global_rate_limit", "cannot be used with on_duplicate='wait'"),
        ({"debounce": 2}, "debounce", "cannot be used with global_rate_limit (a burst's superseded"),
        ({"keep_latest": True}, "keep_latest", "cannot be used with global_rate_limit (a pending call"),
    ],
)
def test_what_makes_no_sense_names_both_options(options: dict[str, Any], option: str, problem: str) -> None:
    with pytest.raises(OptionError) as raised:
        validate({"global_rate_limit": "10/m", **options}, TASK)
    assert raised.value.option == option
    assert str(raised.value).startswith(f"{TASK}: option {option!r} {problem}")


def test_a_clash_across_layers_names_both_layers() -> None:
    with pytest.raises(OptionError) as raised:
        resolve(
            {"global_rate_limit": "10/m"}, {}, {"on_duplicate": "wait"}, task_source=TASK, queue_source="q"
        )
    assert raised.value.source == TASK and "from redislock_options" in str(raised.value)


def test_the_partition_is_the_named_arguments(app: Celery) -> None:
    @app.task(base=SingletonTask, shared=False, bind=True, name="proj.sync", global_rate_limit="10/m")
    def sync(self: Any, account: str, document: str) -> None: ...

    task = sync._get_current_object()
    runtime = runtime_for(app)

    def partition(options: LockOptions, *args: Any, **kwargs: Any) -> str:
        task.push_request(args=args, kwargs=kwargs)
        try:
            execution: Any = type("E", (), {"runtime": runtime, "options": options})()
            return GATE.partition(task, execution)
        finally:
            task.pop_request()

    whole = LockOptions(global_rate_limit="10/m")
    by_account = LockOptions(global_rate_limit="10/m", rate_limit_key=["account"])
    assert partition(whole, "a", "x") == partition(whole, "b", "y")  # one limit for the task
    assert partition(by_account, "a", "x") == partition(by_account, "a", document="y")
    assert partition(by_account, "a", "x") != partition(by_account, "b", "x")
    assert partition(by_account, "a", "x").endswith(":rate") and "proj.sync" in partition(
        by_account, "a", "x"
    )
    bad = LockOptions(global_rate_limit="10/m", rate_limit_key=["acount"])
    with pytest.raises(OptionError, match="option 'rate_limit_key' names unknown argument 'acount'"):
        partition(bad, "a", "x")


def test_a_partition_naming_an_unknown_argument_is_an_error_at_registration(app: Celery) -> None:
    # As lock_key's names are: the typo surfaces where the task is declared, not at its first call.
    with pytest.raises(
        OptionError,
        match=r"^task 'proj.typo': option 'rate_limit_key' names unknown argument 'acount'",
    ):

        @app.task(
            base=SingletonTask,
            shared=False,
            name="proj.typo",
            global_rate_limit="1/s",
            rate_limit_key=["acount"],
        )
        def typo(account: str) -> None: ...

        app.finalize()  # the app's tasks are made (and bound) here
