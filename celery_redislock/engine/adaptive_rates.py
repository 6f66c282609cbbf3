"""Adaptive rates: a limit's rate chosen between a floor and a ceiling from what its calls report
(a success, an overload, a latency above a target), one state per partition in Redis, moved by
one script call a report (``lua/rate_adapt.lua``), so every worker decides by the same rate.

The state is a hash beside the partition's log, in its cluster slot (:func:`adaptive_key`); the
decisions read the published rate from it as the limit's runtime rate (``rate_common.lua``), so
the gate's decision is unchanged. The rule and why it was chosen: docs/design.md ("Adaptive
limits")."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from .checks import BadValue, got
from .keys import limit_keys, slot_key
from .leases import Client
from .rates import MOST, Rate, parse_rate
from .script_runner import ScriptRunner, package_script
from .timing import to_ms, to_seconds

__all__ = [
    "ADAPT",
    "KINDS",
    "RULES",
    "AdaptiveRate",
    "AdaptiveState",
    "InFlight",
    "RateChange",
    "adaptive_key",
    "adaptive_state",
    "per_second",
    "report_call",
]

ADAPT = package_script(__package__, "rate_adapt.lua")

#: What a call reports: a success, an overload (a 429, a named exception), a slow success.
KINDS = ("ok", "over", "slow")

#: The rules a limit's rate can move by: the package's (slow start, then a remembered peak) and
#: the two it was measured against (docs/design.md, "Adaptive limits").
RULES = ("default", "aimd", "gradient")

#: The slowest rate the wire form holds: one call an hour.
SLOWEST = 1 / 3600


@dataclass(frozen=True)
class InFlight:
    """An adaptive in-flight limit's bounds: N starts at ``start`` and moves between ``floor`` and
    ``ceiling`` calls at once; an overload cuts it by ``cut`` (at least one slot), each window of
    N successes adds ``growth`` slots."""

    floor: int
    ceiling: int
    start: int
    cut: float = 0.75
    growth: float = 0.25


def adaptive_key(log: str) -> str:
    """The state hash of the adaptive partition logged at ``log``, in its slot."""
    return slot_key(log, "adaptive")


def per_second(value: Any, what: str) -> float:
    """A rate as calls a second: a number (calls a second, > 0) or ``"N/s|m|h"``. Raises
    ``BadValue`` naming ``what``."""
    if isinstance(value, str):
        try:
            rate = parse_rate(value)
        except BadValue as bad:
            raise BadValue(f"{what} {bad}") from None
        return rate.limit / rate.period
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BadValue(
            f"{what} must be calls a second (a number > 0) or a rate 'N/s', {got(value, wrong_type=True)}"
        )
    number = float(value)
    if not math.isfinite(number) or number < SLOWEST or number > MOST:
        raise BadValue(
            f"{what} must be calls a second from 1/3600 (one an hour) to {MOST}, {got(value, wrong_type=False)}"
        )
    return number


@dataclass(frozen=True)
class AdaptiveRate:
    """An adaptive limit's bounds and rule: its rate starts at ``start`` and moves between
    ``floor`` and ``ceiling`` (calls a second), one call every 1/rate seconds with at most
    ``burst`` at once. ``overload``: names of exceptions that report an overload (a class's name
    or ``module.Name``, matched along the raised one's classes); ``latency_target``: seconds above
    which a success reports a slow call (None: latency is not looked at); ``rule``: one of
    ``RULES``; ``in_flight``: the bounds of its calls at once, adaptive too (None: not limited)."""

    floor: float
    ceiling: float
    start: float
    burst: int = 1
    overload: tuple[str, ...] = ()
    latency_target: float | None = None
    rule: str = "default"
    in_flight: InFlight | None = None
    #: Rate added by each success (calls a second) after the first overload, far from and near
    #: the last overload's rate (before it, slow start: one call a second a success).
    fast_growth: float = 0.1
    slow_growth: float = 0.02
    #: The factor an overload, and a slow call, cut the rate by; an overload at or below the
    #: last one's rate (the partner's known capacity) by ``near_cut``.
    cut: float = 0.8
    near_cut: float = 0.9
    gentle_cut: float = 0.95
    #: Seconds the last overload's rate must hold before the rate grows fast past it again.
    probe: float = 10.0
    #: A change smaller than this share of the published rate is not published (nor logged).
    step: float = 0.05

    def start_rate(self) -> Rate:
        """The rate decided by before any report: the start, in the wire form's unit."""
        return Rate(max(1, round(self.start * 3600)), 3600, self.burst)

    def is_overload(self, exc: BaseException) -> str:
        """The name ``exc`` matched in ``overload`` ("" when none)."""
        for cls in type(exc).__mro__:
            for name in (cls.__name__, f"{cls.__module__}.{cls.__qualname__}"):
                if name in self.overload:
                    return name
        return ""


@dataclass(frozen=True)
class RateChange:
    """A published rate moved: ``old`` and ``new`` calls a second, and why."""

    old: float
    new: float
    reason: str


def report_call(
    scripts: ScriptRunner,
    log: str,
    name: str,
    spec: AdaptiveRate,
    kind: str,
    elapsed: float,
    reason: str = "",
) -> RateChange | None:
    """Report a call of the adaptive partition logged at ``log`` (``kind``: one of ``KINDS``,
    ``elapsed`` seconds after it started); the change of its published rate, if any."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    args = [
        name,
        kind,
        str(to_ms(elapsed, minimum=0)),
        reason,
        repr(spec.floor),
        repr(spec.ceiling),
        repr(spec.start),
        str(spec.burst),
        repr(spec.fast_growth),
        repr(spec.slow_growth),
        repr(spec.cut),
        repr(spec.gentle_cut),
        str(to_ms(spec.probe)),
        repr(spec.step),
        spec.rule,
        repr(spec.near_cut),
    ]
    reply: Any = scripts.run(ADAPT, [*limit_keys(log), adaptive_key(log)], args)
    if not int(reply[0]):
        return None
    return RateChange(float(_text(reply[1])), float(_text(reply[2])), _text(reply[3]))


@dataclass(frozen=True)
class AdaptiveState:
    """An adaptive partition now: its published ``rate`` (calls a second), the bounds it was
    last moved within, the ``reason`` and server time (seconds) of its last change, how many
    changes it has had, and the rate of its last overload (``peak``, 0: none remembered)."""

    rate: float
    floor: float
    ceiling: float
    reason: str
    changed_at: float
    changes: int
    peak: float


def adaptive_state(client: Client, log: str) -> AdaptiveState | None:
    """The state of the adaptive partition logged at ``log``; None before its first report."""
    found: dict[Any, Any] = client.hgetall(adaptive_key(log))
    fields = {_text(key): _text(value) for key, value in found.items()}
    if "~value" not in fields:
        return None
    return AdaptiveState(
        float(fields["~value"]),
        float(fields.get("~floor", "0")),
        float(fields.get("~ceiling", "0")),
        fields.get("~reason", ""),
        to_seconds(int(fields.get("~at", "0"))),
        int(fields.get("~changes", "0")),
        float(fields.get("~peak", "0")),
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
