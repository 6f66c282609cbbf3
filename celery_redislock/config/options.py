"""Lock options: the lock's own, each declared once (a ``LockOption`` of ``LockOptions``),
validation of one layer, resolution task > queue > app."""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Mapping
from typing import Any, Literal, NoReturn, get_args

from ..engine.checks import (
    BadValue,
    check_count,
    check_flag,
    non_negative_seconds,
    number_text,
    one_of,
    optional_seconds,
    positive_seconds,
)
from ..engine.timing import DEFAULT_TIMEOUT, renew_interval, to_ms
from ..errors import OptionError
from .arguments import LockKey, LockKeyFunc, check_lock_key
from .lock_only import drop_broader, unlocked_clash
from .mode_rules import mode_clash
from .schema import LockOption, OptionSpec, add_options, option_names, option_specs, spec_of

__all__ = [
    "APP_CONFIGURATION",
    "LockKey",
    "LockKeyFunc",
    "LockOn",
    "LockOptions",
    "OnDuplicate",
    "OnRedisError",
    "OptionSpec",
    "SkipResult",
    "add_options",
    "check_lock_key",
    "option_names",
    "option_specs",
    "resolve",
    "source_queue",
    "source_task",
    "unknown_option",
    "validate",
]

OnDuplicate = Literal["skip", "retry", "raise", "wait"]
LockOn = Literal["execute", "enqueue"]
OnRedisError = Literal["retry", "run", "fail"]
SkipResult = Literal["failure", "success", "ignore"]


class LockOptions:
    """The options of one task consumed from one queue: the lock's own as attributes, every
    option (a mode's too) through ``value``. Frozen, hashable and comparable.

    Each attribute below is the lock's option itself (its spec, ``LockOption``): the one place
    it is declared, which the schema, the task class and the options reference read.
    Constructing one validates it (source ``LockOptions``), so an instance is always usable.
    """

    lock_timeout = LockOption(
        "lock_timeout",
        DEFAULT_TIMEOUT,
        positive_seconds,
        "Seconds the lock lives in Redis without renewal.",
        "float",
    )
    renew_interval = LockOption(
        "renew_interval",
        None,
        optional_seconds,
        "Seconds between renewals of a held lock; None: ``lock_timeout / 3``.",
        "float | None",
    )
    lock_key: LockOption[LockKey] = LockOption(
        "lock_key",
        None,
        check_lock_key,
        "What the key is made of: None (every argument), a list of argument names (``[]``: one "
        "run of the task at a time, whatever its arguments), or ``(task, args, kwargs) -> str``.",
        "list[str] | callable | None",
    )
    on_duplicate: LockOption[OnDuplicate] = LockOption(
        "on_duplicate",
        "skip",
        one_of(get_args(OnDuplicate)),
        "What a call whose key is held does: ``skip``, ``retry``, ``raise`` or ``wait``.",
        "str",
    )
    acquire_timeout = LockOption(
        "acquire_timeout", 10.0, non_negative_seconds, "Seconds ``wait`` waits for the holder.", "float"
    )
    retry_countdown = LockOption(
        "retry_countdown", 5.0, non_negative_seconds, "Countdown of a duplicate's ``retry``.", "float"
    )
    release_on_retry = LockOption(
        "release_on_retry",
        True,
        check_flag,
        "False keeps the lock across ``self.retry()``: the retried run takes it over.",
        "bool",
    )
    lock_on: LockOption[LockOn] = LockOption(
        "lock_on",
        "execute",
        one_of(get_args(LockOn)),
        "When the lock is taken: ``execute`` (in the worker) or ``enqueue`` (at send).",
        "str",
    )
    queued_timeout = LockOption(
        "queued_timeout", 3600.0, positive_seconds, "TTL of a lock taken at enqueue.", "float"
    )
    on_redis_error: LockOption[OnRedisError] = LockOption(
        "on_redis_error",
        "retry",
        one_of(get_args(OnRedisError)),
        "When Redis cannot be reached to take the lock: ``retry``, ``run`` (unlocked) or ``fail``.",
        "str",
    )
    max_concurrency = LockOption(
        "max_concurrency", 1, check_count, "Executions of one key allowed at once.", "int"
    )
    fencing = LockOption(
        "fencing",
        False,
        check_flag,
        "True: each acquisition issues a fencing token (``self.request.redislock.token``).",
        "bool",
    )
    skip_result: LockOption[SkipResult] = LockOption(
        "skip_result",
        "failure",
        one_of(get_args(SkipResult)),
        "What a skipped call stores: ``failure`` (``DuplicateTaskError``), ``success`` (a dict "
        "naming the holder) or ``ignore`` (nothing, except in a chord: ``failure``).",
        "str",
    )
    lock = LockOption(
        "lock",
        True,
        check_flag,
        "False: the call takes no lock (no key, no duplicates refused); fair share and the rate "
        "limits still apply. The options that only mean something with a lock are refused with it.",
        "bool",
    )

    #: The registered modes' options, ``(name, value)`` in name order: a tuple, so options
    #: stay hashable and comparable.
    mode_values: tuple[tuple[str, Any], ...]

    def __init__(self, **values: Any) -> None:
        defaults = {spec.name: spec.default for spec in option_specs()}
        checked = validate({**defaults, **values}, "LockOptions", merged=True)
        # Frozen: the normalised values (list -> tuple, int -> float) go in behind the guard,
        # into the instance's __dict__, where attribute reads find them first.
        own = vars(self)
        for name in _LOCK_NAMES:
            own[name] = checked[name]
        modes = tuple(sorted((name, value) for name, value in checked.items() if name not in own))
        own["mode_values"] = modes

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    @functools.cached_property
    def _values(self) -> tuple[Any, ...]:
        own = vars(self)
        return (*(own[name] for name in _LOCK_NAMES), self.mode_values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LockOptions):
            return NotImplemented
        return self._values == other._values

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        own = vars(self)
        shown = ", ".join(f"{name}={own[name]!r}" for name in _LOCK_NAMES)
        return f"LockOptions({shown}, mode_values={self.mode_values!r})"

    def value(self, name: str) -> Any:
        """The value of the option ``name``, the lock's own or a registered mode's."""
        if name in _LOCK_NAMES:
            return getattr(self, name)
        try:
            return self._mode_values[name]
        except KeyError:
            raise AttributeError(f"no option named {name!r} is registered") from None

    # Cached (read on every task): the instance's own __dict__ takes them.
    @functools.cached_property
    def _mode_values(self) -> dict[str, Any]:
        return dict(self.mode_values)

    @functools.cached_property
    def timeout_ms(self) -> int:
        """``lock_timeout`` in whole milliseconds (at least 1)."""
        return to_ms(self.lock_timeout)

    @functools.cached_property
    def renew_interval_s(self) -> float:
        """The effective renew interval: ``renew_interval``, or ``lock_timeout / 3``."""
        if self.renew_interval is None:
            return renew_interval(self.lock_timeout)
        return self.renew_interval

    @property
    def renew_interval_ms(self) -> int:
        """The effective renew interval in whole milliseconds (at least 1)."""
        return to_ms(self.renew_interval_s)

    @property
    def queued_timeout_ms(self) -> int:
        """``queued_timeout`` in whole milliseconds (at least 1)."""
        return to_ms(self.queued_timeout)

    @property
    def acquire_timeout_ms(self) -> int:
        """``acquire_timeout`` in whole milliseconds (0 means do not wait)."""
        return to_ms(self.acquire_timeout, minimum=0)


