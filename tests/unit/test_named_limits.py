"""Named limits, ``rate_limits`` and ``rate_cost`` as given: read once, each mistake an
``OptionError`` naming the setting or option and the limit."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from celery_redislock import OptionError, RateLimitPaused
from celery_redislock.config.limits import (
    check_rate_cost,
    check_rate_limits,
    declare_limit,
    declared_limits,
    limit_catalog,
    read_limits,
)
from celery_redislock.config.settings import read_settings
from celery_redislock.engine.checks import BadValue
from celery_redislock.engine.rates import Rate


def test_the_setting_reads_each_form_of_rate() -> None:
    limits = read_limits({"partner": "10/s", "llm": ["5/s", "20/m"], "api": "10/s burst 50"})
    assert limits["partner"].rates == (Rate(10, 1),)
    assert limits["llm"].rates == (Rate(5, 1), Rate(20, 60))
    assert limits["api"].rates == (Rate(10, 1, 50),)
    assert {limit.source for limit in limits.values()} == {"redislock_limits"}
    settings = read_settings({"broker_url": "redis://localhost/0", "redislock_limits": {"partner": "10/s"}})
    assert settings.limits["partner"].rates == (Rate(10, 1),)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("10/s", "must be a dict of limit name -> rate"),
        ({"partner": "10/x"}, "gives limit 'partner' a wrong rate"),
        ({"a:b": "10/s"}, "must name limits with letters"),
    ],
)
def test_a_wrong_setting_names_itself_and_the_limit(value: Any, says: str) -> None:
    with pytest.raises(OptionError) as caught:
        read_limits(value)
    assert caught.value.option == "redislock_limits"
    assert says in str(caught.value)


def test_rate_limits_takes_names_or_names_with_partitions() -> None:
    assert check_rate_limits(["partner", "llm"]) == (("partner", None), ("llm", None))
    by_account = check_rate_limits({"partner": ["account"], "llm": None})
    assert by_account == (("partner", ("account",)), ("llm", None))
    assert check_rate_limits(by_account) == by_account  # a checked value checks to itself
    for wrong, says in [
        ("partner", r"write \['partner'\]"),
        ([], "empty"),
        (["partner", "partner"], "named twice"),
        ({"partner": "account"}, "gives limit 'partner' a partition"),
    ]:
        with pytest.raises(BadValue, match=says):
            check_rate_limits(wrong)


def test_rate_cost_is_a_count_a_callable_or_a_dict_of_them() -> None:
    def tokens(task: Any, args: Any, kwargs: Any) -> int:
        return 3

    assert check_rate_cost(3) == 3
    assert check_rate_cost(tokens) is tokens
    assert check_rate_cost({"llm": tokens, "partner": 2}) == (("llm", tokens), ("partner", 2))
    for wrong in (0, True, "3", {"": 1}, {"llm": 0}):
        with pytest.raises(BadValue, match="must be None, an int >= 1"):
            check_rate_cost(wrong)


def test_a_limit_declared_in_code_and_in_the_setting_must_agree() -> None:
    app = Celery("named_limits", set_as_current=False)
    declare_limit(app, "partner", "10/s")
    declare_limit(app, "partner", "10/s")  # the same again: a module imported twice
    with pytest.raises(OptionError, match="was declared '10/s' already"):
        declare_limit(app, "partner", "20/s")
    assert declared_limits(app)["partner"].source == "declare_limit"
    setting = read_limits({"partner": "5/s", "llm": "1/s"})
    with pytest.raises(OptionError, match="gives limit 'partner' '5/s', but declare_limit gives it '10/s'"):
        limit_catalog(setting, declared_limits(app))
    assert set(limit_catalog(read_limits({"llm": "1/s"}), declared_limits(app))) == {"llm", "partner"}


def test_a_pause_needs_seconds_and_limit_names() -> None:
    assert RateLimitPaused(30).retry_after == 30.0
    assert RateLimitPaused(1.5, ["partner"]).limits == ("partner",)
    seconds: Any
    for seconds in (0, -1, True, "30", float("inf")):
        with pytest.raises(OptionError, match="retry_after"):
            RateLimitPaused(seconds)
    with pytest.raises(OptionError, match="limits"):
        RateLimitPaused(1, "partner")  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix", ["redislock", "{tenant}:locks", "a:{b}:c"])
def test_a_mixing_task_s_partition_shares_the_named_limits_slot_whatever_the_prefix(prefix: str) -> None:
    # A user's prefix may carry a hash tag of its own: every key of the decision still shares one.
    from redis.crc import key_slot

    from celery_redislock.engine.keys import format_key, limit_keys
    from celery_redislock.gates.rate_calls import mixed_rate_key, named_log, overrides_of

    partition = format_key(prefix, "proj.sync", "0" * 32)
    keys = [
        *limit_keys(mixed_rate_key(prefix, partition)),
        *limit_keys(named_log(prefix, "partner", "f" * 32)),
        overrides_of(prefix),
    ]
    assert len({key_slot(key.encode()) for key in keys}) == 1
    assert not mixed_rate_key(prefix, partition).startswith(named_log(prefix, "rate"))


def test_an_adaptive_limit_reads_its_bounds_in_calls_a_second_or_rates() -> None:
    limit = read_limits(
        {"partner": {"floor": "60/m", "ceiling": 50, "start": 5, "overload": [TimeoutError]}}
    )["partner"]
    assert limit.adaptive is not None
    assert (limit.adaptive.floor, limit.adaptive.ceiling, limit.adaptive.start) == (1.0, 50.0, 5.0)
    assert limit.rates == (Rate(18000, 3600, 1),)  # the start, one call every 1/5 s
    assert limit.adaptive.is_overload(TimeoutError()) == "builtins.TimeoutError"
    assert limit.adaptive.is_overload(ValueError()) == ""


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"floor": 10, "ceiling": 5}, "a floor (10/s) above its ceiling (5/s)"),
        ({"floor": 1, "ceiling": 5, "start": 9}, "a start (9/s) outside its floor and ceiling"),
        ({"floor": -1, "ceiling": 5}, "a wrong 'floor': floor must be calls a second from 1/3600"),
        ({"floor": 1}, "no 'ceiling'"),
        ({"flor": 1, "ceiling": 5}, "an unknown key 'flor' (did you mean 'floor'?)"),
        ({"floor": 1, "ceiling": 5, "burst": 0}, "a wrong 'burst': burst must be an int >= 1, got 0"),
        ({"floor": 1, "ceiling": 5, "latency_target": -2}, "a wrong 'latency_target'"),
        (
            {"floor": 1, "ceiling": 5, "overload": [3]},
            "a wrong 'overload': overload must be exception classes",
        ),
        (
            {"floor": 1, "ceiling": 5, "rule": "vegas"},
            "a wrong 'rule': rule must be one of 'default', 'aimd', 'gradient', got 'vegas'",
        ),
    ],
)
def test_a_wrong_adaptive_limit_names_the_limit_and_what_is_wrong(value: Any, says: str) -> None:
    # Checked at declaration: nothing is declared, nothing reaches Redis.
    with pytest.raises(OptionError) as raised:
        read_limits({"partner": value})
    assert "redislock_limits" in str(raised.value) and "adaptive limit 'partner'" in str(raised.value)
    assert says in str(raised.value)
    app = Celery(set_as_current=False)
    with pytest.raises(OptionError):
        declare_limit(app, "partner", value)
    assert declared_limits(app) == {}
