"""Named rate limits: declared once (the ``redislock_limits`` setting, or ``declare_limit`` in
code), referred to by name from any number of tasks (the ``rate_limits`` option, each with its
own partition if it likes), and the ``rate_cost`` a call is charged. Read and checked here, with
errors naming what is wrong and where; the rate-limit gate decides by them."""

from __future__ import annotations

import difflib
import re
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Union

from ..engine.adaptive_rates import AdaptiveRate
from ..engine.checks import BadValue, check_count, got
from ..engine.rates import Rate, parse_rates
from ..errors import OptionError, short_repr
from .adaptive_limits import read_adaptive
from .options import APP_CONFIGURATION, LockKey, check_lock_key

__all__ = [
    "CODE",
    "LIMITS_SETTING",
    "CostSpec",
    "NamedLimit",
    "check_rate_cost",
    "check_rate_limits",
    "declare_limit",
    "declared_limits",
    "limit_catalog",
    "read_limits",
    "unknown_limit",
]

#: The setting that declares named limits: name -> rate(s).
LIMITS_SETTING = "redislock_limits"
#: How a limit declared by ``declare_limit`` names its source.
CODE = "declare_limit"

# A name is one part of a Redis key and a CLI argument: no ':', no glob or hash-tag character.
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")

#: ``rate_cost``: units of every limit of the call, or a callable ``(task, args, kwargs) -> int``;
#: or a mapping of limit names to either (a limit not named costs 1).
CostSpec = Union[int, Callable[..., Any], tuple[tuple[str, Any], ...]]


@dataclass(frozen=True)
class NamedLimit:
    """A limit declared by name: its rates as declared, and where (``redislock_limits`` or
    ``declare_limit``); ``adaptive``: its bounds and rule when the package chooses its rate
    (``rates`` is then its start rate, decided by until a call reports)."""

    name: str
    rates: tuple[Rate, ...]
    source: str
    adaptive: AdaptiveRate | None = None


def _limit(name: str, value: Any, option: str, source: str, where: str) -> NamedLimit:
    """The limit ``name`` declared ``value``: rates, or an adaptive declaration (a dict)."""
    if isinstance(value, Mapping):
        adaptive = read_adaptive(name, value, option, source)
        return NamedLimit(name, (adaptive.start_rate(),), where, adaptive)
    return NamedLimit(name, _rates(name, value, option, source), where)


