"""Lock options and app settings: defaults, validation, resolution task > queue > app > defaults."""

from __future__ import annotations

import difflib
import math
import numbers
import re
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Literal, Optional, Union, get_args
from urllib.parse import parse_qsl, urlencode, urlsplit

from .errors import OptionError, RedisURLError
from .keys import LockKeyFunc

__all__ = [
    "CLOSE_TO_OPTION",
    "CLUSTER_PARAM",
    "OPTION_NAMES",
    "PEER_OPTIONS",
    "REDIS_URL_SCHEMES",
    "SETTING_DEFAULTS",
    "TRANSPORT_OPTION_DEFAULTS",
    "AppSettings",
    "LockKey",
    "LockKeyFunc",
    "LockOn",
    "LockOptions",
    "OnDuplicate",
    "OnRedisError",
    "Topology",
    "check_argument",
    "check_task_keywords",
    "mask_url",
    "read_settings",
    "resolve",
    "resolve_redis_url",
    "source_queue",
    "source_task",
    "url_topology",
    "validate",
    "validate_transport_options",
]

OnDuplicate = Literal["skip", "retry", "raise", "wait"]
LockOn = Literal["execute", "enqueue"]
OnRedisError = Literal["retry", "run", "fail"]
LockKey = Optional[Union[tuple[str, ...], LockKeyFunc]]
#: What a lock URL names: one Redis, a master found through Sentinels, or a Redis Cluster.
Topology = Literal["single", "sentinel", "cluster"]


def _ms(seconds: float, minimum: int = 1) -> int:
    # Redis TTLs are whole milliseconds and PX 0 is an error, hence the floor.
    return max(minimum, round(seconds * 1000))


@dataclass(frozen=True)
class LockOptions:
    """The options of one task consumed from one queue; defaults are SPEC section 2.

    Constructing one validates it (source ``LockOptions``), so an instance is always usable.
    """

    lock_timeout: float = 30.0
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

    def __post_init__(self) -> None:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in validate(values, "LockOptions").items():
            # Frozen: normalised values (list -> tuple, int -> float) go in behind the guard.
            object.__setattr__(self, name, value)

    @property
    def timeout_ms(self) -> int:
        """``lock_timeout`` in whole milliseconds (at least 1)."""
        return _ms(self.lock_timeout)

    @property
    def renew_interval_s(self) -> float:
        """The effective renew interval: ``renew_interval``, or ``lock_timeout / 3``."""
        if self.renew_interval is None:
            return self.lock_timeout / 3
        return self.renew_interval

    @property
    def renew_interval_ms(self) -> int:
        """The effective renew interval in whole milliseconds (at least 1)."""
        return _ms(self.renew_interval_s)

    @property
    def queued_timeout_ms(self) -> int:
        """``queued_timeout`` in whole milliseconds (at least 1)."""
        return _ms(self.queued_timeout)

    @property
    def acquire_timeout_ms(self) -> int:
        """``acquire_timeout`` in whole milliseconds (0 means do not wait)."""
        return _ms(self.acquire_timeout, minimum=0)


OPTION_NAMES: frozenset[str] = frozenset(f.name for f in fields(LockOptions))


# --- validation of one layer ----------------------------------------------------------------


class _Bad(Exception):
    """Internal: a value is wrong; carries the problem text OptionError puts after the name."""


_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60


def _show(value: Any) -> str:
    """A short repr: a value from a config file may be huge or have a broken __repr__."""
    try:
        return _repr.repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"


def _got(value: Any, *, wrong_type: bool) -> str:
    if not wrong_type:
        return f"got {_show(value)}"
    if isinstance(value, bool):
        return f"got {value!r} (a bool, not a number)"
    return f"got {_show(value)} (a {type(value).__name__})"


def _seconds(allowed: str, *, zero_ok: bool) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        what = f"must be a number of seconds {allowed}"
        # bool is an int subclass, but lock_timeout=True is a mistake, never a duration.
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise _Bad(f"{what}, {_got(value, wrong_type=True)}")
        try:
            seconds = float(value)
        except (OverflowError, ValueError, TypeError):
            raise _Bad(f"{what}, {_got(value, wrong_type=False)}") from None
        if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero_ok):
            raise _Bad(f"{what}, {_got(value, wrong_type=False)}")
        return seconds

    return check


