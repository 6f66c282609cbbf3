"""Fuzzing the pure parts: key derivation and option validation never fail any other way than
the documented error (SPEC sections 2 and 3).

Example counts come from the hypothesis profile (``tests/conftest.py``): a hundred per property
in the normal run, 100 000 with ``--hypothesis-profile=fuzz``.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from test_keys import KEY_RE, any_args, anything, f
from test_options import names, values

import celery_redislock.gates
import celery_redislock.modes  # noqa: F401  (registers the modes and their options)
from celery_redislock.config.arguments import KeyBuilder
from celery_redislock.config.options import option_names, validate
from celery_redislock.config.settings import SETTING_DEFAULTS, read_settings
from celery_redislock.errors import ConfigurationError, LockKeyError, OptionError

OPTION_NAMES = option_names()

TASK = "proj.f"


def reordered(value: Any, rnd: random.Random) -> Any:
    """An equal value whose dicts (at every depth) were built in another insertion order."""
    if isinstance(value, dict):
        items = [(key, reordered(item, rnd)) for key, item in value.items()]
        rnd.shuffle(items)
        return type(value)(items) if type(value) is not dict else dict(items)
    if type(value) is list:
        return [reordered(item, rnd) for item in value]
    if type(value) is tuple:
        return tuple(reordered(item, rnd) for item in value)
    return value


def key_or_error(builder: KeyBuilder, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The key, or None for the documented LockKeyError; any other exception fails the test."""
    try:
        key = builder.key(args, kwargs)
    except LockKeyError as exc:
        assert exc.task == TASK
        assert exc.argument.startswith(("args", "kwargs", "x", "y")), exc.argument
        assert "lock_key" in str(exc)
        return None
    assert KEY_RE.match(key), key
    return key


@given(
    st.lists(anything, max_size=3).map(tuple),
    st.dictionaries(st.text(max_size=8), anything, max_size=3),
    st.randoms(use_true_random=False),
)
def test_nested_arguments_give_a_stable_key_or_a_lock_key_error(
    args: tuple[Any, ...], kwargs: dict[str, Any], rnd: random.Random
) -> None:
    builder = KeyBuilder("redislock", TASK, any_args)
    key = key_or_error(builder, args, kwargs)
    if key is None:
        return
    # Stable: the same on every call, for a deep copy, and whatever order dicts were built in.
    assert builder.key(args, kwargs) == key
    assert builder.key(copy.deepcopy(args), copy.deepcopy(kwargs)) == key
    assert builder.key(reordered(args, rnd), reordered(kwargs, rnd)) == key
    # A fresh builder (another process would have one) agrees.
    assert KeyBuilder("redislock", TASK, any_args).key(args, kwargs) == key


@given(anything, anything)
def test_equal_calls_through_a_signature_share_a_key(x: Any, y: Any) -> None:
    builder = KeyBuilder("redislock", TASK, f)
    key = key_or_error(builder, (x, y), {})
    if key is None:
        return
    assert builder.key((), {"y": y, "x": x}) == key
    assert builder.key((x,), {"y": y}) == key


@given(st.dictionaries(names, values, max_size=6))
def test_generated_configs_validate_or_raise_option_error(config: dict[Any, Any]) -> None:
    try:
        result = validate(config, "task 'proj.f'")
    except OptionError as exc:
        assert str(exc).startswith("task 'proj.f': option ")
        return
    assert set(result) <= OPTION_NAMES
    assert validate(result, "task 'proj.f'") == result


settings_values = values | st.dictionaries(names, values, max_size=3) | st.text(max_size=30)
urls = st.sampled_from(["redis://h:1/0", "amqp://h//", "rediss://:pw@h/2", "", "sentinel://h:26379"]) | values


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "redislock_url": urls,
            "redislock_key_prefix": settings_values,
            "redislock_options": settings_values
            | st.dictionaries(st.sampled_from(sorted(OPTION_NAMES)), values),
            "redislock_queues": settings_values | st.dictionaries(st.text(max_size=5), settings_values),
            "broker_url": urls,
            "result_backend": urls,
        },
    )
)
def test_generated_app_settings_read_or_raise_a_configuration_error(conf: dict[str, Any]) -> None:
    try:
        settings = read_settings({**SETTING_DEFAULTS, **conf})
    except ConfigurationError as exc:  # OptionError or RedisURLError, each naming the setting
        assert "redislock" in str(exc) or "url" in str(exc).lower(), str(exc)
        return
    assert settings.url and settings.key_prefix
