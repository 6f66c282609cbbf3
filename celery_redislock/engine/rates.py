"""Rates in Celery's format (``"10/s"``, ``"100/m"``, ``"1000/h"``), optionally with a burst
(``"10/s burst 50"``): parsed once, with an error naming the value that is wrong; and their wire
form, the one the rate-limit scripts and the runtime rates in Redis hold."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .checks import BadValue, got, or_none
from .timing import to_ms

__all__ = [
    "MOST",
    "Rate",
    "optional_rate",
    "parse_rate",
    "parse_rates",
    "rate_of",
    "rates_from_wire",
    "rates_wire",
]

_PERIODS = {"s": 1, "m": 60, "h": 3600}
_FORM = re.compile(r"\s*(\d+)\s*/\s*([smh])\s*(?:burst\s+(\d+)\s*)?")
#: The most N or B may be: more than one Redis decides in a period, and the scripts' numbers
#: (doubles) stay exact far beyond it.
MOST = 1_000_000_000
_WHAT = f"must be a rate 'N/s', 'N/m' or 'N/h' (N an int from 1 to {MOST})"
_WHAT_BURST = f"{_WHAT}, optionally with a burst: 'N/s burst B' (B an int from 1 to {MOST})"
_WIRE = re.compile(r"(\d+):(\d+):(\d+)")
_PERIODS_MS = {to_ms(seconds): seconds for seconds in _PERIODS.values()}


@dataclass(frozen=True)
class Rate:
    """At most ``limit`` units per ``period`` seconds; with ``burst``, a bucket of ``burst``
    units refilled at that rate (see the rate-limit page for what each promises)."""

    limit: int
    period: int
    burst: int | None = None

    @property
    def period_ms(self) -> int:
        return to_ms(self.period)

    @property
    def capacity(self) -> int:
        """The most units one call may cost: the window's N, or the bucket's size."""
        return self.burst if self.burst is not None else self.limit

    def __str__(self) -> str:
        unit = next(unit for unit, seconds in _PERIODS.items() if seconds == self.period)
        return f"{self.limit}/{unit}" + ("" if self.burst is None else f" burst {self.burst}")


@functools.lru_cache(maxsize=256)
def rate_of(text: str) -> Rate:
    """The ``Rate`` of a rate an option holds (checked already), read once a process."""
    return parse_rate(text)


def parse_rate(value: Any, *, burst: bool = False) -> Rate:
    """``value`` (``"N/s"``, ``"N/m"``, ``"N/h"``, or a ``Rate``) as a ``Rate``; with ``burst``,
    ``"N/s burst B"`` too. Raises ``BadValue`` saying what is wrong with it."""
    what = _WHAT_BURST if burst else _WHAT
    if isinstance(value, Rate):
        if value.burst is not None and not burst:
            raise BadValue(f"{what}, got {str(value)!r} (a burst is not allowed here)")
        return value
    if not isinstance(value, str):
        # A bare number is Celery's "per second"; here the period is always written out.
        raise BadValue(f"{what}, {got(value, wrong_type=True)}")
    match = _FORM.fullmatch(value)
    if match is None or (match.group(3) is not None and not burst):
        raise BadValue(f"{what}, {got(value, wrong_type=False)}")
    limit = int(match.group(1))
    if limit < 1:
        raise BadValue(f"{what}, {got(value, wrong_type=False)} (N is 0)")
    if limit > MOST:
        raise BadValue(f"{what}, {got(value, wrong_type=False)} (N is more than {MOST})")
    size = None if match.group(3) is None else int(match.group(3))
    if size is not None and size < 1:
        raise BadValue(f"{what}, {got(value, wrong_type=False)} (B is 0)")
    if size is not None and size > MOST:
        raise BadValue(f"{what}, {got(value, wrong_type=False)} (B is more than {MOST})")
    return Rate(limit, _PERIODS[match.group(2)], size)


def parse_rates(value: Any) -> tuple[Rate, ...]:
    """The rates of one limit: a rate (``"10/s"``, ``"10/s burst 50"``, a ``Rate``), several in
    one string (``"5/s, 20/m"``), or a sequence of those. Raises ``BadValue``."""
    items: Sequence[Any]
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, Rate):
        items = (value,)
    elif isinstance(value, Sequence) and value:
        items = value
    else:
        raise BadValue(f"{_WHAT_BURST}, or several, {got(value, wrong_type=True)}")
    rates = tuple(parse_rate(item, burst=True) for item in items)
    if len(set(rates)) != len(rates):
        raise BadValue(f"must not name a rate twice, got {', '.join(map(str, rates))!r}")
    return rates


def rates_wire(rates: Sequence[Rate]) -> str:
    """``rates`` in the scripts' wire form: ``N:period ms:burst`` (0: none), joined by ``;``."""
    return ";".join(f"{rate.limit}:{rate.period_ms}:{rate.burst or 0}" for rate in rates)


def rates_from_wire(text: str) -> tuple[Rate, ...]:
    """The rates of a wire form made by :func:`rates_wire`; raises ``BadValue`` for any other."""
    rates = []
    for item in text.split(";"):
        match = _WIRE.fullmatch(item)
        if match is None or int(match.group(1)) < 1 or int(match.group(2)) not in _PERIODS_MS:
            raise BadValue(f"must be rates in the wire form 'N:period ms:burst', got {text!r}")
        limit, period_ms, burst = (int(group) for group in match.groups())
        rates.append(Rate(limit, _PERIODS_MS[period_ms], burst or None))
    return tuple(rates)


def _plain_rate(value: Any) -> str:
    return str(parse_rate(value))


#: None (no limit), or a rate as :func:`parse_rate` reads it, in its plain form (``"10/s"``: an
#: option's value stays what users write; :func:`rate_of` reads it).
optional_rate = or_none(_plain_rate)
