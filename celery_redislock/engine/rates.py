"""Rates in Celery's format (``"10/s"``, ``"100/m"``, ``"1000/h"``): parsed once, with an error
naming the value that is wrong."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from .checks import BadValue, got, or_none
from .timing import to_ms

__all__ = ["Rate", "optional_rate", "parse_rate", "rate_of"]

_PERIODS = {"s": 1, "m": 60, "h": 3600}
_FORM = re.compile(r"\s*(\d+)\s*/\s*([smh])\s*")
_WHAT = "must be a rate 'N/s', 'N/m' or 'N/h' (N an int >= 1)"


@dataclass(frozen=True)
class Rate:
    """At most ``limit`` starts per ``period`` seconds."""

    limit: int
    period: int

    @property
    def period_ms(self) -> int:
        return to_ms(self.period)

    def __str__(self) -> str:
        unit = next(unit for unit, seconds in _PERIODS.items() if seconds == self.period)
        return f"{self.limit}/{unit}"


@functools.lru_cache(maxsize=256)
def rate_of(text: str) -> Rate:
    """The ``Rate`` of a rate an option holds (checked already), read once a process."""
    return parse_rate(text)


def parse_rate(value: Any) -> Rate:
    """``value`` (``"N/s"``, ``"N/m"``, ``"N/h"``, or a ``Rate``) as a ``Rate``; raises
    ``BadValue`` saying what is wrong with it."""
    if isinstance(value, Rate):
        return value
    if not isinstance(value, str):
        # A bare number is Celery's "per second"; here the period is always written out.
        raise BadValue(f"{_WHAT}, {got(value, wrong_type=True)}")
    match = _FORM.fullmatch(value)
    if match is None:
        raise BadValue(f"{_WHAT}, {got(value, wrong_type=False)}")
    limit = int(match.group(1))
    if limit < 1:
        raise BadValue(f"{_WHAT}, {got(value, wrong_type=False)} (N is 0)")
    return Rate(limit, _PERIODS[match.group(2)])


def _plain_rate(value: Any) -> str:
    return str(parse_rate(value))


#: None (no limit), or a rate as :func:`parse_rate` reads it, in its plain form (``"10/s"``: an
#: option's value stays what users write; :func:`rate_of` reads it).
optional_rate = or_none(_plain_rate)
