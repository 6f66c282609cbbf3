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

Beyond one limit of unit calls (``rate_decisions``): a limiter may hold several rates (window
rates share its one log, a rate with a burst is a bucket beside it), be decided together with
other limiters (``also``), charge a call several units (``cost``), be paused, and have its rates
replaced at run time in Redis.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import OptionError
from .checks import BadValue, check_argument
from .keys import rate_keys, rate_limiter_key, rate_overrides_key, reservation_member
from .leases import Client
from .rate_decisions import (
    RATE_CANCEL,
    RATE_LIMIT,
    RATE_STATE,
    Limit,
    RateDecision,
    RateState,
    cancel_limits,
    change_partition,
    check_cost,
    check_one_slot,
    clear_runtime_rates,
    decide_limits,
    pause_limits,
    rate_state,
    runtime_rates_of,
    set_runtime_rates,
)
from .rates import Rate, parse_rates
from .script_runner import ScriptRunner, package_script
from .timing import server_time

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

RATE_HOP = package_script(__package__, "rate_hop.lua")


def _one(key: str, rate: Rate | None) -> tuple[Limit]:
    # The gate's one limit: no name (no runtime rate), its overrides hash its log's own.
    return (Limit(key, () if rate is None else (rate,)),)


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
    (one script call): :func:`rate_decisions.decide_limits` (its arguments) with this one limit,
    no runtime rate, cost 1."""
    return decide_limits(
        scripts,
        _one(key, rate),
        caller,
        reserve=reserve,
        max_wait=max_wait,
        attempt=attempt,
        token=token,
        next_token=next_token,
    )


def confirm_hop(scripts: ScriptRunner, key: str, caller: str, token: str) -> bool:
    """The copy of ``caller`` named ``token`` is published: it holds the reservation from now on
    (unless another copy took it over meanwhile: False)."""
    _, _, hops = rate_keys(key)
    return bool(scripts.run(RATE_HOP, [hops], [reservation_member(caller), token]))


def cancel_reservation(scripts: ScriptRunner, key: str, caller: str, token: str = "") -> bool:
    """Give back the slot ``caller`` reserved (it will not come back for it); ``token``: only if
    that copy of the call holds it. True when a slot was given back."""
    return cancel_limits(scripts, _one(key, None), caller, token)


class RedisRateLimiter:
    """At most ``rate`` starts (``"10/s"``, ``"100/m"``, ``"1000/h"``) of ``name``, across every
    process that uses the same Redis: a sliding-window log in a sorted set at
    ``{prefix}:{name}``, the keys beside it in its cluster slot (see the module's docstring for
    the algorithm and its memory).

    ``rate`` may also be a rate with a burst (``"10/s burst 50"``: a bucket of 50 refilled at
    10/s) or several rates (``"5/s, 20/m"``, or a list), all held. ``also``: other limiters
    decided with this one, atomically (a call refused by one takes no unit of another; on a
    Redis Cluster they must share a hash tag). ``try_acquire()`` decides at once;
    ``acquire(timeout)`` waits for a slot it reserves, so callers are served in the order they
    asked. Each takes a ``cost``: units of every limit, or a mapping of limiter names to units.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        rate: Any,
        *,
        prefix: str = "redislock:rate",
        also: Sequence[RedisRateLimiter] = (),
    ) -> None:
        source = f"{type(self).__name__}({name!r})"
        if not isinstance(name, str) or not name:
            raise OptionError("name", source, f"must be a non-empty str, got {name!r}")
        if not isinstance(prefix, str):
            raise OptionError("prefix", source, f"must be a str, got {prefix!r}")
        try:
            self.rates: tuple[Rate, ...] = parse_rates(rate)
        except BadValue as bad:
            raise OptionError("rate", source, str(bad)) from None
        if not all(isinstance(other, RedisRateLimiter) for other in also):
            raise OptionError("also", source, f"must be RedisRateLimiters, got {also!r}")
        #: The first of its rates (its only one, unless given several).
        self.rate: Rate = self.rates[0]
        self.client = client
        self.name = name
        #: The Redis key of the log; the keys beside it (``keys.limit_keys``) share its cluster slot.
        self.key = rate_limiter_key(prefix, name)
        #: The hash of the runtime rates of this limiter's prefix (or its own, see
        #: ``keys.rate_overrides_key``), field ``name``.
        self.overrides = rate_overrides_key(prefix, self.key)
        self.limit = Limit(self.key, self.rates, name, self.overrides)
        self.limits: tuple[Limit, ...] = (self.limit, *(other.limit for other in also))
        if len({limit.key for limit in self.limits}) != len(self.limits):
            raise OptionError("also", source, "names one limiter twice")
        check_one_slot(client, self.limits, source)
        self._source = source
        self._scripts = ScriptRunner(client)

    def _costs(self, cost: int | Mapping[str, int]) -> tuple[int, ...]:
        if isinstance(cost, Mapping):
            unknown = set(cost) - {limit.name for limit in self.limits}
            if unknown:
                raise OptionError("cost", self._source, f"names no limiter of this one: {sorted(unknown)!r}")
            return check_cost(self.limits, [cost.get(limit.name, 1) for limit in self.limits], self._source)
        return check_cost(self.limits, cost, self._source)

    def try_acquire(self, cost: int | Mapping[str, int] = 1) -> RateDecision:
        """Start now if every limit allows (recorded as a start of ``cost`` units), else say how
        long until the next free slot (``wait``, seconds), reserving nothing. Truthy when
        allowed."""
        costs = self._costs(cost)
        return decide_limits(
            self._scripts, self.limits, uuid.uuid4().hex, reserve=False, cost=costs, source=self._source
        )

    def acquire(self, timeout: float | None = None, cost: int | Mapping[str, int] = 1) -> bool:
        """Wait for a start of ``cost`` units, at most ``timeout`` seconds (None: as long as it
        takes). The slot is reserved at once (no later caller takes it); False, reserving nothing,
        when the next free slot is further away than ``timeout``."""
        if timeout is not None:
            timeout = check_argument("seconds or 0", "timeout", timeout, self._source)
        costs = self._costs(cost)
        deadline = None if timeout is None else time.monotonic() + timeout
        caller = uuid.uuid4().hex
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            decision = decide_limits(
                self._scripts,
                self.limits,
                caller,
                reserve=True,
                max_wait=left,
                cost=costs,
                source=self._source,
            )
            if decision.allowed:
                return True
            # Over a runtime rate: no slot to reserve, it asks again until the rate admits it.
            over = decision.status == "over" and (left is None or decision.wait < left)
            if not decision.reserved and not over:
                return False
            try:
                time.sleep(decision.wait)
            except BaseException:
                cancel_limits(self._scripts, self.limits, caller, cost=costs)
                raise

    def pause(self, seconds: float) -> float:
        """Admit nothing under this limiter's name until ``seconds`` from now, by the server's
        clock (every limiter that names it in ``also`` too); a call waiting keeps its slot, one
        asking is told the pause's end. A pause ending later is kept. Returns the seconds until
        the pause ends."""
        ends = pause_limits(self._scripts, (self.limit,), seconds, self._source)
        return max(0.0, ends - server_time(self.client))

    def resume(self) -> bool:
        """End this limiter's pause now; True when it was paused. Like a rate's change, it gives
        up the slots reserved (``change_partition``): callers waiting ask again as new ones."""
        return change_partition(self._scripts, self.key, lift=True).was_paused > 0

    def set_rate(self, rate: Any) -> tuple[Rate, ...]:
        """Replace this limiter's rates, in Redis, for every process using its name and prefix,
        from their next decision until ``reset_rate()``; returns them. The slots reserved are
        given up (``change_partition``): callers waiting ask again under the new rates."""
        rates = set_runtime_rates(self.client, self.overrides, self.name, rate)
        change_partition(self._scripts, self.key)
        return rates

    def reset_rate(self) -> bool:
        """Back to the rates given in the code; True when runtime rates were set. The slots
        reserved are given up, as by ``set_rate``."""
        had = clear_runtime_rates(self.client, self.overrides, self.name)
        change_partition(self._scripts, self.key)
        return had

    def current_rates(self) -> tuple[Rate, ...]:
        """The rates decisions use now: the runtime ones if set, else the code's."""
        return runtime_rates_of(self.client, self.overrides, self.name) or self.rates

    def state(self) -> RateState | None:
        """The partition now, by its first current rate: a window's starts, or a bucket's units
        and TAT (None when its key holds something else)."""
        return rate_state(self._scripts, self.key, self.current_rates()[0])

    def __repr__(self) -> str:
        rates = ", ".join(map(str, self.rates))
        return f"{type(self).__name__}({self.name!r}, {rates!r}, key={self.key!r})"
