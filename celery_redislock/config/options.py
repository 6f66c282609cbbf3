"""Lock options: the schema and its defaults, validation of one layer, resolution task > queue > app."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

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
from .mode_rules import mode_clash
from .schema import LOCK, OptionSpec, add_options, option_names, option_specs, spec_of

__all__ = [
    "APP_CONFIGURATION",
    "LockKey",
    "LockKeyFunc",
    "LockOn",
    "LockOptions",
    "LockUntil",
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
#: How long a lock taken at enqueue lasts: until the task finished, or until a worker starts it.
LockUntil = Literal["finished", "started"]
OnRedisError = Literal["retry", "run", "fail"]
SkipResult = Literal["failure", "success", "ignore"]


@dataclass(frozen=True, init=False)
class LockOptions:
    """The options of one task consumed from one queue: the lock's own as attributes, every
    option (a mode's too) through ``value``.

    Constructing one validates it (source ``LockOptions``), so an instance is always usable.
    """

    lock_timeout: float = DEFAULT_TIMEOUT
    renew_interval: float | None = None
    lock_key: LockKey = None
    on_duplicate: OnDuplicate = "skip"
    acquire_timeout: float = 10.0
    retry_countdown: float = 5.0
    release_on_retry: bool = True
    lock_on: LockOn = "execute"
    queued_timeout: float = 3600.0
    on_redis_error: OnRedisError = "retry"
    max_concurrency: int = 1
    lock_until: LockUntil = "finished"
    fencing: bool = False
    skip_result: SkipResult = "failure"
    #: The registered modes' options, ``(name, value)`` in name order: a tuple, so options
    #: stay hashable and comparable.
    mode_values: tuple[tuple[str, Any], ...] = ()

    def __init__(self, **values: Any) -> None:
        defaults = {spec.name: spec.default for spec in option_specs()}
        checked = validate({**defaults, **values}, "LockOptions", merged=True)
        # Frozen: the normalised values (list -> tuple, int -> float) go in behind the guard.
        for name, value in checked.items():
            if name in _LOCK_NAMES:
                object.__setattr__(self, name, value)
        modes = tuple(sorted((name, value) for name, value in checked.items() if name not in _LOCK_NAMES))
        object.__setattr__(self, "mode_values", modes)

    def value(self, name: str) -> Any:
        """The value of the option ``name``, the lock's own or a registered mode's."""
        if name in _LOCK_NAMES:
            return getattr(self, name)
        try:
            return self._mode_values[name]
        except KeyError:
            raise AttributeError(f"no option named {name!r} is registered") from None

    # Cached (read on every task): a frozen dataclass still has an instance __dict__.
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


# --- validation of one layer ----------------------------------------------------------------


def _spec(name: str, check: Callable[[Any], Any], kind: str, doc: str) -> OptionSpec:
    return OptionSpec(name, LockOptions.__dataclass_fields__[name].default, check, doc, kind, LOCK)


add_options(
    [
        _spec("lock_timeout", positive_seconds, "float", "Seconds the lock lives in Redis without renewal."),
        _spec(
            "renew_interval",
            optional_seconds,
            "float | None",
            "Seconds between renewals of a held lock; None: ``lock_timeout / 3``.",
        ),
        _spec(
            "lock_key",
            check_lock_key,
            "list[str] | callable | None",
            "What the key is made of: None (every argument), a list of argument names (``[]``: one "
            "run of the task at a time, whatever its arguments), or ``(task, args, kwargs) -> str``.",
        ),
        _spec(
            "on_duplicate",
            one_of(get_args(OnDuplicate)),
            "str",
            "What a call whose key is held does: ``skip``, ``retry``, ``raise`` or ``wait``.",
        ),
        _spec("acquire_timeout", non_negative_seconds, "float", "Seconds ``wait`` waits for the holder."),
        _spec("retry_countdown", non_negative_seconds, "float", "Countdown of a duplicate's ``retry``."),
        _spec(
            "release_on_retry",
            check_flag,
            "bool",
            "False keeps the lock across ``self.retry()``: the retried run takes it over.",
        ),
        _spec(
            "lock_on",
            one_of(get_args(LockOn)),
            "str",
            "When the lock is taken: ``execute`` (in the worker) or ``enqueue`` (at send).",
        ),
        _spec("queued_timeout", positive_seconds, "float", "TTL of a lock taken at enqueue."),
        _spec(
            "on_redis_error",
            one_of(get_args(OnRedisError)),
            "str",
            "When Redis cannot be reached to take the lock: ``retry``, ``run`` (unlocked) or ``fail``.",
        ),
        _spec("max_concurrency", check_count, "int", "Executions of one key allowed at once."),
        _spec(
            "lock_until",
            one_of(get_args(LockUntil)),
            "str",
            "``finished``, or ``started`` (with ``lock_on='enqueue'``): unique while queued only.",
        ),
        _spec(
            "fencing",
            check_flag,
            "bool",
            "True: each acquisition issues a fencing token (``self.request.redislock.token``).",
        ),
        _spec(
            "skip_result",
            one_of(get_args(SkipResult)),
            "str",
            "What a skipped call stores: ``failure`` (``DuplicateTaskError``), ``success`` (a dict "
            "naming the holder) or ``ignore`` (nothing, except in a chord: ``failure``).",
        ),
    ]
)
_LOCK_NAMES = option_names()


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
    ``merged``: ``options`` are the layers merged, not one layer.

    A semaphore (``max_concurrency`` > 1) is taken by each execution for itself: it is not
    taken at enqueue, nor handed over to a retry. ``lock_until="started"`` releases a lock
    taken at enqueue, so it needs ``lock_on="enqueue"`` (an unset ``lock_on`` is the default,
    ``"execute"``, once the layers are merged; within one layer only an explicit one clashes).
    """
    limit = options.get("max_concurrency") or 1
    if limit > 1 and options.get("lock_on") == "enqueue":
        problem = f"'enqueue' cannot be used with max_concurrency={limit} (use 'execute')"
        return "lock_on", problem, "max_concurrency"
    if limit > 1 and options.get("release_on_retry") is False:
        problem = f"False cannot be used with max_concurrency={limit} (use True)"
        return "release_on_retry", problem, "max_concurrency"
    fencing = _fencing_clash(options, limit)
    if fencing is not None:
        return fencing
    lock_on = options.get("lock_on")
    if options.get("lock_until") == "started" and lock_on is not None and lock_on != "enqueue":
        problem = (
            f"'started' cannot be used with lock_on={lock_on!r} (use lock_on='enqueue': only a lock "
            f"taken at enqueue can be released when the task starts)"
        )
        return "lock_until", problem, "lock_on"
    return mode_clash(options, limit, merged=merged)


def _fencing_clash(options: Mapping[str, Any], limit: int) -> tuple[str, str, str] | None:
    """A fencing token orders the holders of one lock: a semaphore's slots are held side by
    side, and ``lock_until="started"`` runs the body unlocked, so neither has one."""
    if options.get("fencing") is not True:
        return None
    if limit > 1:
        return "fencing", f"True cannot be used with max_concurrency={limit} (use 1)", "max_concurrency"
    if options.get("lock_until") == "started":
        problem = "True cannot be used with lock_until='started' (the body runs unlocked)"
        return "fencing", problem, "lock_until"
    return None


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
    renew = merged.get("renew_interval")
    timeout = merged.get("lock_timeout", LockOptions.lock_timeout)
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
    clash = _clash({"lock_on": LockOptions.lock_on, **merged}, merged=True)
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
