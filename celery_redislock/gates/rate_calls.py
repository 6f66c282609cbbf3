"""Which limits one call of a task is decided under, and at what cost: its ``global_rate_limit``
partition (if any) first, then each named limit of ``rate_limits`` (``config.limits``) in its
partition, each charged the ``rate_cost`` of the call. The rate-limit gate decides them all in
one script call (``engine.rate_decisions``); the CLI's ``limit`` commands find them by name.

A named limit's keys carry one hash tag for the whole app (``named_base``): limits decided
together must share a Redis Cluster slot, and tasks name any mix of them. On a Cluster this puts
every named limit of the app on one node (docs/design.md, "Limits v2", says what that gives up).
A ``global_rate_limit`` partition logs beside its partition key, in its own slot, unless its task
names limits too: then under the named limits' tag (``mixed_rate_key``), so the task's one
decision touches one slot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config.arguments import KeyBuilder
from ..config.limits import NamedLimit, declared_limits, limit_catalog, unknown_limit
from ..config.options import LockOptions, source_task
from ..engine.adaptive_rates import adaptive_key
from ..engine.checks import BadValue, check_count
from ..engine.keys import slot_key
from ..engine.rate_decisions import Limit, check_one_slot
from ..engine.rates import rate_of, rates_from_wire, rates_wire
from ..errors import OptionError, short_repr
from ..integration.runtime import Runtime, run_function

__all__ = [
    "HOP_HEADER",
    "LIMITS_HEADER",
    "LOG_HEADER",
    "PAUSES_HEADER",
    "CallLimits",
    "LimitResolver",
    "catalog_of",
    "limits_of_message",
    "message_headers",
    "mixed_rate_key",
    "named_base",
    "named_log",
    "overrides_of",
    "pauses_of",
    "rate_key",
]

#: The suffix of a ``global_rate_limit`` partition's log beside its key (``keys.slot_key``).
RATE_SUFFIX = "rate"


def rate_key(partition: str) -> str:
    """The Redis key of the log of ``partition`` (a key as ``KeyBuilder`` makes them)."""
    return slot_key(partition, RATE_SUFFIX)


#: Marks a ``global_rate_limit`` partition's log kept under the named limits' tag: no limit's
#: name holds an "@" (``config.limits``), so it is no named limit's key.
MIXED_MARK = "@rate"


def mixed_rate_key(key_prefix: str, partition: str) -> str:
    """The log of ``partition`` (a key as ``KeyBuilder`` makes them) of a task that names limits
    too: ``{redislock:limits}:@rate:<partition>``, in the named limits' cluster slot."""
    return f"{named_base(key_prefix)}:{MIXED_MARK}:{partition}"


def named_base(key_prefix: str) -> str:
    """The start of every named limit's key of an app, one hash tag for them all:
    ``{redislock:limits}`` (a prefix with a tag of its own keeps it)."""
    # slot_key is the one rule of tagging: it wraps the base unless it has a tag already.
    return slot_key(f"{key_prefix}:limits", "")[:-1]


def named_log(key_prefix: str, name: str, partition: str = "") -> str:
    """The log of limit ``name`` in ``partition`` (a digest; "": the limit's one partition)."""
    return f"{named_base(key_prefix)}:{name}" + (f":{partition}" if partition else "")


def overrides_of(key_prefix: str) -> str:
    """The hash of the runtime rates of the app's named limits (field: a limit's name)."""
    return slot_key(named_base(key_prefix), "overrides")


def catalog_of(runtime: Runtime) -> dict[str, NamedLimit]:
    """The app's named limits: ``redislock_limits`` and those declared in code."""
    return limit_catalog(runtime.settings.limits, declared_limits(runtime.app))


#: The message header naming a re-published copy of a postponed call (a fresh token each hop).
HOP_HEADER = "redislock_hop"
#: The message header carrying a re-published call's partition log, where its slot is reserved.
LOG_HEADER = "redislock_rate_log"
#: The message header carrying every limit of a re-published call of several (or of a named one):
#: ``[[log, name, overrides, rates' wire form, cost], ...]``, to give its slot back in each.
LIMITS_HEADER = "redislock_rate_limits"
#: The message header counting the pauses a call was re-queued by: each is a new attempt (its
#: start counted again, not taken for a copy of the start before the pause).
PAUSES_HEADER = "redislock_rate_pauses"