def _check_renew_interval(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return _positive_seconds(value)
    except _Bad as bad:
        raise _Bad(str(bad).replace("must be", "must be None or", 1)) from None


def _choice(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        allowed = ", ".join(repr(c) for c in choices)
        if not isinstance(value, str):
            raise _Bad(f"must be one of {allowed}, {_got(value, wrong_type=True)}")
        if value not in choices:
            close = difflib.get_close_matches(value.lower(), choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise _Bad(f"must be one of {allowed}, {_got(value, wrong_type=False)}{hint}")
        return value

    return check


def _check_bool(value: Any) -> bool:
    # 0/1 or "yes" would be guesses; a config that means a flag can say True or False.
    if not isinstance(value, bool):
        raise _Bad(f"must be True or False, {_got(value, wrong_type=True)}")
    return value


def _check_max_concurrency(value: Any) -> int:
    what = "must be an int >= 1"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _Bad(f"{what}, {_got(value, wrong_type=True)}")
    if value < 1:
        raise _Bad(f"{what}, {_got(value, wrong_type=False)}")
    return int(value)


def _check_lock_key(value: Any) -> LockKey:
    what = "must be None, a list of argument names or a callable (task, args, kwargs) -> str"
    if value is None:
        return None
    if isinstance(value, str):
        # A str is a sequence of one-letter names; almost surely ["name"] was meant.
        got = _got(value, wrong_type=True)
        raise _Bad(f"{what}, {got}; write [{value!r}] to lock on that argument")
    if isinstance(value, (list, tuple)):
        # Empty is allowed: no argument in the key, so one execution of the task at a time
        # whatever its arguments (celery-once's ``keys: []``).
        seen: set[str] = set()
        for item in value:
            if not isinstance(item, str) or not item:
                raise _Bad(f"{what}, got {_show(value)}: {_show(item)} is not an argument name")
            if item in seen:
                raise _Bad(f"{what}, got {_show(value)}: {item!r} is listed twice")
            seen.add(item)
        return tuple(value)
    if callable(value):
        func: LockKeyFunc = value
        return func
    raise _Bad(f"{what}, {_got(value, wrong_type=True)}")


_positive_seconds = _seconds("> 0", zero_ok=False)
_non_negative_seconds = _seconds(">= 0", zero_ok=True)

_CHECKS: dict[str, Callable[[Any], Any]] = {
    "lock_timeout": _positive_seconds,
    "renew_interval": _check_renew_interval,
    "lock_key": _check_lock_key,
    "on_duplicate": _choice(get_args(OnDuplicate)),
    "acquire_timeout": _non_negative_seconds,
    "retry_countdown": _non_negative_seconds,
    "release_on_retry": _check_bool,
    "lock_on": _choice(get_args(LockOn)),
    "queued_timeout": _positive_seconds,
    "on_redis_error": _choice(get_args(OnRedisError)),
    "max_concurrency": _check_max_concurrency,
}
assert set(_CHECKS) == OPTION_NAMES, "every option of LockOptions needs a check"


def _unknown(name: Any) -> str:
    known = ", ".join(sorted(OPTION_NAMES))
    close = difflib.get_close_matches(name, OPTION_NAMES, n=1) if isinstance(name, str) else []
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"is unknown{hint}; known options: {known}"


# --- keywords given to a task that are not options ---------------------------------------------

#: How close (difflib ratio) a task keyword must be to an option name to be taken for a misspelt
#: option: typos and plurals score above it (lock_timout 0.96, on_duplicates 0.96, concurrency
#: 0.85); Celery's own keywords (retry_backoff 0.57, routing_key 0.53) and names that merely
#: share a word (timeout 0.74, lock_name 0.75) below it.
CLOSE_TO_OPTION = 0.8


def _arg(value: Any) -> str:
    """A value as the keyword argument a user would write: lists as lists."""
    return _show(list(value) if isinstance(value, tuple) else value)


def _from_once(once: Any) -> str:
    """celery-once's ``once={'keys': [...], 'timeout': N, 'graceful': bool, ...}``: it locks at
    send and, unless graceful, raises AlreadyQueued there."""
    if not isinstance(once, Mapping):
        return 'lock_key=[<argument names>], lock_on="enqueue", on_duplicate="raise"'
    words = []
    keys = once.get("keys")
    if keys is not None:  # celery-once locks on every argument without 'keys'
        words.append(f"lock_key={_arg(keys)}")
    words.append('lock_on="enqueue"')
    words.append('on_duplicate="skip"' if once.get("graceful") else 'on_duplicate="raise"')
    if once.get("timeout") is not None:
        words.append(f"queued_timeout={_arg(once['timeout'])}")
    text = ", ".join(words)
    if once.get("unlock_before_run"):
        text += " (unlock_before_run has no equivalent: the lock is held until the run ends)"
    elif once.get("timeout") is not None:
        text += " (queued_timeout bounds the wait in the queue; the lock of a running task is renewed)"
    return text


def _from_unique_on(unique_on: Any) -> str:
    """celery-singleton's ``unique_on``: a list (or one name) of arguments; empty or None is
    every argument there. celery-singleton locks at send."""
    names = [unique_on] if isinstance(unique_on, str) else unique_on
    if not names:
        return 'lock_on="enqueue" and leave lock_key unset (an empty unique_on locks on every argument)'
    return f'lock_key={_arg(names)}, lock_on="enqueue"'


def _from_lock_expiry(expiry: Any) -> str:
    return (
        f"lock_timeout={_arg(expiry)} (renewed while the task runs, so it only bounds how long a "
        'crashed worker\'s lock outlives it; with lock_on="enqueue", queued_timeout bounds the wait '
        "in the queue)"
    )


def _from_raise_on_duplicate(raise_on_duplicate: Any) -> str:
    if raise_on_duplicate:
        return 'on_duplicate="raise", lock_on="enqueue" (DuplicateTaskError raised at send)'
    return (
        'lock_on="enqueue" and leave on_duplicate unset '
        "(a duplicate send then returns the holder's AsyncResult)"
    )


#: Task options of celery-once and celery-singleton, which SingletonTask does not read, and what
#: to write instead (given the value the task gave).
PEER_OPTIONS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "once": ("celery-once", _from_once),
    "unique_on": ("celery-singleton", _from_unique_on),
    "lock_expiry": ("celery-singleton", _from_lock_expiry),
    "raise_on_duplicate": ("celery-singleton", _from_raise_on_duplicate),
}


def check_task_keywords(keywords: Mapping[str, Any], source: str) -> None:
    """Refuse the keywords of a task (``@app.task(base=SingletonTask, ...)`` or class attributes)
    that look meant for this package but are not its options: an option of celery-once or
    celery-singleton, or a name within ``CLOSE_TO_OPTION`` of an option's. Any other name is
    the user's own attribute and is left alone.

    ``keywords`` are the names the task set that Celery does not know (the glue filters out
    Celery's); options themselves are skipped here, ``validate`` checks their values.
    Raises ``OptionError`` naming ``source``, the keyword and what to write instead.
    """
    for name, value in keywords.items():
        if name in OPTION_NAMES:
            continue
        peer = PEER_OPTIONS.get(name)
        if peer is not None:
            package, replacement = peer
            raise OptionError(
                name,
                source,
                f"is a {package} option, which SingletonTask ignores; write {replacement(value)}",
            )
        if difflib.get_close_matches(name, OPTION_NAMES, n=1, cutoff=CLOSE_TO_OPTION):
            raise OptionError(name, source, _unknown(name))


def _num(x: float) -> str:
    # 20 reads better than 20.0 for the value a user most likely wrote as 20.
    return str(int(x)) if x.is_integer() else repr(x)


def _renew_too_long(renew: float, timeout: float, renew_from: str, timeout_from: str) -> str:
    return (
        f"must be < lock_timeout ({_num(timeout)}{timeout_from}), got {_num(renew)}{renew_from}; "
        f"lower it, or leave renew_interval unset to renew every lock_timeout / 3"
    )


def validate(options: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Check one layer of options and return it normalised (seconds as float, lists as tuples).

    ``source`` names the layer in errors: ``source_task(...)``, ``source_queue(...)`` or
    ``"redislock_options"``. Idempotent: a validated layer validates to itself.

    Raises ``OptionError`` for an unknown name, a wrong type, an out-of-range value, or a
    ``renew_interval`` not below the ``lock_timeout`` set in the same layer.
    """
    result: dict[str, Any] = {}
    for name, value in options.items():
        check = _CHECKS.get(name) if isinstance(name, str) else None
        if check is None:
            raise OptionError(str(name), source, _unknown(name))
        try:
            result[name] = check(value)
        except _Bad as bad:
            raise OptionError(name, source, str(bad)) from None
    renew, timeout = result.get("renew_interval"), result.get("lock_timeout")
    if renew is not None and timeout is not None and renew >= timeout:
        problem = _renew_too_long(renew, timeout, "", " set in the same place")
        raise OptionError("renew_interval", source, problem)
    clash = _clash(result)
    if clash is not None:
        raise OptionError(clash[0], source, clash[1] + " set in the same place")
    return result


def _clash(options: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(option, problem)`` for options that cannot go together, else None.

    A semaphore (``max_concurrency`` > 1) is taken by each execution for itself: it is not
    taken at enqueue, nor handed over to a retry.
    """
    limit = options.get("max_concurrency") or 1
    if limit <= 1:
        return None
    if options.get("lock_on") == "enqueue":
        return "lock_on", f"'enqueue' cannot be used with max_concurrency={limit} (use 'execute')"
    if options.get("release_on_retry") is False:
        return "release_on_retry", f"False cannot be used with max_concurrency={limit} (use True)"
    return None


#: Checks of the arguments of ``RedisLock`` and ``RedisSemaphore``, by kind.
_ARGUMENT_CHECKS: dict[str, Callable[[Any], Any]] = {
    "seconds": _positive_seconds,
    "seconds or 0": _non_negative_seconds,
    "count": _check_max_concurrency,
    "flag": _check_bool,
}


def check_argument(kind: str, name: str, value: Any, source: str) -> Any:
    """Check a constructor argument of kind ``"seconds"`` (> 0), ``"seconds or 0"``,
    ``"count"`` (an int >= 1) or ``"flag"``; returns it normalised, or raises OptionError
    naming ``name`` and ``source`` (``RedisLock('jobs')``)."""
    try:
        return _ARGUMENT_CHECKS[kind](value)
    except _Bad as bad:
        raise OptionError(name, source, str(bad)) from None


# --- resolution across layers ---------------------------------------------------------------


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
    clash = _clash(merged)
    if clash is not None:
        option, problem = clash
        involved = {origin[option], origin["max_concurrency"]}
        blamed = next(source for _, source in layers if source in involved)
        raise OptionError(
            option, blamed, f"{problem} (from {origin['max_concurrency']}; {option} from {origin[option]})"
        )
    return LockOptions(**merged)


# --- app settings ---------------------------------------------------------------------------

#: The celeryconfig keys of this package and their defaults; the glue passes this to
#: ``app.conf.add_defaults`` (the one place these defaults live).
SETTING_DEFAULTS: dict[str, Any] = {
    "redislock_url": None,
    "redislock_key_prefix": "redislock",
    "redislock_options": {},
    "redislock_queues": {},
    # None: inherit the Sentinel options of the setting the URL came from (broker_url's
    # broker_transport_options, result_backend's result_backend_transport_options).
    "redislock_transport_options": None,
}

#: The transport options the lock client understands, as in ``broker_transport_options``
#: for a ``sentinel://`` broker (kombu's names), and their defaults.
TRANSPORT_OPTION_DEFAULTS: dict[str, Any] = {
    #: the name of the master in the Sentinels' ``sentinel monitor`` line; required for Sentinel
    "master_name": None,
    #: connection arguments for the Sentinels themselves (a ``password``, say)
    "sentinel_kwargs": None,
    #: Sentinels that must agree a master is the master before the client uses it
    "min_other_sentinels": 0,
}

_APP = "app configuration"


@dataclass(frozen=True)
class AppSettings:
    """The validated ``redislock_*`` settings of one app; read once and cached by the glue."""

    url: str
    key_prefix: str
    options: Mapping[str, Any]
    queues: Mapping[str, Mapping[str, Any]]
    #: validated transport options (``TRANSPORT_OPTION_DEFAULTS`` keys) for the lock client
    transport_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def topology(self) -> Topology:
        return url_topology(self.url)

    def __repr__(self) -> str:
        # Settings end up in logs and tracebacks; the URL (and sentinel_kwargs) may carry a password.
        return (
            f"AppSettings(url={mask_url(self.url)!r}, key_prefix={self.key_prefix!r}, "
            f"options={dict(self.options)!r}, "
            f"queues={ {name: dict(layer) for name, layer in self.queues.items()}!r}, "
            f"transport_options={sorted(self.transport_options)!r})"
        )

    def options_for(self, task_name: str, task_options: Mapping[str, Any], queue: str | None) -> LockOptions:
        """Resolve the options of ``task_name`` consumed from ``queue`` (None: no queue layer)."""
        queue_options = self.queues.get(queue, {}) if queue is not None else {}
        return resolve(
            task_options,
            queue_options,
            self.options,
            task_source=source_task(task_name),
            queue_source=source_queue(queue if queue is not None else ""),
        )


def _setting(conf: Mapping[str, Any], name: str) -> Any:
    # Works before add_defaults too: app.conf[name] raises KeyError until then.
    return conf.get(name, SETTING_DEFAULTS.get(name))


def _conf_url(conf: Mapping[str, Any], name: str) -> Any:
    # Celery's Settings resolves CELERY_BROKER_URL / CELERY_RESULT_BACKEND from the
    # environment and old setting names in properties; a plain mapping has neither.
    value = getattr(conf, name, None)
    return value if value is not None else conf.get(name)


def read_settings(conf: Mapping[str, Any]) -> AppSettings:
    """Read and validate the ``redislock_*`` settings (``conf`` is ``app.conf`` or a dict).

    Raises ``OptionError`` (the setting's name as option) or ``RedisURLError``.
    """
    prefix = _setting(conf, "redislock_key_prefix")
    if not isinstance(prefix, str) or not prefix or any(c.isspace() for c in prefix):
        got = _got(prefix, wrong_type=not isinstance(prefix, str))
        raise OptionError("redislock_key_prefix", _APP, f"must be a non-empty str without whitespace, {got}")

    options = _setting(conf, "redislock_options")
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise OptionError(
            "redislock_options",
            _APP,
            f"must be a dict of option name -> value, {_got(options, wrong_type=True)}",
        )
    app_layer = validate(options, "redislock_options")

    queues = _setting(conf, "redislock_queues")
    if queues is None:
        queues = {}
    if not isinstance(queues, Mapping):
        raise OptionError(
            "redislock_queues",
            _APP,
            f"must be a dict of queue name -> dict of options, {_got(queues, wrong_type=True)}",
        )
    queue_layers: dict[str, Mapping[str, Any]] = {}
    for name, layer in queues.items():
        if not isinstance(name, str) or not name:
            raise OptionError(
                "redislock_queues",
                _APP,
                f"must be keyed by queue name (a non-empty str), got key {_show(name)}",
            )
        if not isinstance(layer, Mapping):
            raise OptionError(
                "redislock_queues",
                _APP,
                f"must map each queue name to a dict of options, got {_show(layer)} "
                f"(a {type(layer).__name__}) for queue {name!r}",
            )
        queue_layers[name] = MappingProxyType(validate(layer, source_queue(name)))

    url, url_setting = _resolve_redis_url(
        _setting(conf, "redislock_url"),
        _conf_url(conf, "broker_url"),
        _conf_url(conf, "result_backend"),
    )
    transport = _transport_options(conf, url, url_setting)
    # Read-only views: the result is cached per app and shared by every task.
    return AppSettings(
        url=url,
        key_prefix=prefix,
        options=MappingProxyType(app_layer),
        queues=MappingProxyType(queue_layers),
        transport_options=MappingProxyType(transport),
    )


# --- transport options (Sentinel) -----------------------------------------------------------

#: Where the lock client inherits transport options from, by the setting its URL came from.
_INHERITED_TRANSPORT = {
    "broker_url": "broker_transport_options",
    "result_backend": "result_backend_transport_options",
}


def validate_transport_options(value: Any, source: str, *, inherited: bool = False) -> dict[str, Any]:
    """Check transport options for the lock client; returns the ones given (defaults are
    ``TRANSPORT_OPTION_DEFAULTS``).

    ``source`` names the setting in errors. ``inherited`` options (the broker's) also carry
    settings of the broker's own (``visibility_timeout``...): those are ignored, while an
    unknown name in ``redislock_transport_options`` is an error.
    """
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise OptionError(
            source, _APP, f"must be a dict of option name -> value, {_got(value, wrong_type=True)}"
        )
    result: dict[str, Any] = {}
    for name, item in value.items():
        if name not in TRANSPORT_OPTION_DEFAULTS:
            if inherited:
                continue
            known = ", ".join(sorted(TRANSPORT_OPTION_DEFAULTS))
            close = difflib.get_close_matches(str(name), TRANSPORT_OPTION_DEFAULTS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise OptionError(str(name), source, f"is unknown{hint}; known transport options: {known}")
        try:
            result[name] = _TRANSPORT_CHECKS[name](item)
        except _Bad as bad:
            raise OptionError(name, source, str(bad)) from None
    return result


def _check_master_name(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value and not any(c.isspace() for c in value)):
        return value
    raise _Bad(
        f"must be the master's name in the Sentinels' configuration (a str), {_got(value, wrong_type=not isinstance(value, str))}"
    )


def _check_sentinel_kwargs(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _Bad(
            f"must be None or a dict of connection arguments for the Sentinels, {_got(value, wrong_type=True)}"
        )
    return dict(value)


def _check_min_other_sentinels(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise _Bad(f"must be an int >= 0, {_got(value, wrong_type=not isinstance(value, numbers.Integral))}")
    return int(value)


_TRANSPORT_CHECKS: dict[str, Callable[[Any], Any]] = {
    "master_name": _check_master_name,
    "sentinel_kwargs": _check_sentinel_kwargs,
    "min_other_sentinels": _check_min_other_sentinels,
}
assert set(_TRANSPORT_CHECKS) == set(TRANSPORT_OPTION_DEFAULTS), "every transport option needs a check"


def _transport_options(conf: Mapping[str, Any], url: str, url_setting: str) -> dict[str, Any]:
    own = _setting(conf, "redislock_transport_options")
    if own is not None:
        source = "redislock_transport_options"
        options = validate_transport_options(own, source)
    else:
        source = _INHERITED_TRANSPORT.get(url_setting, "redislock_transport_options")
        inherited = conf.get(source) if source != "redislock_transport_options" else None
        options = validate_transport_options(inherited, source, inherited=True)
    if url_topology(url) == "sentinel" and options.get("master_name") is None:
        raise RedisURLError(
            f"{url_setting} is a Sentinel URL ({mask_url(url)!r}) but {source} has no 'master_name': "
            f"set redislock_transport_options = {{'master_name': 'mymaster'}}, the name the "
            f"Sentinels monitor the master under"
        )
    return options


# --- the Redis URL --------------------------------------------------------------------------

#: URL schemes that name a Redis server (or its Sentinels) in Celery's settings.
REDIS_URL_SCHEMES: frozenset[str] = frozenset({"redis", "rediss", "sentinel", "unix", "redis+socket"})

_PASSWORD_PARAM = re.compile(r"(?i)((?:^|[?&;])[^=&;?]*password=)[^&;]*")


def _mask_one(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _PASSWORD_PARAM.sub(r"\1****", url)
    # The last '@' ends the userinfo even when the password has an unquoted '@' or '/';
    # masking too much of a malformed URL is better than showing any of a password.
    userinfo, at, hostpart = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        # No ':' may still be a password: kombu and users write redis://secret@host.
        rest = f"{user}:****@{hostpart}" if colon else f"****@{hostpart}"
    return f"{scheme}://" + _PASSWORD_PARAM.sub(r"\1****", rest)


def mask_url(url: Any) -> str:
    """Show a URL (or a list or ';'-list of them) with every password replaced by ``****``."""
    if isinstance(url, (list, tuple)):
        return "[" + ", ".join(repr(mask_url(u)) for u in url) + "]"
    if not isinstance(url, str):
        return _show(url)
    return ";".join(_mask_one(part) for part in url.split(";"))


def _shown(value: Any) -> str:
    return repr(mask_url(value)) if isinstance(value, str) else mask_url(value)


def _scheme(url: str) -> str:
    scheme, sep, _ = url.strip().partition("://")
    return scheme.lower() if sep else ""


def _urls(value: Any) -> list[str]:
    """The failover list of a broker_url / result_backend setting (a list or 'a;b')."""
    if isinstance(value, str):
        return [u.strip() for u in value.split(";") if u.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(u, str) for u in value):
        return [u.strip() for u in value if u.strip()]
    return []


def _usable(value: Any) -> str | None:
    """The Redis URL a setting names, or None when it names none."""
    urls = _urls(value)
    if not urls or _scheme(urls[0]) not in REDIS_URL_SCHEMES:
        return None
    first = urls[0]
    if _scheme(first) == "sentinel":
        # Sentinel needs every sentinel host, not just the first failover entry.
        return ";".join(u for u in urls if _scheme(u) == "sentinel")
    if _scheme(first) == "redis+socket":
        return _socket_to_unix(first)
    if _cluster_flag(first):
        # Every node listed is a startup node of the one cluster.
        return ";".join(u for u in urls if _scheme(u) in _CLUSTER_SCHEMES)
    return first


#: The URL query parameter that marks a Redis Cluster: ``redis://node:7000/0?cluster=true``.
CLUSTER_PARAM = "cluster"
_CLUSTER_SCHEMES = frozenset({"redis", "rediss"})
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _cluster_flag(url: str) -> bool:
    """Whether ``url`` asks for a Redis Cluster (``?cluster=true``); RedisURLError if unclear."""
    values = [v for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True) if k == CLUSTER_PARAM]
    if not values:
        return False
    value = values[-1].lower()
    if value not in _TRUE | _FALSE:
        raise RedisURLError(f"{CLUSTER_PARAM}={values[-1]!r} in {mask_url(url)!r} must be true or false")
    return value in _TRUE


def url_topology(url: str) -> Topology:
    """What a resolved lock URL names: ``"sentinel"``, ``"cluster"`` or ``"single"``."""
    first = url.split(";", 1)[0]
    if _scheme(first) == "sentinel":
        return "sentinel"
    if _scheme(first) in _CLUSTER_SCHEMES and _cluster_flag(first):
        return "cluster"
    return "single"


def _check_cluster(url: str, setting: str) -> None:
    for part in url.split(";"):
        path = urlsplit(part).path.strip("/")
        query_db = [v for k, v in parse_qsl(urlsplit(part).query) if k == "db"]
        if path not in ("", "0") or any(v != "0" for v in query_db):
            raise RedisURLError(
                f"{setting} names a Redis Cluster, which has only database 0, got {mask_url(part)!r}; "
                f"drop the database number, or use a redislock_key_prefix to keep apps apart"
            )


def _socket_to_unix(url: str) -> str:
    # Celery/kombu spell a socket redis+socket:///path?virtual_host=N; redis-py's
    # Redis.from_url only knows unix:///path?db=N.
    parts = urlsplit(url)
    query = urlencode([("db" if k == "virtual_host" else k, v) for k, v in parse_qsl(parts.query)])
    # Spelled out: urlunsplit drops the '//' of a scheme it does not know to have a netloc.
    return f"unix://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")


def resolve_redis_url(redislock_url: str | None, broker_url: Any, result_backend: Any) -> str:
    """The Redis URL the locks use (SPEC section 1).

    ``redislock_url`` when set (it must be a Redis URL), else ``broker_url`` when Redis,
    else ``result_backend`` when Redis. A failover ``broker_url`` (a list or ``'a;b'``) gives
    its first URL, or all its sentinel URLs joined by ';' for Sentinel (likewise every node of
    a ``?cluster=true`` URL). ``redis+socket://`` is returned as the ``unix://`` URL redis-py
    understands. An empty ``redislock_url`` is treated as unset, as Celery treats an empty
    ``broker_url``.

    Raises ``RedisURLError``; its message never shows a password.
    """
    return _resolve_redis_url(redislock_url, broker_url, result_backend)[0]


def _resolve_redis_url(redislock_url: str | None, broker_url: Any, result_backend: Any) -> tuple[str, str]:
    """The lock URL and the name of the setting it came from."""
    if redislock_url is not None and redislock_url != "":
        found = _usable(redislock_url)
        if found is None:
            schemes = ", ".join(f"{s}://" for s in sorted(REDIS_URL_SCHEMES))
            raise RedisURLError(f"redislock_url must be a Redis URL ({schemes}), got {_shown(redislock_url)}")
        return _checked(found, "redislock_url")
    for value, name in ((broker_url, "broker_url"), (result_backend, "result_backend")):
        found = _usable(value)
        if found is not None:
            return _checked(found, name)
    raise RedisURLError(
        "no Redis URL for the locks: none of redislock_url, broker_url, result_backend is a "
        f"Redis URL (redislock_url={_shown(redislock_url)}, "
        f"broker_url={_shown(broker_url)}, result_backend={_shown(result_backend)}); "
        'set redislock_url = "redis://host:6379/0" in the Celery configuration'
    )


def _checked(url: str, setting: str) -> tuple[str, str]:
    if url_topology(url) == "cluster":
        _check_cluster(url, setting)
    return url, setting
