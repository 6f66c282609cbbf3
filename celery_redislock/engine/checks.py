"""Checks of the values a lock is given (seconds, counts, flags): the value normalised, or the
reason it is refused. ``RedisLock``'s arguments and the task options share them."""

from __future__ import annotations

import difflib
import math
import numbers
from typing import Any, Callable, TypeVar

from ..errors import OptionError, short_repr

__all__ = [
    "BadValue",
    "check_argument",
    "check_count",
    "check_flag",
    "got",
    "non_negative_seconds",
    "number_text",
    "one_of",
    "optional_seconds",
    "or_none",
    "positive_seconds",
]

T = TypeVar("T")


class BadValue(Exception):
    """A value is wrong; carries the problem text ``OptionError`` puts after the option's name."""


def got(value: Any, *, wrong_type: bool) -> str:
    """How a message shows the value it refused (and its type, when the type is the mistake)."""
    if not wrong_type:
        return f"got {short_repr(value)}"
    if isinstance(value, bool):
        return f"got {value!r} (a bool, not a number)"
    return f"got {short_repr(value)} (a {type(value).__name__})"


def number_text(x: float) -> str:
    """A number of seconds in a message: 20 reads better than 20.0 for what a user wrote as 20."""
    return str(int(x)) if x.is_integer() else repr(x)


def _seconds(allowed: str, *, zero_ok: bool) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        what = f"must be a number of seconds {allowed}"
        # bool is an int subclass, but timeout=True is a mistake, never a duration.
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise BadValue(f"{what}, {got(value, wrong_type=True)}")
        try:
            seconds = float(value)
        except (OverflowError, ValueError, TypeError):
            raise BadValue(f"{what}, {got(value, wrong_type=False)}") from None
        if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero_ok):
            raise BadValue(f"{what}, {got(value, wrong_type=False)}")
        return seconds

    return check


#: Seconds > 0, as a float.
positive_seconds = _seconds("> 0", zero_ok=False)
#: Seconds >= 0, as a float.
non_negative_seconds = _seconds(">= 0", zero_ok=True)


def or_none(check: Callable[[Any], T]) -> Callable[[Any], T | None]:
    """``check`` that also takes None (not set), its errors saying so."""

    def checked(value: Any) -> T | None:
        if value is None:
            return None
        try:
            return check(value)
        except BadValue as bad:
            raise BadValue(str(bad).replace("must be", "must be None or", 1)) from None

    return checked


#: None (not set), or seconds > 0 as a float.
optional_seconds = or_none(positive_seconds)


Choice = TypeVar("Choice", bound=str)


def one_of(choices: tuple[Choice, ...]) -> Callable[[Any], Choice]:
    """A check that a value is one of ``choices`` (strings), suggesting the closest for a typo."""

    def check(value: Any) -> Choice:
        allowed = ", ".join(repr(c) for c in choices)
        if not isinstance(value, str):
            raise BadValue(f"must be one of {allowed}, {got(value, wrong_type=True)}")
        if value not in choices:
            close = difflib.get_close_matches(value.lower(), choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise BadValue(f"must be one of {allowed}, {got(value, wrong_type=False)}{hint}")
        return value

    return check


def check_flag(value: Any) -> bool:
    # 0/1 or "yes" would be guesses; a config that means a flag can say True or False.
    if not isinstance(value, bool):
        raise BadValue(f"must be True or False, {got(value, wrong_type=True)}")
    return value


def check_count(value: Any) -> int:
    """An int >= 1 (a semaphore's limit, ``max_concurrency``)."""
    what = "must be an int >= 1"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise BadValue(f"{what}, {got(value, wrong_type=True)}")
    if value < 1:
        raise BadValue(f"{what}, {got(value, wrong_type=False)}")
    return int(value)


_BY_KIND: dict[str, Callable[[Any], Any]] = {
    "seconds": positive_seconds,
    "seconds or 0": non_negative_seconds,
    "count": check_count,
    "flag": check_flag,
}


def check_argument(kind: str, name: str, value: Any, source: str) -> Any:
    """Check an argument of kind ``"seconds"`` (> 0), ``"seconds or 0"``, ``"count"`` (an int
    >= 1) or ``"flag"``; returns it normalised, or raises OptionError naming ``name`` and
    ``source`` (``RedisLock('jobs')``)."""
    try:
        return _BY_KIND[kind](value)
    except BadValue as bad:
        raise OptionError(name, source, str(bad)) from None