@dataclass(frozen=True)
class CallLimits:
    """The limits of one call, its first one its home (where its own records live), the units it
    costs in each, and ``source``, how errors name the task."""

    limits: tuple[Limit, ...]
    costs: tuple[int, ...]
    source: str

    @property
    def home(self) -> str:
        return self.limits[0].key

    def describe(self) -> str:
        """``partner 10/s, llm 5/s, 20/m`` (a ``global_rate_limit`` by its key)."""
        return "; ".join(f"{limit.label} allows {', '.join(map(str, limit.rates))}" for limit in self.limits)

    def summary(self) -> str:
        """What a log line says of them: one ``global_rate_limit`` as it always read
        (``<key> allows 10/s``), else :meth:`describe`."""
        if len(self.limits) == 1 and not self.limits[0].name:
            return f"{self.home} allows {self.limits[0].rates[0]}"
        return self.describe()

    def rates_text(self) -> str:
        """Their rates for the ``task_rate_limited`` signal: ``"10/s"`` for one
        ``global_rate_limit``, else ``"partner 10/s; llm 5/s, 20/m"``."""
        if len(self.limits) == 1 and not self.limits[0].name:
            return str(self.limits[0].rates[0])
        return "; ".join(f"{limit.label} {', '.join(map(str, limit.rates))}" for limit in self.limits)

    def named(self, names: Sequence[str] | None) -> tuple[Limit, ...]:
        """The call's limits called ``names`` (None: all of them); an ``OptionError`` for a name
        that is not one of them."""
        if names is None:
            return self.limits
        own = {limit.name: limit for limit in self.limits if limit.name}
        missing = [name for name in names if name not in own]
        if missing:
            raise OptionError(
                "limits",
                self.source,
                f"of RateLimitPaused names {missing!r}, not limits of the task: {sorted(own)}",
            )
        return tuple(own[name] for name in names)


class LimitResolver:
    """Makes a call's ``CallLimits``; the partitions' key builders made once per process."""

    def __init__(self) -> None:
        self._builders: dict[tuple[str, str, str, Any], KeyBuilder] = {}

    def check_plan(self, runtime: Runtime, task: Any, options: LockOptions) -> None:
        """What only the app can show, at worker start: a name no limit is declared by, a
        partition naming no argument, a cost naming a limit the task does not have."""
        named = options.value("rate_limits") or ()
        source = source_task(task.name)
        catalog = catalog_of(runtime)
        for name, partition in named:
            if name not in catalog:
                raise OptionError("rate_limits", source, unknown_limit(name, catalog))
            if partition is not None:
                self._builder(runtime, task, "rate_limits", partition)
        cost = options.value("rate_cost")
        if isinstance(cost, tuple):
            names = {name for name, _ in named}
            for name, _ in cost:
                if name not in names:
                    raise OptionError(
                        "rate_cost", source, f"names limit {name!r}, not one of rate_limits: {sorted(names)}"
                    )

    def of(self, task: Any, runtime: Runtime, options: LockOptions) -> CallLimits:
        """The limits and costs of the running call of ``task``."""
        request = task.request
        args, kwargs = request.args or (), request.kwargs or {}
        source = source_task(task.name)
        limits: list[Limit] = []
        prefix = runtime.settings.key_prefix
        own = options.value("global_rate_limit")
        named = options.value("rate_limits") or ()
        if own is not None:
            spec = options.value("rate_limit_key")
            builder = self._builder(runtime, task, "rate_limit_key", () if spec is None else spec)
            partition = builder.key(args, kwargs, task)
            log = mixed_rate_key(prefix, partition) if named else rate_key(partition)
            limits.append(Limit(log, (rate_of(own),)))
        if named:
            catalog = catalog_of(runtime)
            overrides = overrides_of(prefix)
            for name, spec in named:
                declared = catalog.get(name)
                if declared is None:
                    raise OptionError("rate_limits", source, unknown_limit(name, catalog))
                digest = "" if spec is None else self._digest(runtime, task, spec, args, kwargs)
                log = named_log(prefix, name, digest)
                # An adaptive partition's decisions read its rate from its own state.
                own_rates = overrides if declared.adaptive is None else adaptive_key(log)
                limits.append(Limit(log, declared.rates, name, own_rates))
        calls = CallLimits(tuple(limits), self._costs(task, options, limits, args, kwargs, source), source)
        check_one_slot(runtime.scripts.client, calls.limits, source)
        return calls

    def _builder(self, runtime: Runtime, task: Any, option: str, spec: Any) -> KeyBuilder:
        prefix = runtime.settings.key_prefix
        cache_key = (prefix, task.name, option, spec)
        builder = self._builders.get(cache_key)
        if builder is None:
            builder = KeyBuilder(prefix, task.name, run_function(type(task)), spec, option=option)
            self._builders[cache_key] = builder
        return builder

    def named_logs(
        self, runtime: Runtime, task: Any, options: LockOptions, args: Any, kwargs: Mapping[str, Any]
    ) -> list[tuple[str, str]]:
        """``(name, log)`` of each named limit of a call of ``task`` with ``args`` and ``kwargs``
        (a request other than the running one: a dead child's), no cost read, nothing asked of
        Redis."""
        prefix = runtime.settings.key_prefix
        return [
            (
                name,
                named_log(
                    prefix, name, "" if spec is None else self._digest(runtime, task, spec, args, kwargs)
                ),
            )
            for name, spec in options.value("rate_limits") or ()
        ]

    def _digest(self, runtime: Runtime, task: Any, spec: Any, args: Any, kwargs: Mapping[str, Any]) -> str:
        # The digest alone, not the task's name: tasks naming one limit share its partitions.
        return self._builder(runtime, task, "rate_limits", spec).key(args, kwargs, task).rsplit(":", 1)[1]

    @staticmethod
    def _costs(
        task: Any,
        options: LockOptions,
        limits: list[Limit],
        args: Any,
        kwargs: Mapping[str, Any],
        source: str,
    ) -> tuple[int, ...]:
        spec = options.value("rate_cost")
        if spec is None:
            return (1,) * len(limits)
        by_name = dict(spec) if isinstance(spec, tuple) else None
        costs = []
        for limit in limits:
            each = spec if by_name is None else by_name.get(limit.name, 1)
            costs.append(_evaluate(each, task, args, kwargs, source))
        return tuple(costs)


