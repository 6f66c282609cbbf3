"""One decision over every rate limit of a call, in one script call (``lua/rate_limit.lua``):
several limits decided atomically, a cost per call, window and bucket rates, pauses, and the
runtime rates a limit's name is given in Redis; giving a slot back, pausing, the runtime rates.

A limit is a log key (:func:`keys.limit_keys` names the keys beside it, in its cluster slot) and
its rates; the first limit of a decision is the call's home, where its grants, its reservation and
its hop tokens are recorded. Every key of one decision must share a cluster slot
(:func:`check_one_slot`): limits decided together carry one hash tag. The design, and what each
rate promises, are in docs/design.md ("Limits v2").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

from redis.cluster import RedisCluster
from redis.crc import key_slot

from ..errors import OptionError
from .checks import BadValue, check_argument
from .decision_record import Record, run_recorded
from .keys import grant_member, limit_keys, rate_overrides_key, reservation_member
from .leases import Client
from .rates import Rate, parse_rates, rates_from_wire, rates_wire
from .script_runner import ScriptRunner, batched_scripts, package_script
from .timing import to_ms, to_seconds

__all__ = [
    "MAX_PAUSE",
    "RATE_BUCKET",
    "RATE_CANCEL",
    "RATE_CHANGE",
    "RATE_LIMIT",
    "RATE_PAUSE",
    "RATE_STATE",
    "RATE_STATUSES",
    "Cost",
    "Limit",
    "PartitionChange",
    "RateDecision",
    "RateState",
    "cancel_limits",
    "change_partition",
    "check_cost",
    "check_one_slot",
    "clear_runtime_rates",
    "decide_limits",
    "pause_limits",
    "rate_state",
    "rate_states",
    "runtime_rates",
    "runtime_rates_of",
    "set_runtime_rates",
]

_COMMON = package_script(__package__, "rate_common.lua")
RATE_LIMIT = _COMMON + package_script(__package__, "rate_limit.lua")
RATE_CANCEL = _COMMON + package_script(__package__, "rate_cancel.lua")
RATE_PAUSE = package_script(__package__, "rate_pause.lua")
RATE_STATE = package_script(__package__, "rate_state.lua")
RATE_CHANGE = package_script(__package__, "rate_change.lua")
RATE_BUCKET = package_script(__package__, "rate_bucket.lua")

#: ``RateDecision.status`` by the script's reply.
RATE_STATUSES = _STATUSES = ("granted", "reserved", "full", "kept", "started", "held", "over")
_OVER = 6

#: The longest pause, in seconds: a stop for longer is a change of the limit's rate, and a
#: pause's end must stay a whole number of ms Redis can hold.
MAX_PAUSE = 30 * 24 * 3600.0

#: A call's cost: units of every limit, or one number per limit (in the limits' order).
Cost = Union[int, Sequence[int]]


@dataclass(frozen=True)
class Limit:
    """One limit of a decision: its log's ``key``, its ``rates`` (window and bucket rates, see
    :func:`rates.parse_rates`), its ``name`` (the field of its runtime rates; "": none are read)
    and ``overrides``, the hash of those (in its log's slot: :func:`keys.rate_overrides_key`;
    "": the log's own)."""

    key: str
    rates: tuple[Rate, ...]
    name: str = ""
    overrides: str = ""

    @property
    def label(self) -> str:
        return self.name or self.key

    @property
    def keys(self) -> list[str]:
        """The keys the scripts are given for this limit, in their order."""
        return [*limit_keys(self.key), self.overrides or rate_overrides_key("", self.key)]


@dataclass(frozen=True)
class RateDecision:
    """One decision: ``allowed`` (the call starts now), else ``wait`` seconds until its slot;
    ``reserved``: that slot is kept for the caller. True when allowed.

    ``status`` says more: ``"granted"``; ``"reserved"`` (a slot reserved now); ``"kept"`` (the
    caller's reservation, kept: it came back early, or its window is still full, or a limit is
    paused); ``"full"`` (nothing reserved); ``"started"`` (this attempt of the caller started
    already in the window); ``"held"`` (another copy of the caller holds its reservation);
    ``"over"`` (its cost is more than the runtime rates of the limit labelled ``limit`` admit at
    once: it holds no slot and asks again in ``wait`` seconds, until the limit admits it).
    ``now_ms``: the server's time of the decision, in ms (0: not known)."""

    allowed: bool
    wait: float = 0.0
    reserved: bool = False
    status: str = ""
    limit: str = ""
    now_ms: int = 0

    @property
    def due_ms(self) -> int:
        """When the wait ends, in server milliseconds."""
        return self.now_ms + to_ms(self.wait, minimum=0)

    def __bool__(self) -> bool:
        return self.allowed


@dataclass(frozen=True)
class RateState:
    """A partition now, by one of its rates: ``started`` units in the window that ends now,
    ``reserved`` slots kept for calls coming back later, ``next_free`` seconds until a new call
    could start, and ``paused`` seconds until its pause ends (0: not paused).

    By a bucket rate (``burst``: its size; None for a window rate): ``tokens``, the units the
    bucket holds for a new call now, and ``full_in``, seconds until it is full again (its TAT);
    ``started`` is 0 (a bucket keeps no window)."""

    started: int
    reserved: int
    next_free: float
    paused: float = 0.0
    burst: int | None = None
    tokens: int = 0
    full_in: float = 0.0


def check_cost(limits: Sequence[Limit], cost: Cost, source: str) -> tuple[int, ...]:
    """``cost`` as one int >= 1 per limit; an ``OptionError`` (option ``cost``, from ``source``)
    when it is not one, or is more than a limit's rate admits at once (its ``capacity``)."""
    given = (cost,) * len(limits) if not isinstance(cost, Sequence) else tuple(cost)
    if len(given) != len(limits):
        raise OptionError("cost", source, f"must give one cost per limit ({len(limits)}), got {cost!r}")
    costs = tuple(check_argument("count", "cost", each, source) for each in given)
    for limit, units in zip(limits, costs):
        for rate in limit.rates:
            if units > rate.capacity:
                raise OptionError("cost", source, _too_costly(limit, units, rate))
    return costs


def _too_costly(limit: Limit, units: int, rate: Rate) -> str:
    return (
        f"is {units}, more than limit {limit.label!r} ({rate}) admits at once ({rate.capacity}): "
        "such a call could never start"
    )


def check_one_slot(client: Client, limits: Sequence[Limit], source: str) -> None:
    """On a Redis Cluster, every key of one decision must share a slot: an ``OptionError`` naming
    the limits that do not (give them one hash tag, a prefix such as ``{partner}:rate``)."""
    if not isinstance(client, RedisCluster):
        return
    keys = [key for limit in limits for key in limit.keys]
    if len({key_slot(key.encode()) for key in keys}) > 1:
        names = ", ".join(repr(limit.label) for limit in limits)
        raise OptionError(
            "limits",
            source,
            f"{names} are in different Redis Cluster slots and cannot be decided in one script call: "
            "give their keys one hash tag (a prefix such as '{partner}:rate')",
        )


def _limit_keys(limits: Sequence[Limit]) -> list[str]:
    return [key for limit in limits for key in limit.keys]


def _limit_args(limits: Sequence[Limit], costs: Sequence[int]) -> list[str]:
    args = [str(len(limits))]
    for limit, units in zip(limits, costs):
        args += [limit.name, rates_wire(limit.rates), str(units)]
    return args


def decide_limits(
    scripts: ScriptRunner,
    limits: Sequence[Limit],
    caller: str,
    *,
    reserve: bool,
    max_wait: float | None = None,
    attempt: int = 0,
    pauses: int = 0,
    token: str = "",
    next_token: str = "",
    cost: Cost = 1,
    source: str = "rate limit",
    record: Record | None = None,
) -> RateDecision:
    """Whether ``caller`` (its ``attempt``-th try after ``pauses`` pauses, costing ``cost``
    units) starts now under every one of ``limits`` (one script call; ``record``: the decision
    kept in the call's record too, with the limits' home key and labels as its fields).

    ``reserve``: a caller that must wait keeps the next free slot in every limit (if it is at most
    ``max_wait`` seconds away), and is granted it when it asks again then with the same id.
    ``next_token`` (a call re-published for its slot): the copy it will publish if told to wait;
    ``token``: the copy asking (``""`` for one never re-published). Without ``next_token`` no
    copies are told apart. Raises ``OptionError`` (from ``source``) for a cost more than a limit's
    declared rates admit at once; one more than its runtime rates admit is told ``"over"``."""
    costs = check_cost(limits, cost, source)
    most = "0" if max_wait is None else str(to_ms(max_wait))
    args = [
        grant_member(caller, attempt, pauses),
        reservation_member(caller),
        "1" if reserve else "0",
        most,
        token,
        next_token,
        *_limit_args(limits, costs),
    ]
    if record is not None:  # kept with its home partition and its limits' labels first
        labels = ",".join(limit.label for limit in limits)
        record = dataclasses.replace(record, fields=(limits[0].key, labels, *record.fields))
    reply: Any = run_recorded(scripts, RATE_LIMIT, _limit_keys(limits), args, record)
    status = int(reply[0])
    name = _STATUSES[status]
    wait, now = to_seconds(int(reply[1])), int(reply[2])
    if status == _OVER:
        return RateDecision(False, wait, False, name, limits[int(reply[3]) - 1].label, now)
    return RateDecision(name == "granted", wait, name in ("reserved", "kept"), name, now_ms=now)


def cancel_limits(
    scripts: ScriptRunner,
    limits: Sequence[Limit],
    caller: str,
    token: str = "",
    *,
    cost: Cost = 1,
) -> bool:
    """Give back the slot ``caller`` reserved in every one of ``limits`` (it will not come back
    for it); ``token``: only if that copy of the call holds it. True when a slot was given back.
    A limit given without rates gives back its caller's first unit only (what a caller that
    knows only its log can ask)."""
    costs = (cost,) * len(limits) if isinstance(cost, int) else tuple(cost)
    args = [reservation_member(caller), token, *_limit_args(limits, costs)]
    return bool(scripts.run(RATE_CANCEL, _limit_keys(limits), args))


def check_pause(seconds: Any, source: str) -> float:
    """``seconds`` as a pause's length: > 0 and at most ``MAX_PAUSE``; an ``OptionError`` naming
    the value and ``source`` else."""
    checked: float = check_argument("seconds", "seconds", seconds, source)
    if checked > MAX_PAUSE:
        raise OptionError(
            "seconds",
            source,
            f"must be at most {MAX_PAUSE:.0f} (30 days) for a pause, got {checked:g}: "
            "for a longer stop, set the limit's rate",
        )
    return checked


def pause_limits(
    scripts: ScriptRunner, limits: Sequence[Limit], seconds: float, source: str = "pause"
) -> float:
    """Pause ``limits`` for ``seconds`` (by the server's clock; a pause ending later is kept);
    returns the pause's end, in server seconds. ``OptionError`` (from ``source``) for seconds
    ``check_pause`` refuses."""
    seconds = check_pause(seconds, source)
    keys = [limit_keys(limit.key)[4] for limit in limits]
    return to_seconds(int(scripts.run(RATE_PAUSE, keys, [str(to_ms(seconds))])))


@dataclass(frozen=True)
class PartitionChange:
    """What an operator's change did to one partition: the ``dropped`` reservations (calls
    waiting, each decided anew when it comes back), the seconds its pause had left before
    (``was_paused``) and has now (``paused``); 0: none."""

    dropped: int
    was_paused: float
    paused: float


def change_partition(
    scripts: ScriptRunner, key: str, pause: float | None = None, *, lift: bool = False
) -> PartitionChange:
    """An operator's change of the partition logged at ``key`` (``lua/rate_change.lua``): every
    reservation given up, so the calls waiting are decided anew under what is in force when they
    come back; ``pause``: a pause of that many seconds from now, replacing any (``check_pause``
    first); ``lift``: its pause ends now."""
    action = "lift" if lift else "" if pause is None else str(to_ms(pause))
    reply: Any = scripts.run(RATE_CHANGE, list(limit_keys(key)), [action])
    dropped, was, left = (int(each) for each in reply)
    return PartitionChange(dropped, to_seconds(was), to_seconds(left))


def rate_state(scripts: ScriptRunner, key: str, rate: Rate, place: int = 1) -> RateState | None:
    """The partition logged at ``key`` now, by ``rate`` (the ``place``-th of its limit's rates): a
    window's starts, or a bucket's units; None when its key holds something else."""
    script, call = _state_call(key, rate, place)
    return _state_of(rate, scripts.run(script, *call))


def rate_states(scripts: ScriptRunner, asked: Sequence[tuple[str, Rate, int]]) -> list[RateState | None]:
    """``rate_state`` of each ``(key, rate, place)``, read in one batch of script calls (one
    round trip per kind of rate, a window's and a bucket's; on a cluster, per node)."""
    by_script: dict[str, list[tuple[int, tuple[list[str], list[str]]]]] = {}
    for index, (key, rate, place) in enumerate(asked):
        script, call = _state_call(key, rate, place)
        by_script.setdefault(script, []).append((index, call))
    found: list[RateState | None] = [None] * len(asked)
    for script, calls in by_script.items():
        replies = batched_scripts(scripts, script, [call for _, call in calls])
        for (index, _), reply in zip(calls, replies):
            found[index] = _state_of(asked[index][1], reply)
    return found


def _state_call(key: str, rate: Rate, place: int) -> tuple[str, tuple[list[str], list[str]]]:
    log, reserved, _, bucket, pause = limit_keys(key)
    if rate.burst is None:
        return RATE_STATE, ([log, reserved, pause], [str(rate.limit), str(rate.period_ms)])
    return RATE_BUCKET, (
        [bucket, pause, reserved],
        [str(rate.limit), str(rate.period_ms), str(rate.burst), str(place)],
    )


def _state_of(rate: Rate, reply: Any) -> RateState | None:
    if not reply:
        return None
    if rate.burst is not None:
        tokens, full_ms, free_ms, paused_ms, waiting = (int(each) for each in reply)
        return RateState(
            0, waiting, to_seconds(free_ms), to_seconds(paused_ms), rate.burst, tokens, to_seconds(full_ms)
        )
    started, waiting, next_ms, paused_ms = reply
    return RateState(int(started), int(waiting), to_seconds(int(next_ms)), to_seconds(int(paused_ms)))


def set_runtime_rates(client: Client, overrides: str, name: str, rates: Any) -> tuple[Rate, ...]:
    """Replace the rates of the limit ``name`` (in the hash ``overrides``) by ``rates`` (what
    :func:`rates.parse_rates` reads), from every process's next decision until cleared; returns
    them. Raises ``OptionError`` for rates it cannot read."""
    try:
        parsed = parse_rates(rates)
    except BadValue as bad:
        raise OptionError("rate", f"runtime rate of {name!r}", str(bad)) from None
    client.hset(overrides, name, rates_wire(parsed))
    return parsed


def clear_runtime_rates(client: Client, overrides: str, name: str) -> bool:
    """The limit ``name`` goes back to the rates its code gives; True when it had runtime ones."""
    return bool(client.hdel(overrides, name))


def runtime_rates_of(client: Client, overrides: str, name: str) -> tuple[Rate, ...] | None:
    """The runtime rates of the limit ``name`` (in the hash ``overrides``), None when unset."""
    wire = client.hget(overrides, name)
    return None if wire is None else rates_from_wire(_text(wire))


def runtime_rates(client: Client, overrides: str) -> dict[str, tuple[Rate, ...]]:
    """Every runtime rate in the hash ``overrides``, by limit name."""
    found: dict[Any, Any] = client.hgetall(overrides)
    return {_text(name): rates_from_wire(_text(wire)) for name, wire in found.items()}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
