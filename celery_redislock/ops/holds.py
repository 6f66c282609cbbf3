"""An operator's holds, from Python, the CLI (``celery redislock hold``) and the web page: hold a
task's calls, or those with given argument values (one tenant, one account), for a time or until
lifted, on every worker; lift a hold; list those in force. What is asked for is checked against
the app's tasks first, and refused with an ``OptionError`` naming what is wrong, nothing changed:
a task the app does not have or that is not a ``SingletonTask`` (no worker would obey), a key
naming an argument its body has not, a length not > 0. The gate that obeys them is
``gates.task_holds``; their state, ``engine.holds``."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Mapping
from typing import Any

from celery import Celery

from ..engine.checks import check_argument
from ..engine.holds import Hold, HoldKey, lift_hold, read_holds, set_hold
from ..errors import OptionError
from ..integration.runtime import run_function, runtime_for
from ..integration.task import SingletonTask

__all__ = ["MAX_HOLD", "Hold", "hold_calls", "hold_key", "lift_calls", "show_holds"]

#: The longest timed hold, in seconds (30 days): a longer one is a hold until lifted.
MAX_HOLD = 30 * 24 * 3600.0


def hold_key(given: Mapping[str, Any] | Iterable[str] | None, source: str) -> HoldKey:
    """The argument values a hold names: a mapping of argument name -> value, or ``NAME=VALUE``
    texts (the CLI's ``--key``); values compared as text. ``OptionError`` for a text without
    ``=``, an empty name or a name given twice."""
    if given is None:
        return ()
    pairs: list[tuple[str, str]] = []
    if isinstance(given, Mapping):
        pairs = [(str(name), str(value)) for name, value in given.items()]
    else:
        for text in given:
            name, equals, value = str(text).partition("=")
            if not equals:
                raise OptionError(
                    "key", source, f"must be NAME=VALUE (an argument and its value), got {text!r}"
                )
            pairs.append((name.strip(), value))
    names = [name for name, _ in pairs]
    if any(not name for name in names):
        raise OptionError("key", source, "names an empty argument (NAME=VALUE, NAME not empty)")
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise OptionError("key", source, f"names argument {twice!r} twice")
    return tuple(sorted(pairs))


def _task(app: Celery, name: str, source: str) -> SingletonTask:
    """The app's task ``name``, a ``SingletonTask``; its modules imported first if not found
    (a CLI's app has not imported them)."""
    task = app.tasks.get(name)
    if task is None:
        app.loader.import_default_modules()
        task = app.tasks.get(name)
    if task is None:
        raise OptionError("task", source, f"names task {name!r}, which the app has not registered")
    if not isinstance(task, SingletonTask):
        raise OptionError(
            "task",
            source,
            f"names task {name!r}, which is not a SingletonTask (base=SingletonTask): no worker would obey a hold of it",
        )
    return task


def _check_key(task: SingletonTask, key: HoldKey, source: str) -> None:
    """Every name of ``key`` is a named argument of the task's body."""
    parameters = inspect.signature(run_function(type(task))).parameters
    named = [
        name
        for name, parameter in parameters.items()
        if parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    unknown = next((name for name, _ in key if name not in named), None)
    if unknown is not None:
        raise OptionError(
            "key",
            source,
            f"names argument {unknown!r}, which task {task.name!r} has not: its arguments are "
            f"{', '.join(named) or 'none'}",
        )


def _seconds(seconds: Any, source: str) -> float | None:
    if seconds is None:
        return None
    checked: float = check_argument("seconds", "seconds", seconds, source)
    if checked > MAX_HOLD or not math.isfinite(checked):
        raise OptionError(
            "seconds",
            source,
            f"must be at most {MAX_HOLD:.0f} (30 days) for a timed hold, got {checked:g}: "
            "for a longer one, hold until lifted",
        )
    return checked


def hold_calls(
    app: Celery,
    task: str,
    key: Mapping[str, Any] | Iterable[str] | None = None,
    seconds: float | None = None,
) -> Hold | None:
    """Hold the calls of ``task`` (with the argument values of ``key``, all of them when None) on
    every worker, for ``seconds`` (None: until ``lift_calls``), replacing a hold of the same task
    and key. A call it meets waits (re-queued, never dropped) until it ends. Returns the hold it
    replaced, or None. ``OptionError`` for bad input, nothing changed."""
    source = f"hold_calls({task!r})"
    checked_key = hold_key(key, source)
    length = _seconds(seconds, source)
    _check_key(_task(app, task, source), checked_key, source)
    runtime = runtime_for(app)
    return set_hold(runtime.scripts, runtime.settings.key_prefix, task, checked_key, length)


def lift_calls(app: Celery, task: str, key: Mapping[str, Any] | Iterable[str] | None = None) -> Hold | None:
    """Lift the hold of ``task`` and ``key`` now: the calls it held run when they look again
    (within ``gates.task_holds.RECHECK``). Returns the hold as it was, or None: none was in
    force. A lift needs no registered task: a hold of a task since removed can be lifted."""
    runtime = runtime_for(app)
    checked_key = hold_key(key, f"lift_calls({task!r})")
    return lift_hold(runtime.scripts, runtime.settings.key_prefix, task, checked_key)


def show_holds(app: Celery) -> list[Hold]:
    """The holds in force, by task and key, with the seconds each has left (None: until lifted)."""
    runtime = runtime_for(app)
    return read_holds(runtime.scripts, runtime.settings.key_prefix)