def _evaluate(cost: Any, task: Any, args: Any, kwargs: Mapping[str, Any], source: str) -> int:
    if not callable(cost):
        return int(cost)
    try:
        value = cost(task, tuple(args), dict(kwargs))
    except Exception as exc:
        raise OptionError("rate_cost", source, f"raised {type(exc).__name__}: {exc}") from exc
    try:
        return check_count(value)
    except BadValue:
        raise OptionError(
            "rate_cost", source, f"must return an int >= 1, returned {short_repr(value)}"
        ) from None


def pauses_of(request: Any) -> int:
    """How many pauses re-queued the running call (its grant is keyed by them and its retries:
    a call re-queued by a pause starts anew, its start before the pause is not its copy's)."""
    return int(vars(request).get(PAUSES_HEADER) or 0)


def message_headers(calls: CallLimits, hop: str, request: Any) -> dict[str, Any]:
    """The headers of the re-published copy ``hop`` of the running call."""
    headers: dict[str, Any] = {HOP_HEADER: hop, LOG_HEADER: calls.home}
    if len(calls.limits) > 1 or calls.limits[0].name or calls.costs[0] != 1:
        headers[LIMITS_HEADER] = [
            [limit.key, limit.name, limit.overrides, rates_wire(limit.rates), units]
            for limit, units in zip(calls.limits, calls.costs)
        ]
    pauses = vars(request).get(PAUSES_HEADER)
    if pauses:
        headers[PAUSES_HEADER] = pauses
    return headers


def limits_of_message(request: Any, key: str) -> tuple[tuple[Limit, ...], tuple[int, ...]]:
    """The limits a postponed call's message names: every one of ``LIMITS_HEADER``, else its one
    log (whose first unit is what such a call reserved)."""
    given = getattr(request, LIMITS_HEADER, None)
    if not isinstance(given, list) or not given:
        return (Limit(key, ()),), (1,)
    limits = tuple(
        Limit(str(log), rates_from_wire(str(wire)), str(name), str(hash_))
        for log, name, hash_, wire, _ in given
    )
    return limits, tuple(int(units) for *_, units in given)
