"""Adaptive in-flight limits: at most N calls of a named limit's partition run at once across
every worker, N chosen between a floor and a ceiling from what the calls report (AIMD: an
overload cuts it, successes grow it), kept in the partition's one adaptive state in Redis
(``adaptive_rates.adaptive_key``) beside its rate.

A slot is taken by one script call that reads N and counts the live holders
(``lua/in_flight_take.lua``); the holders are a semaphore's sorted set, so the semaphore
engine renews and gives back the slots, and a crashed worker's slot expires with its lease."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .adaptive_rates import KINDS, InFlight, adaptive_key
from .keys import slot_key
from .leases import Client
from .script_runner import ScriptRunner, package_script
from .timing import to_ms, to_seconds

__all__ = [
    "IN_FLIGHT_ADAPT",
    "IN_FLIGHT_TAKE",
    "FlightChange",
    "FlightSlot",
    "FlightState",
    "InFlight",
    "flight_state",
    "in_flight_key",
    "report_flight",
    "take_flight",
]

IN_FLIGHT_TAKE = package_script(__package__, "in_flight_take.lua")
IN_FLIGHT_ADAPT = package_script(__package__, "in_flight_adapt.lua")


def in_flight_key(log: str) -> str:
    """The holders (a semaphore's sorted set) of the in-flight limit of the partition logged at
    ``log``, in its slot."""
    return slot_key(log, "in_flight")


@dataclass(frozen=True)
class FlightSlot:
    """One attempt at a slot: ``taken`` or not, N now and the calls running (the caller counted
    when it took one)."""

    taken: bool
    limit: int
    running: int


@dataclass(frozen=True)
class FlightChange:
    """N moved from ``old`` to ``new`` calls at once, and why."""

    old: int
    new: int
    reason: str


def take_flight(scripts: ScriptRunner, log: str, holder: str, ttl_ms: int, spec: InFlight) -> FlightSlot:
    """Take a slot of the in-flight limit of the partition logged at ``log`` for ``holder`` (held
    ``ttl_ms`` unless renewed), if fewer than N run."""
    args = [holder, str(ttl_ms), str(spec.floor), str(spec.ceiling), str(spec.start)]
    reply: Any = scripts.run(IN_FLIGHT_TAKE, [in_flight_key(log), adaptive_key(log)], args)
    return FlightSlot(bool(int(reply[0])), int(reply[1]), int(reply[2]))


def report_flight(
    scripts: ScriptRunner, log: str, spec: InFlight, kind: str, elapsed: float, reason: str = ""
) -> FlightChange | None:
    """Report a call (``kind``: one of ``KINDS``, ``elapsed`` seconds after it started) to the
    in-flight limit of the partition logged at ``log``; the change of N, if any."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    args = [
        kind,
        str(to_ms(elapsed, minimum=0)),
        reason,
        str(spec.floor),
        str(spec.ceiling),
        str(spec.start),
        repr(spec.cut),
        repr(spec.growth),
    ]
    reply: Any = scripts.run(IN_FLIGHT_ADAPT, [adaptive_key(log)], args)
    if not int(reply[0]):
        return None
    return FlightChange(int(reply[1]), int(reply[2]), _text(reply[3]))


@dataclass(frozen=True)
class FlightState:
    """An in-flight limit's partition now: N (``limit``), the bounds it was last moved within,
    the ``reason`` and server time (seconds) of its last change, its changes, and the calls
    ``running`` (slots held; one whose lease ran out is dropped by the next take)."""

    limit: int
    floor: int
    ceiling: int
    reason: str
    changed_at: float
    changes: int
    running: int


def flight_state(client: Client, log: str) -> FlightState | None:
    """The in-flight state of the partition logged at ``log``; None before its first report."""
    found: dict[Any, Any] = client.hgetall(adaptive_key(log))
    fields = {_text(key): _text(value) for key, value in found.items()}
    if "~flight" not in fields:
        return None
    return FlightState(
        int(fields["~flight"]),
        int(fields.get("~ffloor", "0")),
        int(fields.get("~fceiling", "0")),
        fields.get("~freason", ""),
        to_seconds(int(fields.get("~fat", "0"))),
        int(fields.get("~fchanges", "0")),
        int(client.zcard(in_flight_key(log))),
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
