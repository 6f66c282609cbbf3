"""RedisRateLimiter: at most N starts per period of one partition, across every process, decided
in one round trip by the Redis server's clock; and the decision the task option uses.

The algorithm is a sliding-window log (``lua/rate_limit.lua``): one sorted set per partition,
one entry per start of the last period (scored by its time on the server's clock), plus one per
call that was told to come back (its reserved slot); beside it, in its cluster slot, a sorted set
of the reservations alone and a hash of the hop tokens of the calls that hold them
(``keys.rate_keys``). Every decision is O(log N): a window's starts are two ZCOUNTs, a slot is
an entry found by rank. It is exact (no closed window of one period ever holds more than N
starts) and costs memory in proportion to N plus the calls waiting (task ids as members).

A call that must wait reserves the next free slot: one period after the N-th newest entry, and
1/N of a period after the newest, so a backlog is spread evenly over each period and every new
call is placed after every reserved one (none is overtaken). When it comes back (late, maybe)
its start is checked against the starts of the window that ends then (slots reserved by calls
not back yet are not starts); if that window is full, it keeps its place and is told when room
may come (never later than it does).

A call re-published for its slot names its copy with a hop token (``decide``'s ``token`` and
``next_token``): the reservation remembers the copy known to be published and the one being
published (``confirm_hop``), so another copy of the call (a broker's redelivery) is told
``held``; a grant is recorded per attempt, so a copy of an attempt that started is told
``started``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError
from .checks import BadValue, check_argument
from .keys import grant_member, rate_keys, rate_limiter_key, reservation_member
from .leases import Client
from .rates import Rate, parse_rate
from .script_runner import ScriptRunner, package_script
from .timing import to_ms, to_seconds

__all__ = [
    "RATE_CANCEL",
    "RATE_HOP",
    "RATE_LIMIT",
    "RATE_STATE",
    "RateDecision",
    "RateState",
    "RedisRateLimiter",
    "cancel_reservation",
    "confirm_hop",
    "decide",
    "rate_state",
]

RATE_LIMIT = package_script(__package__, "rate_limit.lua")
RATE_STATE = package_script(__package__, "rate_state.lua")
RATE_HOP = package_script(__package__, "rate_hop.lua")
RATE_CANCEL = package_script(__package__, "rate_cancel.lua")

#: ``RateDecision.status`` by the script's reply.
_STATUSES = ("granted", "reserved", "full", "kept", "started", "held")


@dataclass(frozen=True)
class RateDecision:
    """One decision: ``allowed`` (the call starts now), else ``wait`` seconds until its slot;
    ``reserved``: that slot is kept for the caller. True when allowed.

    ``status`` says more: ``"granted"``; ``"reserved"`` (a slot reserved now); ``"kept"`` (the
    caller's reservation, kept: it came back early, or its window is still full); ``"full"``
    (nothing reserved); ``"started"`` (this attempt of the caller started already in the
    window); ``"held"`` (another copy of the caller holds its reservation)."""

    allowed: bool
    wait: float = 0.0
    reserved: bool = False
    status: str = ""

    def __bool__(self) -> bool:
        return self.allowed


@dataclass(frozen=True)
class RateState:
    """A partition now: ``started`` starts in the window that ends now, ``reserved`` slots kept
    for calls coming back later, and ``next_free`` seconds until a new call could start."""

    started: int
    reserved: int
    next_free: float


def decide(
    scripts: ScriptRunner,
    key: str,
    rate: Rate,
    caller: str,
    *,
    reserve: bool,
    max_wait: float | None = None,
    attempt: int = 0,
    token: str = "",
    next_token: str = "",
) -> RateDecision:
    """Whether ``caller`` (its ``attempt``-th try) starts now in the partition logged at ``key``
    (one script call).

    ``reserve``: a caller that must wait keeps the next free slot (if it is at most
    ``max_wait`` seconds away), and is granted it when it asks again then with the same id.
    ``next_token`` (a call re-published for its slot): the copy it will publish if told to wait;
    ``token``: the copy asking (``""`` for one never re-published). Without ``next_token`` no
    copies are told apart."""
    most = "0" if max_wait is None else str(to_ms(max_wait))
    args = [
        str(rate.limit),
        str(rate.period_ms),
        grant_member(caller, attempt),
        reservation_member(caller),
        "1" if reserve else "0",
        most,
        token,
        next_token,
    ]
    status, wait_ms = scripts.run(RATE_LIMIT, list(rate_keys(key)), args)
    name = _STATUSES[int(status)]
    return RateDecision(name == "granted", to_seconds(int(wait_ms)), name in ("reserved", "kept"), name)


def confirm_hop(scripts: ScriptRunner, key: str, caller: str, token: str) -> bool:
    """The copy of ``caller`` named ``token`` is published: it holds the reservation from now on
    (unless another copy took it over meanwhile: False)."""
    _, _, hops = rate_keys(key)
    return bool(scripts.run(RATE_HOP, [hops], [reservation_member(caller), token]))


def cancel_reservation(scripts: ScriptRunner, key: str, caller: str, token: str = "") -> bool:
    """Give back the slot ``caller`` reserved (it will not come back for it); ``token``: only if
    that copy of the call holds it. True when a slot was given back."""
    return bool(scripts.run(RATE_CANCEL, list(rate_keys(key)), [reservation_member(caller), token]))


def rate_state(scripts: ScriptRunner, key: str, rate: Rate) -> RateState | None:
    """The partition logged at ``key`` now, or None when ``key`` holds something else."""
    log, reserved, _ = rate_keys(key)
    reply: Any = scripts.run(RATE_STATE, [log, reserved], [str(rate.limit), str(rate.period_ms)])
    if not reply:
        return None
    started, waiting, next_ms = reply
    return RateState(int(started), int(waiting), to_seconds(int(next_ms)))


class RedisRateLimiter:
    """At most ``rate`` starts (``"10/s"``, ``"100/m"``, ``"1000/h"``) of ``name``, across every
    process that uses the same Redis: a sliding-window log in a sorted set at
    ``{prefix}:{name}``, two keys beside it in its cluster slot (see the module's docstring for
    the algorithm and its memory).

    ``try_acquire()`` decides at once; ``acquire(timeout)`` waits for a slot it reserves, so
    callers are served in the order they asked.
    """

    def __init__(self, client: Client, name: str, rate: Any, *, prefix: str = "redislock:rate") -> None:
        source = f"{type(self).__name__}({name!r})"
        if not isinstance(name, str) or not name:
            raise OptionError("name", source, f"must be a non-empty str, got {name!r}")
        if not isinstance(prefix, str):
            raise OptionError("prefix", source, f"must be a str, got {prefix!r}")
        try:
            self.rate: Rate = parse_rate(rate)
        except BadValue as bad:
            raise OptionError("rate", source, str(bad)) from None
        self.client = client
        self.name = name
        #: The Redis key of the log; the keys beside it (``keys.rate_keys``) share its cluster slot.
        self.key = rate_limiter_key(prefix, name)
        self._source = source
        self._scripts = ScriptRunner(client)

    def try_acquire(self) -> RateDecision:
        """Start now if the limit allows (recorded as a start), else say how long until the next
        free slot (``wait``, seconds), reserving nothing. Truthy when allowed."""
        return decide(self._scripts, self.key, self.rate, uuid.uuid4().hex, reserve=False)

    def acquire(self, timeout: float | None = None) -> bool:
        """Wait for a start, at most ``timeout`` seconds (None: as long as it takes). The slot
        is reserved at once (no later caller takes it); False, reserving nothing, when the next
        free slot is further away than ``timeout``."""
        if timeout is not None:
            timeout = check_argument("seconds or 0", "timeout", timeout, self._source)
        deadline = None if timeout is None else time.monotonic() + timeout
        caller = uuid.uuid4().hex
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            decision = decide(self._scripts, self.key, self.rate, caller, reserve=True, max_wait=left)
            if decision.allowed:
                return True
            if not decision.reserved:
                return False
            try:
                time.sleep(decision.wait)
            except BaseException:
                cancel_reservation(self._scripts, self.key, caller)
                raise

    def state(self) -> RateState | None:
        """The partition now (None when its key holds something else)."""
        return rate_state(self._scripts, self.key, self.rate)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {str(self.rate)!r}, key={self.key!r})"