#: The lock's own options, in the order declared: the first the schema knows.
_LOCK_NAMES: tuple[str, ...] = tuple(
    name for name, spec in vars(LockOptions).items() if isinstance(spec, LockOption)
)
add_options(vars(LockOptions)[name] for name in _LOCK_NAMES)


# --- validation of one layer ----------------------------------------------------------------


def unknown_option(name: Any) -> str:
    names = option_names()
    known = ", ".join(sorted(names))
    close = difflib.get_close_matches(name, names, n=1) if isinstance(name, str) else []
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"is unknown{hint}; known options: {known}"


def _renew_too_long(renew: float, timeout: float, renew_from: str, timeout_from: str) -> str:
    return (
        f"must be < lock_timeout ({number_text(timeout)}{timeout_from}), got {number_text(renew)}{renew_from}; "
        f"lower it, or leave renew_interval unset to renew every lock_timeout / 3"
    )


def validate(options: Mapping[str, Any], source: str, *, merged: bool = False) -> dict[str, Any]:
    """Check one layer of options and return it normalised (seconds as float, lists as tuples).

    ``source`` names the layer in errors: ``source_task(...)``, ``source_queue(...)`` or
    ``"redislock_options"``; ``merged``: the layers merged with the defaults (a
    ``LockOptions``), where a clash only one layer can show is not looked for. Idempotent: a
    validated layer validates to itself.

    Raises ``OptionError`` for an unknown name, a wrong type, an out-of-range value, or a
    ``renew_interval`` not below the ``lock_timeout`` set in the same layer.
    """
    result: dict[str, Any] = {}
    for name, value in options.items():
        spec = spec_of(name) if isinstance(name, str) else None
        if spec is None:
            raise OptionError(str(name), source, unknown_option(name))
        try:
            result[name] = spec.check(value)
        except BadValue as bad:
            raise OptionError(name, source, str(bad)) from None
    renew, timeout = result.get("renew_interval"), result.get("lock_timeout")
    if renew is not None and timeout is not None and renew >= timeout:
        problem = _renew_too_long(renew, timeout, "", " set in the same place")
        raise OptionError("renew_interval", source, problem)
    clash = _clash(result, merged=merged)
    if clash is not None:
        raise OptionError(clash[0], source, clash[1] + " set in the same place")
    return result


