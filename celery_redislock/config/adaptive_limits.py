"""An adaptive named limit's declaration (``{"floor": 1, "ceiling": 50, "start": 5, ...}`` in
``redislock_limits`` or ``declare_limit``), read and checked: an ``OptionError`` names the
setting, the limit and the key that is wrong, and nothing is declared."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from ..engine.adaptive_in_flight import InFlight
from ..engine.adaptive_rates import RULES, AdaptiveRate, per_second
from ..engine.checks import BadValue, check_count, got, positive_seconds
from ..errors import OptionError, short_repr

__all__ = ["ADAPTIVE_KEYS", "read_adaptive"]

#: The keys of an adaptive declaration, and what each is.
ADAPTIVE_KEYS: Mapping[str, str] = {
    "floor": "the slowest rate (calls a second, or 'N/s|m|h')",
    "ceiling": "the fastest rate (calls a second, or 'N/s|m|h')",
    "start": "the rate before any call has reported (default: the floor)",
    "burst": "calls at most at once (an int >= 1, default 1)",
    "overload": "exceptions that report an overload: classes, or names ('TimeoutError', 'httpx.ReadTimeout')",
    "latency_target": "seconds above which a success reports a slow call (default: none)",
    "in_flight": "calls at once, adaptive too: {'floor': int, 'ceiling': int, 'start': int (default: the ceiling)}",
    "rule": "how the rate moves: 'default', or 'aimd' / 'gradient' to compare (docs: design)",
}


def _rule(value: Any) -> str:
    if value not in RULES:
        raise BadValue(f"must be one of {', '.join(map(repr, RULES))}, got {short_repr(value)}")
    return str(value)


def _overload(value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, (str, type)) else value
    if not isinstance(items, (list, tuple)):
        raise BadValue(f"must be exception classes or their names, {got(value, wrong_type=True)}")
    names = []
    for item in items:
        if isinstance(item, type) and issubclass(item, BaseException):
            names.append(f"{item.__module__}.{item.__qualname__}")
        elif isinstance(item, str) and item:
            names.append(item)
        else:
            raise BadValue(f"must be exception classes or their names, got {short_repr(item)} in it")
    return tuple(names)


#: The keys of an adaptive limit's ``in_flight``.
IN_FLIGHT_KEYS = ("floor", "ceiling", "start")


def _in_flight(value: Any) -> InFlight | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadValue(f"must be a dict of {', '.join(IN_FLIGHT_KEYS)}, {got(value, wrong_type=True)}")
    unknown = [key for key in value if key not in IN_FLIGHT_KEYS]
    if unknown:
        raise BadValue(f"has an unknown key {unknown[0]!r}; its keys: {', '.join(IN_FLIGHT_KEYS)}")
    for key in ("floor", "ceiling"):
        if key not in value:
            raise BadValue(f"has no {key!r} (calls at once, an int >= 1)")
    bounds = {}
    for key in IN_FLIGHT_KEYS:
        try:
            bounds[key] = check_count(value.get(key, value["ceiling"]))
        except BadValue as bad:
            raise BadValue(f"{key!r} {bad}") from None
    floor, ceiling, start = bounds["floor"], bounds["ceiling"], bounds["start"]
    if floor > ceiling:
        raise BadValue(f"has a floor ({floor}) above its ceiling ({ceiling})")
    if not floor <= start <= ceiling:
        raise BadValue(f"has a start ({start}) outside its floor and ceiling ({floor} to {ceiling})")
    return InFlight(floor, ceiling, start)


def read_adaptive(name: str, value: Mapping[Any, Any], option: str, source: str) -> AdaptiveRate:
    """The adaptive declaration ``value`` of limit ``name``; an ``OptionError`` (``option``,
    from ``source``) naming the limit and what is wrong in it."""

    def wrong(problem: str) -> OptionError:
        return OptionError(option, source, f"gives adaptive limit {name!r} {problem}")

    unknown = [key for key in value if key not in ADAPTIVE_KEYS]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), list(ADAPTIVE_KEYS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise wrong(f"an unknown key {unknown[0]!r}{hint}; its keys: {', '.join(ADAPTIVE_KEYS)}")
    for key in ("floor", "ceiling"):
        if key not in value:
            raise wrong(f"no {key!r}: {ADAPTIVE_KEYS[key]}")

    def checked(key: str, check: Any, default: Any = None) -> Any:
        try:
            return check(value.get(key, default))
        except BadValue as bad:
            text = str(bad)
            raise wrong(f"a wrong {key!r}: {text if text.startswith(key) else f'{key} {text}'}") from None

    floor = checked("floor", lambda given: per_second(given, "floor"))
    ceiling = checked("ceiling", lambda given: per_second(given, "ceiling"))
    start = checked("start", lambda given: per_second(given, "start"), value["floor"])
    burst = checked("burst", check_count, 1)
    overload = checked("overload", _overload, ())
    latency = checked("latency_target", lambda given: None if given is None else positive_seconds(given))
    rule = checked("rule", _rule, "default")
    in_flight = checked("in_flight", _in_flight)
    if floor > ceiling:
        raise wrong(f"a floor ({floor:g}/s) above its ceiling ({ceiling:g}/s)")
    if not floor <= start <= ceiling:
        raise wrong(f"a start ({start:g}/s) outside its floor and ceiling ({floor:g}/s to {ceiling:g}/s)")
    return AdaptiveRate(floor, ceiling, start, burst, overload, latency, rule, in_flight)
