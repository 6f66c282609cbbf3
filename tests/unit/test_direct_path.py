"""Which ``Redis.execute_command`` counts as redis-py's own, wrapped by nobody: the one test of
whether a held connection's calls may skip it (``engine/script_runner.py``)."""

from __future__ import annotations

import functools
from typing import Any

import redis

from celery_redislock.engine.script_runner import is_redis_pys_own

OWN = redis.Redis.execute_command


def test_redis_pys_own_function_is_its_own() -> None:
    assert is_redis_pys_own(OWN)
    assert is_redis_pys_own(redis.StrictRedis.execute_command)


def test_a_wrapper_is_not_its_own_however_it_is_made() -> None:
    @functools.wraps(OWN)
    def wrapped(self: Any, *args: Any, **options: Any) -> Any:  # as a decorator-style patcher
        return OWN(self, *args, **options)

    class Proxy:  # as wrapt's FunctionWrapper (OpenTelemetry's): an object, not a function
        __wrapped__ = OWN

        def __call__(self, *args: Any, **options: Any) -> Any:
            return OWN(*args, **options)

    assert not is_redis_pys_own(wrapped)
    assert not is_redis_pys_own(Proxy())
    assert not is_redis_pys_own(functools.partial(OWN))


def test_a_subclass_that_overrides_it_is_not_its_own() -> None:
    class Logged(redis.Redis):
        def execute_command(self, *args: Any, **options: Any) -> Any:
            return super().execute_command(*args, **options)

    assert not is_redis_pys_own(Logged.execute_command)