def _clash(options: Mapping[str, Any], *, merged: bool = False) -> tuple[str, str, str] | None:
    """``(option, problem, other option)`` for two options that cannot go together, else None;
    ``merged``: ``options`` are the layers merged, not one layer (an unset ``lock_on`` is then
    the default, ``"execute"``; within one layer only an explicit one clashes).

    A semaphore (``max_concurrency`` > 1) is taken by each execution for itself: it is not
    taken at enqueue, nor handed over to a retry, and its slots, held side by side, have no
    fencing token to order them. Then the registered modes' rules (``mode_clash``). First of all,
    ``lock=False`` with an option that needs the lock (``lock_only``).
    """
    unlocked = unlocked_clash(options)
    if unlocked is not None:
        return unlocked
    limit = options.get("max_concurrency") or 1
    if limit > 1 and options.get("lock_on") == "enqueue":
        problem = f"'enqueue' cannot be used with max_concurrency={limit} (use 'execute')"
        return "lock_on", problem, "max_concurrency"
    if limit > 1 and options.get("release_on_retry") is False:
        problem = f"False cannot be used with max_concurrency={limit} (use True)"
        return "release_on_retry", problem, "max_concurrency"
    if limit > 1 and options.get("fencing") is True:
        return "fencing", f"True cannot be used with max_concurrency={limit} (use 1)", "max_concurrency"
    return mode_clash(options, limit, merged=merged)


# --- resolution across layers ---------------------------------------------------------------


#: How errors name the app's own settings (``redislock_*`` and a peer's).
APP_CONFIGURATION = "app configuration"


def source_task(name: str) -> str:
    """How errors name options given on a task: ``task 'proj.add'``."""
    return f"task {name!r}"


def source_queue(name: str) -> str:
    """How errors name options of a queue: ``redislock_queues['reports']``."""
    return f"redislock_queues[{name!r}]"


def resolve(
    task: Mapping[str, Any],
    queue: Mapping[str, Any],
    app: Mapping[str, Any],
    *,
    task_source: str,
    queue_source: str,
    app_source: str = "redislock_options",
) -> LockOptions:
    """Merge the layers, most specific first: task > queue > app > built-in defaults.

    A value of None in a layer means "not set here" (Celery's convention for task
    attributes), so it falls through to the next layer; the defaults of ``renew_interval``
    and ``lock_key`` are None anyway. Each layer is validated with its source, then the
    merged ``renew_interval`` is checked against the merged ``lock_timeout``.
    """
    layers = [
        (validate(task, task_source), task_source),
        (validate(queue, queue_source), queue_source),
        (validate(app, app_source), app_source),
    ]
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for values, source in reversed(layers):  # least specific first, so later ones win
        for name, value in values.items():
            if value is not None:
                merged[name] = value
                origin[name] = source
    drop_broader(merged, origin, [source for _, source in layers])
    renew = merged.get("renew_interval")
    timeout = merged.get("lock_timeout", LockOptions.lock_timeout.default)
    if renew is not None and renew >= timeout:
        # Blame the most specific layer involved: that is the one the user is most likely
        # to have just changed, and the one where a fix does not affect other tasks.
        involved = {origin["renew_interval"], origin.get("lock_timeout")}
        blamed = next(source for _, source in layers if source in involved)
        problem = _renew_too_long(
            renew,
            timeout,
            f" from {origin['renew_interval']}",
            f" from {origin.get('lock_timeout', 'the default')}",
        )
        raise OptionError("renew_interval", blamed, problem)
    clash = _clash({"lock_on": LockOptions.lock_on.default, **merged}, merged=True)
    if clash is not None:
        option, problem, other = clash
        involved = {origin[option], origin.get(other)}
        blamed = next(source for _, source in layers if source in involved)
        raise OptionError(
            option,
            blamed,
            f"{problem} (from {origin.get(other, 'the default')}; {option} from {origin[option]})",
        )
    return LockOptions(**merged)