def _check_name(name: Any, option: str, source: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        shown = got(name, wrong_type=not isinstance(name, str))
        raise OptionError(option, source, f"must name limits with letters, digits, '_', '.' or '-', {shown}")
    return name


def _rates(name: str, value: Any, option: str, source: str) -> tuple[Rate, ...]:
    try:
        return parse_rates(value)
    except BadValue as bad:
        raise OptionError(option, source, f"gives limit {name!r} a wrong rate: it {bad}") from None


def read_limits(value: Any) -> dict[str, NamedLimit]:
    """The ``redislock_limits`` setting (None, or a dict of limit name -> ``"10/s"``,
    ``"10/s burst 50"``, ``["5/s", "20/m"]``, an adaptive ``{"floor": 1, "ceiling": 50}``...),
    checked: an ``OptionError`` names the setting
    and the limit that is wrong."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise OptionError(
            LIMITS_SETTING,
            APP_CONFIGURATION,
            f"must be a dict of limit name -> rate ('10/s', ['5/s', '20/m']...), {got(value, wrong_type=True)}",
        )
    limits = {}
    for name, rates in value.items():
        _check_name(name, LIMITS_SETTING, APP_CONFIGURATION)
        limits[name] = _limit(name, rates, LIMITS_SETTING, APP_CONFIGURATION, LIMITS_SETTING)
    return limits


# App -> its limits declared in code, weakly: a dropped app takes its declarations with it.
_declared: weakref.WeakKeyDictionary[Any, dict[str, NamedLimit]] = weakref.WeakKeyDictionary()
_declared_lock = threading.Lock()


def declare_limit(app: Any, name: str, rate: Any) -> NamedLimit:
    """Declare the limit ``name`` of ``app`` in code (as ``redislock_limits`` does in settings):
    ``rate`` is ``"10/s"``, ``"10/s burst 50"``, ``"5/s, 20/m"``, a list of those, or an adaptive
    limit's dict (``{"floor": 1, "ceiling": 50, "start": 5}``, docs: "Adaptive limits"). Tasks name
    it in ``rate_limits``. Declaring it again with the same rates is a no-op; with others, or a
    name ``redislock_limits`` gives other rates, an ``OptionError``."""
    source = f"declare_limit({name!r})"
    _check_name(name, "name", source)
    limit = _limit(name, rate, "rate", source, CODE)
    with _declared_lock:
        own = _declared.setdefault(app, {})
        known = own.get(name)
        if known is not None and known != limit:
            raise OptionError(
                "rate", source, f"is {_text(limit)}, but {name!r} was declared {_text(known)} already"
            )
        own[name] = limit
    return limit


def declared_limits(app: Any) -> dict[str, NamedLimit]:
    """The limits ``declare_limit`` declared for ``app``."""
    with _declared_lock:
        return dict(_declared.get(app, {}))


def limit_catalog(
    setting: Mapping[str, NamedLimit], declared: Mapping[str, NamedLimit]
) -> dict[str, NamedLimit]:
    """Every named limit of an app: the setting's and the code's. A name both give with other
    rates is an ``OptionError`` naming both."""
    catalog = dict(setting)
    for name, limit in declared.items():
        known = catalog.get(name)
        if known is not None and (known.rates, known.adaptive) != (limit.rates, limit.adaptive):
            raise OptionError(
                LIMITS_SETTING,
                APP_CONFIGURATION,
                f"gives limit {name!r} {_text(known)}, but declare_limit gives it {_text(limit)}: declare it once",
            )
        catalog.setdefault(name, limit)
    return catalog


def _text(limit: NamedLimit) -> str:
    if limit.adaptive is not None:
        spec = limit.adaptive
        return f"adaptive {spec.floor:g}/s to {spec.ceiling:g}/s (start {spec.start:g}/s)"
    return repr(", ".join(map(str, limit.rates)))


def unknown_limit(name: str, known: Mapping[str, NamedLimit]) -> str:
    """The problem text of a name no limit is declared by (close names suggested)."""
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    listed = ", ".join(sorted(known)) or "none"
    return f"names limit {name!r}, which is not declared{hint}; declared in {LIMITS_SETTING} or by declare_limit: {listed}"


_LIMITS_WHAT = (
    "must be None, a list of limit names, or a dict of limit name -> its partition (None, a list "
    "of argument names, or a callable (task, args, kwargs) -> str)"
)


def check_rate_limits(value: Any) -> tuple[tuple[str, LockKey], ...] | None:
    """The ``rate_limits`` option: the limit names a task's calls are decided under, each with
    its partition (None: one partition for every task naming the limit). Returns
    ``((name, partition), ...)``, in the order given (the first is where a call's own records
    live)."""
    if value is None:
        return None
    pairs: list[tuple[Any, Any]]
    if isinstance(value, str):
        raise BadValue(f"{_LIMITS_WHAT}, {got(value, wrong_type=True)}; write [{value!r}] to name that limit")
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)):
        pairs = [(item, None) if not isinstance(item, (list, tuple)) else tuple(item) for item in value]
    else:
        raise BadValue(f"{_LIMITS_WHAT}, {got(value, wrong_type=True)}")
    if not pairs:
        raise BadValue(f"{_LIMITS_WHAT}, got an empty {type(value).__name__} (None: no named limit)")
    result: list[tuple[str, LockKey]] = []
    for pair in pairs:
        if len(pair) != 2:
            raise BadValue(f"{_LIMITS_WHAT}, got {short_repr(value)}")
        name, partition = pair
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise BadValue(f"{_LIMITS_WHAT}, got {short_repr(value)}: {short_repr(name)} is not a limit name")
        if any(name == known for known, _ in result):
            raise BadValue(f"{_LIMITS_WHAT}, got {short_repr(value)}: {name!r} is named twice")
        try:
            result.append((name, check_lock_key(partition)))
        except BadValue as bad:
            raise BadValue(f"gives limit {name!r} a partition that {bad}") from None
    return tuple(result)


_COST_WHAT = (
    "must be None, an int >= 1, a callable (task, args, kwargs) -> int, or a dict of limit name -> either"
)


def _one_cost(value: Any, shown: Any) -> Any:
    if callable(value) and not isinstance(value, type):
        return value
    try:
        return check_count(value)
    except BadValue:
        raise BadValue(f"{_COST_WHAT}, {got(shown, wrong_type=not isinstance(value, int))}") from None


def check_rate_cost(value: Any) -> CostSpec | None:
    """The ``rate_cost`` option: units of the task's limits a call costs (None: 1 each)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not value or not all(isinstance(name, str) and _NAME.fullmatch(name) for name in value):
            raise BadValue(f"{_COST_WHAT}, got {short_repr(value)}")
        return tuple((name, _one_cost(each, value)) for name, each in value.items())
    cost: CostSpec = _one_cost(value, value)
    return cost
