"""The old libraries' key formats, as the transition computes them, against the libraries' own code."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from celery_redislock.compat import Singleton
from celery_redislock.compat.once import legacy_once_key
from celery_redislock.compat.singleton import legacy_singleton_key

CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1, 2), {}),
    ((1,), {"b": "x"}),
    (("1", [1, {"z": 1, "a": [2, "s"]}]), {}),
    ((), {"a": {"k": {"n": None}}, "b": 1.5}),
    ((1, 2), {"c": True}),
]


def run(a: Any, b: Any = None, **more: Any) -> None: ...


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
@pytest.mark.parametrize("keys", [None, ["a"], []])
def test_celery_once_keys(args: tuple[Any, ...], kwargs: dict[str, Any], keys: list[str] | None) -> None:
    helpers = pytest.importorskip("celery_once.helpers")
    import inspect

    arguments = dict(inspect.signature(run).bind(*args, **kwargs).arguments)
    expected = helpers.queue_once_key("proj.run", arguments, keys)
    assert legacy_once_key("proj.run", arguments, keys) == expected


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
@pytest.mark.parametrize("unique_on", [None, ["a"], "a", []])
def test_celery_singleton_keys(args: tuple[Any, ...], kwargs: dict[str, Any], unique_on: Any) -> None:
    old = pytest.importorskip("celery_singleton")
    old_app, new_app = (
        Celery("keys", set_as_current=False, broker="memory://", backend="redis://localhost/1") for _ in "on"
    )
    for app in (old_app, new_app):
        app.conf.singleton_key_prefix = "OLD_"

    @old_app.task(base=old.Singleton, shared=False, name="proj.run", unique_on=unique_on)
    def old_run(a: Any, b: Any = None, **more: Any) -> None: ...

    @new_app.task(base=Singleton, shared=False, name="proj.run", unique_on=unique_on)
    def new_run(a: Any, b: Any = None, **more: Any) -> None: ...

    assert legacy_singleton_key(new_app.tasks[new_run.name], args, kwargs) == old_run.generate_lock(
        "proj.run", args, kwargs
    )
