"""Unit tests of celery_redislock.config.options: validation, precedence, settings, the Redis URL."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import celery_redislock.gates
import celery_redislock.modes  # noqa: F401  (registers the modes and their options)
from celery_redislock.compat.peer_keywords import PEER_OPTIONS
from celery_redislock.config.options import (
    LockOptions,
    option_names,
    option_specs,
    resolve,
    source_queue,
    source_task,
    validate,
)
from celery_redislock.config.schema import LockOption, spec_of
from celery_redislock.config.settings import SETTING_DEFAULTS, AppSettings, read_settings
from celery_redislock.config.urls import mask_url, resolve_redis_url
from celery_redislock.errors import ConfigurationError, OptionError, RedisURLError
from celery_redislock.integration.keywords import CLOSE_TO_OPTION, check_task_keywords

OPTION_NAMES = option_names()

TASK = source_task("proj.send_report")
QUEUE = source_queue("reports")
APP = "redislock_options"


def bad(options: dict[Any, Any], source: str = TASK) -> OptionError:
    with pytest.raises(OptionError) as info:
        validate(options, source)
    return info.value


def assert_names(err: OptionError, option: str, source: str = TASK) -> None:
    assert err.option == option
    assert err.source == source
    assert str(err).startswith(f"{source}: option {option!r} ")


def resolve_layers(
    task: dict[str, Any] | None = None,
    queue: dict[str, Any] | None = None,
    app: dict[str, Any] | None = None,
) -> LockOptions:
    return resolve(task or {}, queue or {}, app or {}, task_source=TASK, queue_source=QUEUE)


# --- defaults -------------------------------------------------------------------------------


def test_defaults_are_spec_section_2() -> None:
    o = LockOptions()
    assert o.lock_timeout == 30
    assert o.renew_interval is None and o.renew_interval_s == 10
    assert o.lock_key is None
    assert o.on_duplicate == "skip"
    assert o.acquire_timeout == 10
    assert o.retry_countdown == 5
    assert o.release_on_retry is True
    assert o.lock_on == "execute"
    assert o.queued_timeout == 3600
    assert o.on_redis_error == "retry"
    assert o.max_concurrency == 1
    assert o.skip_result == "failure"
    assert resolve_layers() == o


def test_the_schema_is_the_locks_options_then_each_modes() -> None:
    # The lock's options are the LockOption attributes of LockOptions, first in the schema.
    lock = [name for name, value in vars(LockOptions).items() if isinstance(value, LockOption)]
    owners = {spec.name: spec.owner for spec in option_specs()}
    assert [name for name, owner in owners.items() if owner == "lock"] == lock == list(owners)[: len(lock)]
    assert all(getattr(LockOptions, name) is spec_of(name) for name in lock)
    assert {name: owner for name, owner in owners.items() if owner != "lock"} == {
        "lock_until": "until_started",
        "throttle": "throttle",
        "keep_latest": "keep_latest",
        "debounce": "debounce",
        "debounce_max": "debounce",
        "global_rate_limit": "rate_limit",
        "rate_limit_key": "rate_limit",
        "rate_limits": "rate_limit",
        "rate_cost": "rate_limit",
        "fair_key": "fair_share",
        "fair_lanes": "fair_share",
        "fair_weights": "fair_share",
        "fair_cap": "fair_share",
    }
    assert set(owners) == OPTION_NAMES
    assert all(spec.doc and spec.kind for spec in option_specs())


def test_a_modes_option_is_read_with_value_and_defaults_to_its_spec() -> None:
    options = LockOptions(throttle=2)
    assert options.value("throttle") == 2.0 and options.value("debounce") is None
    assert options.value("lock_timeout") == options.lock_timeout
    assert LockOptions(throttle=2) == options and hash(LockOptions(throttle=2)) == hash(options)
    with pytest.raises(AttributeError, match="no option named 'nope'"):
        options.value("nope")


def test_effective_renew_interval_follows_lock_timeout() -> None:
    assert resolve_layers(task={"lock_timeout": 60}).renew_interval_s == 20
    assert resolve_layers(app={"lock_timeout": 9, "renew_interval": 2}).renew_interval_s == 2


def test_millisecond_properties() -> None:
    o = LockOptions(lock_timeout=1.5, queued_timeout=2, acquire_timeout=0, renew_interval=0.25)
    assert (o.timeout_ms, o.queued_timeout_ms, o.acquire_timeout_ms, o.renew_interval_ms) == (
        1500,
        2000,
        0,
        250,
    )
    assert LockOptions().renew_interval_ms == 10_000
    # Redis rejects PX 0: a tiny positive timeout still gives a 1 ms TTL.
    assert LockOptions(lock_timeout=0.0001).timeout_ms == 1


def test_lock_options_is_frozen_and_validates() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        LockOptions().lock_timeout = 5  # type: ignore[misc]
    with pytest.raises(OptionError) as info:
        LockOptions(lock_timeout=0)
    assert_names(info.value, "lock_timeout", "LockOptions")


# --- unknown names --------------------------------------------------------------------------


def test_unknown_name_suggests_the_close_one() -> None:
    err = bad({"lock_timout": 10})
    assert_names(err, "lock_timout")
    assert "is unknown" in str(err)
    assert "did you mean 'lock_timeout'?" in str(err)
    assert "known options:" in str(err) and "max_concurrency" in str(err)


def test_unknown_name_without_a_close_one_lists_the_known() -> None:
    err = bad({"zzz": 1}, QUEUE)
    assert_names(err, "zzz", QUEUE)
    assert "did you mean" not in str(err)
    for name in OPTION_NAMES:
        assert name in str(err)


def test_unknown_non_str_name() -> None:
    assert_names(bad({3: 1}), "3")


# --- wrong types ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["lock_timeout", "renew_interval", "acquire_timeout", "retry_countdown", "queued_timeout"],
)
def test_str_for_a_number(name: str) -> None:
    err = bad({name: "10"})
    assert_names(err, name)
    assert "must be" in str(err) and "number of seconds" in str(err)
    assert "got '10' (a str)" in str(err)


@pytest.mark.parametrize("name", ["lock_timeout", "acquire_timeout", "max_concurrency"])
def test_bool_is_not_a_number(name: str) -> None:
    err = bad({name: True})
    assert_names(err, name)
    assert "got True (a bool, not a number)" in str(err)


@pytest.mark.parametrize("name", ["on_duplicate", "lock_on", "on_redis_error"])
def test_list_for_a_choice(name: str) -> None:
    err = bad({name: ["skip"]})
    assert_names(err, name)
    assert "must be one of" in str(err) and "(a list)" in str(err)


def test_release_on_retry_must_be_a_bool() -> None:
    for value in (1, "yes", None):
        err = bad({"release_on_retry": value})
        assert_names(err, "release_on_retry")
        assert "must be True or False" in str(err)


def test_max_concurrency_must_be_an_int() -> None:
    err = bad({"max_concurrency": 2.0})
    assert_names(err, "max_concurrency")
    assert "must be an int >= 1, got 2.0 (a float)" in str(err)


def test_message_has_the_documented_shape() -> None:
    err = bad({"lock_timeout": -1})
    assert str(err) == (
        "task 'proj.send_report': option 'lock_timeout' must be a number of seconds > 0, got -1"
    )


# --- out of range ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lock_timeout", "renew_interval", "queued_timeout"])
@pytest.mark.parametrize("value", [0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf, 10**400])
def test_positive_seconds_out_of_range(name: str, value: float) -> None:
    err = bad({name: value}, APP)
    assert_names(err, name, APP)
    assert "> 0" in str(err)


@pytest.mark.parametrize("name", ["acquire_timeout", "retry_countdown"])
def test_non_negative_seconds(name: str) -> None:
    assert validate({name: 0}, TASK) == {name: 0.0}
    for value in (-1, math.nan, math.inf):
        err = bad({name: value})
        assert_names(err, name)
        assert ">= 0" in str(err)


def test_max_concurrency_below_one() -> None:
    for value in (0, -3):
        err = bad({"max_concurrency": value})
        assert_names(err, "max_concurrency")
        assert f"got {value}" in str(err)


# --- enum values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "suggestion"),
    [
        ("on_duplicate", "SKIP", "skip"),
        ("on_duplicate", "retyr", "retry"),
        ("lock_on", "enque", "enqueue"),
        ("on_redis_error", "fial", "fail"),
    ],
)
def test_bad_choice(name: str, value: str, suggestion: str) -> None:
    err = bad({name: value}, QUEUE)
    assert_names(err, name, QUEUE)
    assert f"got {value!r}" in str(err)
    assert f"did you mean {suggestion!r}?" in str(err)


def test_every_choice_accepted() -> None:
    for value in ("skip", "retry", "raise", "wait"):
        assert resolve_layers(task={"on_duplicate": value}).on_duplicate == value
    for value in ("execute", "enqueue"):
        assert resolve_layers(task={"lock_on": value}).lock_on == value
    for value in ("retry", "run", "fail"):
        assert resolve_layers(task={"on_redis_error": value}).on_redis_error == value


# --- renew_interval against lock_timeout ----------------------------------------------------


@pytest.mark.parametrize("renew", [10, 11])
def test_renew_interval_not_below_timeout_in_one_layer(renew: int) -> None:
    err = bad({"lock_timeout": 10, "renew_interval": renew}, QUEUE)
    assert_names(err, "renew_interval", QUEUE)
    assert f"must be < lock_timeout (10 set in the same place), got {renew}" in str(err)


def test_renew_interval_across_layers_blames_the_most_specific() -> None:
    # The app sets renew_interval, the task shortens lock_timeout: the task is at fault.
    with pytest.raises(OptionError) as info:
        resolve_layers(task={"lock_timeout": 10}, app={"renew_interval": 20})
    assert_names(info.value, "renew_interval", TASK)
    assert "10 from task 'proj.send_report'" in str(info.value)
    assert "got 20 from redislock_options" in str(info.value)


def test_renew_interval_across_layers_blames_the_queue() -> None:
    with pytest.raises(OptionError) as info:
        resolve_layers(queue={"renew_interval": 40}, app={"lock_timeout": 30})
    assert_names(info.value, "renew_interval", QUEUE)
    with pytest.raises(OptionError) as info:
        resolve_layers(queue={"lock_timeout": 5}, app={"renew_interval": 5})
    assert_names(info.value, "renew_interval", QUEUE)


def test_renew_interval_against_the_default_timeout() -> None:
    with pytest.raises(OptionError) as info:
        resolve_layers(app={"renew_interval": 30})
    assert_names(info.value, "renew_interval", APP)
    assert "30 from the default" in str(info.value)


def test_renew_interval_fixed_by_a_more_specific_timeout() -> None:
    o = resolve_layers(task={"lock_timeout": 100}, app={"lock_timeout": 10, "renew_interval": 5})
    assert (o.lock_timeout, o.renew_interval_s) == (100, 5)


# --- lock_key -------------------------------------------------------------------------------


def test_lock_key_forms() -> None:
    def key(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return "k"

    assert validate({"lock_key": None}, TASK) == {"lock_key": None}
    assert validate({"lock_key": ["user_id", "fmt"]}, TASK) == {"lock_key": ("user_id", "fmt")}
    assert validate({"lock_key": ("user_id",)}, TASK) == {"lock_key": ("user_id",)}
    assert validate({"lock_key": key}, TASK) == {"lock_key": key}
    assert resolve_layers(task={"lock_key": ["a"]}).lock_key == ("a",)


@pytest.mark.parametrize("empty", [[], ()])
def test_an_empty_lock_key_is_one_key_for_the_task_and_wins_over_other_layers(empty: Any) -> None:
    # [] means "no argument in the key" (one at a time), not "unset": it must not fall through.
    assert validate({"lock_key": empty}, TASK) == {"lock_key": ()}
    assert resolve_layers(task={"lock_key": empty}, app={"lock_key": ["a"]}).lock_key == ()
    assert LockOptions(lock_key=empty).lock_key == ()


def test_lock_key_bare_str_gets_a_hint() -> None:
    err = bad({"lock_key": "user_id"})
    assert_names(err, "lock_key")
    assert "got 'user_id' (a str)" in str(err)
    assert "write ['user_id']" in str(err)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (["a", 1], "1 is not an argument name"),
        (["a", ""], "'' is not an argument name"),
        (["a", "a"], "'a' is listed twice"),
        ({"a"}, "(a set)"),
        (5, "(a int)"),
    ],
)
def test_lock_key_bad_forms(value: Any, says: str) -> None:
    err = bad({"lock_key": value})
    assert_names(err, "lock_key")
    assert "argument names" in str(err) and "callable" in str(err)
    assert says in str(err)


# --- task keywords that are not options ------------------------------------------------------


def test_task_keywords_of_the_users_own_pass_and_options_are_left_to_validate() -> None:
    # Not close enough to an option (below CLOSE_TO_OPTION), nor another package's option.
    check_task_keywords({"timeout": 5, "lock_name": "x", "report_to": "ops", "lock": True}, TASK)
    check_task_keywords({"lock_timeout": -1}, TASK)  # an option: its value is validate's business


@pytest.mark.parametrize(
    "typo", ["lock_timout", "lockkey", "on_duplicates", "max_concurrent", "renewinterval"]
)
def test_a_task_keyword_close_to_an_option_is_refused_with_the_option_to_write(typo: str) -> None:
    with pytest.raises(OptionError) as info:
        check_task_keywords({typo: 1}, TASK)
    assert_names(info.value, typo)
    assert "did you mean" in str(info.value)


@pytest.mark.parametrize("word", ["clock", "block", "locks", "locked"])
def test_words_near_a_short_option_are_the_users_own(word: str) -> None:
    # Within CLOSE_TO_OPTION of the option lock, but ordinary attribute names: not guessed at.
    check_task_keywords({word: True}, TASK)


def test_the_closeness_cutoff_is_above_difflibs_default_so_shared_words_pass() -> None:
    # 0.6 (difflib's default) would take 'timeout' (0.74) for lock_timeout.
    assert 0.75 < CLOSE_TO_OPTION <= 0.85


@pytest.mark.parametrize("peer", sorted(PEER_OPTIONS))
def test_every_celery_once_and_celery_singleton_option_is_refused_whatever_its_value(peer: str) -> None:
    for value in (None, True, 3600, ["a"], {"keys": ["a"]}, object()):
        with pytest.raises(OptionError) as info:
            check_task_keywords({peer: value}, TASK)
        assert_names(info.value, peer)
        assert "SingletonTask ignores; write " in str(info.value)


# --- precedence -----------------------------------------------------------------------------

#: Three ``fair_weights`` callables told apart by identity.
_WEIGHTS = [lambda tenant: 1, lambda tenant: 2, lambda tenant: 3]

DIFFERENT = {
    "lock_timeout": (100, 200, 300),
    "renew_interval": (1, 2, 3),
    "lock_key": (["a"], ["b"], ["c"]),
    "on_duplicate": ("retry", "raise", "wait"),
    "acquire_timeout": (1, 2, 3),
    "retry_countdown": (1, 2, 3),
    "lock_on": ("enqueue", "execute", "enqueue"),
    "queued_timeout": (1, 2, 3),
    "on_redis_error": ("run", "fail", "run"),
    "max_concurrency": (2, 3, 4),
    "release_on_retry": (False, True, False),
    "lock_until": ("started", "finished", "started"),
    "throttle": (1, 2, 3),
    "keep_latest": (True, False, True),
    "debounce": (1, 2, 3),
    "debounce_max": (5, 6, 7),
    "fencing": (True, False, True),
    "skip_result": ("success", "ignore", "success"),
    "global_rate_limit": ("1/s", "2/m", "3/h"),
    "rate_limit_key": (["a"], ["b"], []),
    "rate_limits": ([("a", None)], [("b", ("x",))], [("c", None)]),
    "rate_cost": (1, 2, 3),
    "fair_key": (["a"], ["b"], ["c"]),
    "fair_lanes": (2, 3, 4),
    "fair_weights": (_WEIGHTS[0], _WEIGHTS[1], _WEIGHTS[2]),
    "fair_cap": (1, 2, 3),
    "lock": (False, True, False),
}

#: Options an option of DIFFERENT needs from the least specific layer (app) to be valid at all.
NEEDS = {
    "lock_until": {"lock_on": "enqueue"},
    "fair_cap": {"fair_key": ["a"]},
    "fair_weights": {"fair_key": ["a"]},
}


def test_precedence_table_covers_every_option() -> None:
    assert set(DIFFERENT) == OPTION_NAMES


@pytest.mark.parametrize("name", sorted(DIFFERENT))
def test_precedence_task_queue_app_default(name: str) -> None:
    t, q, a = DIFFERENT[name]

    def got(o: LockOptions) -> Any:
        value = o.value(name)
        return list(value) if isinstance(value, tuple) else value

    default = LockOptions().value(name)
    needs = NEEDS.get(name, {})
    assert got(resolve_layers({name: t}, {name: q}, {**needs, name: a})) == t
    assert got(resolve_layers({}, {name: q}, {**needs, name: a})) == q
    assert got(resolve_layers({}, {}, {**needs, name: a})) == a
    assert resolve_layers().value(name) == default
    # Other options in other layers leave this one alone.
    clashing = ("max_concurrency", "lock_until", "throttle", "keep_latest", "debounce")
    other = "max_concurrency" if name not in clashing else "lock_timeout"
    assert got(resolve_layers({other: 7}, {name: q}, needs)) == q


def test_none_falls_through_to_the_next_layer() -> None:
    o = resolve_layers({"lock_key": None, "renew_interval": None}, {"lock_key": ["a"]}, {"renew_interval": 4})
    assert o.lock_key == ("a",) and o.renew_interval == 4


def test_each_layer_is_validated_with_its_source() -> None:
    for layer, source in ((0, TASK), (1, QUEUE), (2, APP)):
        layers: list[dict[str, Any]] = [{}, {}, {}]
        layers[layer] = {"lock_timeout": "x"}
        with pytest.raises(OptionError) as info:
            resolve_layers(*layers)
        assert_names(info.value, "lock_timeout", source)


def test_validate_normalises_and_is_idempotent() -> None:
    raw = {"lock_timeout": 60, "lock_key": ["a"], "max_concurrency": 2, "on_duplicate": "wait"}
    once = validate(raw, TASK)
    assert once == {"lock_timeout": 60.0, "lock_key": ("a",), "max_concurrency": 2, "on_duplicate": "wait"}
    assert isinstance(once["lock_timeout"], float)
    assert validate(once, TASK) == once
    assert raw["lock_key"] == ["a"]  # the caller's mapping is not changed


def test_source_names() -> None:
    assert source_task("proj.add") == "task 'proj.add'"
    assert source_queue("reports") == "redislock_queues['reports']"


# --- read_settings --------------------------------------------------------------------------

BROKER = {"broker_url": "redis://localhost:6379/0", "result_backend": None}


def settings_error(**conf: Any) -> OptionError:
    with pytest.raises(OptionError) as info:
        read_settings({**BROKER, **conf})
    return info.value


def test_read_settings_defaults() -> None:
    s = read_settings(BROKER)
    assert s == AppSettings(
        url="redis://localhost:6379/0",
        key_prefix="redislock",
        options={},
        queues={},
        ssl_source="broker_use_ssl",
        max_postpone=1800.0,  # half of kombu's visibility timeout
        url_setting="broker_url",
    )
    assert read_settings({**SETTING_DEFAULTS, **BROKER}) == s


def test_setting_defaults() -> None:
    assert SETTING_DEFAULTS == {
        "redislock_url": None,
        "redislock_key_prefix": "redislock",
        "redislock_options": {},
        "redislock_queues": {},
        "redislock_transport_options": None,
        "redislock_use_ssl": None,
        "redislock_max_postpone": None,
        "redislock_limits": None,
        "redislock_metrics_port": None,
        "redislock_metrics_host": "127.0.0.1",
        "redislock_explain": True,
        "redislock_explain_ttl": 86400,
    }


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("redislock_explain", "yes", "must be True or False"),
        ("redislock_explain_ttl", 0, "redislock_explain_ttl"),
        ("redislock_explain_ttl", "a day", "redislock_explain_ttl"),
    ],
)
def test_the_record_settings_are_checked(setting: str, value: object, says: str) -> None:
    with pytest.raises(OptionError, match=says):
        read_settings({**BROKER, setting: value})
    assert (
        read_settings({**BROKER, "redislock_explain": False, "redislock_explain_ttl": 0}).explain_ttl is None
    )
    assert read_settings({**BROKER, "redislock_explain_ttl": 60}).explain_ttl == 60.0


def test_read_settings_validates_and_resolves() -> None:
    s = read_settings(
        {
            **BROKER,
            "redislock_url": "redis://:pw@locks:6379/1",
            "redislock_key_prefix": "proj-locks",
            "redislock_options": {"lock_timeout": 60},
            "redislock_queues": {"reports": {"lock_timeout": 600, "on_duplicate": "raise"}},
        }
    )
    assert s.url == "redis://:pw@locks:6379/1"
    assert s.key_prefix == "proj-locks"
    assert s.options == {"lock_timeout": 60.0}
    assert s.queues == {"reports": {"lock_timeout": 600.0, "on_duplicate": "raise"}}
    o = s.options_for("proj.send_report", {"on_duplicate": "retry"}, "reports")
    assert (o.lock_timeout, o.on_duplicate) == (600, "retry")
    assert s.options_for("proj.other", {}, "default").lock_timeout == 60
    assert s.options_for("proj.other", {}, None).lock_timeout == 60
    with pytest.raises(TypeError):
        s.options["lock_timeout"] = 1  # type: ignore[index]


def test_app_settings_repr_masks_the_password() -> None:
    s = read_settings({"broker_url": "redis://:s3cret@h:6379/0", "redislock_options": {}})
    assert "s3cret" not in repr(s)
    assert "redis://:****@h:6379/0" in repr(s)


@pytest.mark.parametrize("prefix", ["", "a b", "x\t", 5, None])
def test_bad_key_prefix(prefix: Any) -> None:
    err = settings_error(redislock_key_prefix=prefix)
    assert_names(err, "redislock_key_prefix", "app configuration")
    assert "non-empty str without whitespace" in str(err)


def test_redislock_options_not_a_dict() -> None:
    err = settings_error(redislock_options=[("lock_timeout", 1)])
    assert_names(err, "redislock_options", "app configuration")
    assert "must be a dict" in str(err) and "(a list)" in str(err)


def test_redislock_options_bad_option() -> None:
    err = settings_error(redislock_options={"on_duplicate": "ignore"})
    assert_names(err, "on_duplicate", "redislock_options")


def test_redislock_queues_not_a_dict() -> None:
    err = settings_error(redislock_queues=["reports"])
    assert_names(err, "redislock_queues", "app configuration")
    assert "must be a dict" in str(err)


def test_redislock_queues_entry_not_a_dict() -> None:
    err = settings_error(redislock_queues={"reports": 600})
    assert_names(err, "redislock_queues", "app configuration")
    assert "queue 'reports'" in str(err) and "(a int)" in str(err)


def test_redislock_queues_key_not_a_name() -> None:
    err = settings_error(redislock_queues={1: {}})
    assert_names(err, "redislock_queues", "app configuration")
    assert "got key 1" in str(err)


def test_redislock_queues_bad_option_names_the_queue() -> None:
    err = settings_error(redislock_queues={"reports": {"lock_timeot": 600}})
    assert_names(err, "lock_timeot", "redislock_queues['reports']")
    assert "did you mean 'lock_timeout'?" in str(err)


def test_read_settings_without_a_redis_url() -> None:
    with pytest.raises(RedisURLError):
        read_settings({"broker_url": "amqp://guest:guest@rabbit//", "result_backend": "rpc://"})


def test_read_settings_uses_celery_settings_properties() -> None:
    # Celery's Settings resolves CELERY_BROKER_URL etc. in a property, not in the mapping.
    class Conf(dict[str, Any]):
        broker_url = "redis://from-env:6379/0"

    assert read_settings(Conf(broker_url=None)).url == "redis://from-env:6379/0"


# --- resolve_redis_url ----------------------------------------------------------------------


def test_redislock_url_wins() -> None:
    assert resolve_redis_url("redis://locks/1", "redis://broker/0", "redis://b/2") == ("redis://locks/1")


@pytest.mark.parametrize(
    "url",
    [
        "redis://h:6379/0",
        "rediss://h:6380/0?ssl_cert_reqs=required",
        "sentinel://h:26379",
        "unix:///tmp/redis.sock?db=1",
        "REDIS://h/0",
    ],
)
def test_redis_schemes(url: str) -> None:
    assert resolve_redis_url(url, None, None) == url
    assert resolve_redis_url(None, url, None) == url
    assert resolve_redis_url(None, "amqp://h//", url) == url


def test_redis_socket_becomes_unix() -> None:
    url = "redis+socket:///tmp/redis.sock?virtual_host=2"
    assert resolve_redis_url(None, url, None) == "unix:///tmp/redis.sock?db=2"
    assert resolve_redis_url(None, "redis+socket:///tmp/r.sock", None) == "unix:///tmp/r.sock"


def test_empty_redislock_url_is_unset() -> None:
    assert resolve_redis_url("", "redis://broker/0", None) == "redis://broker/0"


def test_broker_before_result_backend() -> None:
    assert resolve_redis_url(None, "redis://broker/0", "redis://backend/1") == "redis://broker/0"
    assert resolve_redis_url(None, "amqp://h//", "redis://backend/1") == "redis://backend/1"
    assert resolve_redis_url(None, None, "redis://backend/1") == "redis://backend/1"


def test_failover_broker_takes_the_first() -> None:
    assert resolve_redis_url(None, "redis://a/0;redis://b/0", None) == "redis://a/0"
    assert resolve_redis_url(None, ["redis://a/0", "redis://b/0"], None) == "redis://a/0"
    # Only the first counts: Celery connects to it first.
    assert resolve_redis_url(None, "amqp://a//;redis://b/0", "redis://c/0") == "redis://c/0"


def test_sentinel_keeps_every_host() -> None:
    hosts = "sentinel://:pw@s1:26379/0;sentinel://:pw@s2:26379/0;sentinel://:pw@s3:26379/0"
    assert resolve_redis_url(None, hosts, None) == hosts
    assert resolve_redis_url(None, hosts.split(";"), None) == hosts
    assert resolve_redis_url(hosts, None, None) == hosts


def test_redislock_url_not_redis() -> None:
    with pytest.raises(RedisURLError) as info:
        resolve_redis_url("amqp://user:s3cret@rabbit//", "redis://broker/0", None)
    msg = str(info.value)
    assert "redislock_url" in msg and "amqp://user:****@rabbit//" in msg
    assert "s3cret" not in msg
    assert isinstance(info.value, ConfigurationError)


@pytest.mark.parametrize("value", [5, ["redis://a", 1], "localhost:6379"])
def test_redislock_url_of_the_wrong_form(value: Any) -> None:
    with pytest.raises(RedisURLError, match="redislock_url must be a Redis URL"):
        resolve_redis_url(value, None, None)


def test_no_redis_url_lists_what_was_found() -> None:
    with pytest.raises(RedisURLError) as info:
        resolve_redis_url(None, "amqp://guest:hunter2@rabbit:5672//", "db+postgresql://u:pgpw@db/x")
    msg = str(info.value)
    for name in ("redislock_url", "broker_url", "result_backend"):
        assert name in msg
    assert "redislock_url=None" in msg
    assert "broker_url='amqp://guest:****@rabbit:5672//'" in msg
    assert "result_backend='db+postgresql://u:****@db/x'" in msg
    assert "hunter2" not in msg and "pgpw" not in msg
    assert "set redislock_url" in msg


def test_no_redis_url_at_all() -> None:
    with pytest.raises(RedisURLError, match="none of redislock_url, broker_url, result_backend"):
        resolve_redis_url(None, None, None)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:secret@host:6379/0", "redis://:****@host:6379/0"),
        ("redis://user:secret@host/0", "redis://user:****@host/0"),
        ("redis://secret@host/0", "redis://****@host/0"),
        ("redis://:se@c/ret@host/0", "redis://:****@host/0"),
        ("redis://host/0?password=secret&db=1", "redis://host/0?password=****&db=1"),
        ("sentinel://:secret@a;sentinel://:secret@b", "sentinel://:****@a;sentinel://:****@b"),
        ("redis://host:6379/0", "redis://host:6379/0"),
    ],
)
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert "secret" not in mask_url([url, url])


def test_mask_in_every_error() -> None:
    for args in (
        ("amqp://:secret@h//", None, None),
        (None, "amqp://:secret@h//", "rpc://"),
        (None, ["amqp://:secret@h//", "amqp://:secret@g//"], None),
    ):
        with pytest.raises(RedisURLError) as info:
            resolve_redis_url(*args)
        assert "secret" not in str(info.value)


# --- random bad configurations --------------------------------------------------------------

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(["skip", "retry", "raise", "wait", "execute", "enqueue", "run", "fail"])
    | st.just(lambda task, args, kwargs: "k"),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
names = st.sampled_from(sorted(OPTION_NAMES)) | st.text(max_size=20) | st.integers()


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(names, values, max_size=5))
def test_random_configs_validate_or_raise_option_error(config: dict[Any, Any]) -> None:
    try:
        result = validate(config, TASK)
    except OptionError as err:
        assert err.source == TASK
        assert str(err).startswith(f"{TASK}: option ")
        return
    assert set(result) <= OPTION_NAMES
    assert validate(result, TASK) == result


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(sorted(OPTION_NAMES)), values, max_size=4),
    st.dictionaries(st.sampled_from(sorted(OPTION_NAMES)), values, max_size=4),
)
def test_random_layers_resolve_or_raise_option_error(task: dict[str, Any], app: dict[str, Any]) -> None:
    try:
        o = resolve(task, {}, app, task_source=TASK, queue_source=QUEUE)
    except OptionError as err:
        assert err.source in (TASK, APP)
        return
    assert o.renew_interval_s < o.lock_timeout
