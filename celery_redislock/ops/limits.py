"""The named rate limits of an app, from Python and the CLI (``celery redislock limit``): what
they are (declared rates, runtime rates, each partition's state), a rate changed at run time for
every worker (from its next decision, until reset), a pause set, shortened or lifted. The decisions
read the runtime rates in the same script call as they decide (``engine.rate_decisions``), so
nothing here restarts or signals a worker.

Every change gives up the slots reserved in the limit's partitions (``change_partition``): a call
waiting is decided anew, under what is in force, when its message comes back (at the time it was
re-queued for, or its next hop), and new calls are placed by the new rate alone, never after
slots placed by the old one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from celery import Celery

from ..config.limits import NamedLimit, unknown_limit
from ..engine.adaptive_in_flight import FlightState, flight_state
from ..engine.adaptive_rates import AdaptiveRate, AdaptiveState, adaptive_key, adaptive_state
from ..engine.rate_decisions import (
    PartitionChange,
    RateState,
    change_partition,
    check_pause,
    clear_runtime_rates,
    rate_states,
    runtime_rates,
    set_runtime_rates,
)
from ..engine.rates import Rate
from ..errors import OptionError
from ..gates.rate_calls import catalog_of, named_log, overrides_of
from ..gates.rate_inventory import partition_keys
from ..integration.runtime import Runtime, runtime_for

__all__ = [
    "LimitChange",
    "LimitInfo",
    "PartitionInfo",
    "change_pause",
    "pause_limit",
    "reset_limit",
    "resume_limit",
    "set_limit",
    "show_limits",
]


@dataclass(frozen=True)
class PartitionInfo:
    """One partition of a named limit now: its log's ``key`` and its ``states``, one by each of
    the limit's current rates, in their order (a window's starts, or a bucket's units;
    ``paused``: seconds left of a pause)."""

    key: str
    states: tuple[RateState, ...]
    #: An adaptive limit's partition: its rate now, the reason of its last change (None: no
    #: call has reported yet, it decides by the start).
    adaptive: AdaptiveState | None = None
    #: An adaptive limit's partition with ``in_flight``: its calls at once now, running, the
    #: reason of its last change (None: no call has reported yet, it admits by the start).
    flight: FlightState | None = None

    @property
    def state(self) -> RateState:
        """The state by the limit's first rate."""
        return self.states[0]


@dataclass(frozen=True)
class LimitInfo:
    """A named limit: the ``rates`` decisions use now, those ``declared`` (``source``:
    ``redislock_limits`` or ``declare_limit``), whether a runtime rate ``overridden`` them,
    and its partitions in Redis (a page of them: ``found`` counts them all)."""

    name: str
    rates: tuple[Rate, ...]
    declared: tuple[Rate, ...]
    source: str
    overridden: bool
    partitions: tuple[PartitionInfo, ...]
    #: The partitions in Redis, those ``partitions`` leaves out included (``show_limits``' page).
    found: int = 0
    #: An adaptive limit's bounds and rule (its partitions' ``adaptive`` say their rates now).
    adaptive: AdaptiveRate | None = None


@dataclass(frozen=True)
class LimitChange:
    """What an operator's change did to a named limit's partitions: the calls waiting whose slots
    were given up (``dropped``), the longest pause left before (``was_paused``, seconds) and now
    (``paused``); 0: none."""

    dropped: int
    was_paused: float
    paused: float


def _known(runtime: Runtime, name: str, source: str) -> NamedLimit:
    catalog = catalog_of(runtime)
    limit = catalog.get(name)
    if limit is None:
        raise OptionError("name", source, unknown_limit(name, catalog))
    return limit


def _change(
    runtime: Runtime, name: str, partition: str, pause: float | None = None, *, lift: bool = False
) -> LimitChange:
    """``change_partition`` on ``partition`` (a log key ``show_limits`` lists; "": every
    partition the limit has now, and its one partition)."""
    prefix = runtime.settings.key_prefix
    keys = [partition] if partition else sorted({named_log(prefix, name), *partition_keys(runtime, name)})
    changes: list[PartitionChange] = [
        change_partition(runtime.scripts, key, pause, lift=lift) for key in keys
    ]
    return LimitChange(
        sum(each.dropped for each in changes),
        max(each.was_paused for each in changes),
        max(each.paused for each in changes),
    )


def set_limit(app: Celery, name: str, rate: Any) -> tuple[Rate, ...]:
    """Replace the rates of the named limit ``name`` for every worker of ``app``, from each one's
    next decision until ``reset_limit``: ``rate`` as ``redislock_limits`` takes it. Returns the
    rates set. ``OptionError`` for a name not declared or a rate it cannot read (nothing is
    changed then). A call costing more than the new rates admit at once waits, never fails, until
    the limit admits it."""
    runtime = runtime_for(app)
    known = _known(runtime, name, f"set_limit({name!r})")
    if known.adaptive is not None:
        bounds = known.adaptive
        raise OptionError(
            "name",
            f"set_limit({name!r})",
            f"names an adaptive limit (from {bounds.floor:g}/s to {bounds.ceiling:g}/s): the package "
            "chooses its rate; change its floor and ceiling where it is declared, or reset it to its start",
        )
    rates = set_runtime_rates(runtime.scripts.client, overrides_of(runtime.settings.key_prefix), name, rate)
    _change(runtime, name, "")
    return rates


def reset_limit(app: Celery, name: str) -> bool:
    """Back to the declared rates of ``name``; True when a runtime rate was set. A pause stays
    (``resume_limit`` lifts it). An adaptive limit's partitions forget what they learnt and
    start again from its start rate (True when one had learnt something)."""
    runtime = runtime_for(app)
    known = _known(runtime, name, f"reset_limit({name!r})")
    if known.adaptive is not None:
        keys = sorted({named_log(runtime.settings.key_prefix, name), *partition_keys(runtime, name)})
        forgot = bool(runtime.scripts.client.delete(*(adaptive_key(key) for key in keys)))
        _change(runtime, name, "")
        return forgot
    had = clear_runtime_rates(runtime.scripts.client, overrides_of(runtime.settings.key_prefix), name)
    _change(runtime, name, "")
    return had


def change_pause(app: Celery, name: str, seconds: float | None, partition: str = "") -> LimitChange:
    """Pause the named limit ``name`` (one ``partition``, a log key ``show_limits`` lists; "":
    every partition it has now, and its one partition) for ``seconds`` from now on every worker,
    replacing any pause (a longer one is shortened); None: lift its pause. ``OptionError`` for
    seconds not > 0 or over ``MAX_PAUSE`` (nothing is changed then)."""
    runtime = runtime_for(app)
    source = f"pause_limit({name!r})"
    _known(runtime, name, source)
    if seconds is None:
        return _change(runtime, name, partition, lift=True)
    return _change(runtime, name, partition, check_pause(seconds, source))


def pause_limit(app: Celery, name: str, seconds: float, partition: str = "") -> float:
    """``change_pause`` for ``seconds``; returns the seconds the pause lasts from now."""
    return change_pause(app, name, seconds, partition).paused


def resume_limit(app: Celery, name: str, partition: str = "") -> float:
    """Lift the pause of the named limit ``name`` (one ``partition``; "": all); returns the
    seconds it had left (0: it was not paused)."""
    return change_pause(app, name, None, partition).was_paused


def show_limits(app: Celery, first: int = 0, most: int | None = None) -> list[LimitInfo]:
    """Every named limit of ``app``, by name, with its runtime rates and partitions: of each
    limit's partitions (by key) ``most`` from the ``first`` (None: all), their states read in
    one batch for every limit (a round trip per kind of rate, whatever the partitions)."""
    runtime = runtime_for(app)
    client = runtime.scripts.client
    overrides = runtime_rates(client, overrides_of(runtime.settings.key_prefix))
    listed = []
    asked: list[tuple[str, Rate, int]] = []
    for name, limit in sorted(catalog_of(runtime).items()):
        rates = overrides.get(name) or limit.rates
        keys = partition_keys(runtime, name)
        shown = keys[first:] if most is None else keys[first : first + most]
        own: list[tuple[tuple[Rate, ...], AdaptiveState | None, FlightState | None]] = []
        for key in shown:
            # An adaptive partition decides by its own rate (one read each: a page of them).
            state = None if limit.adaptive is None else adaptive_state(client, key)
            flight = None
            if limit.adaptive is not None and limit.adaptive.in_flight is not None:
                flight = flight_state(client, key)
            own.append((rates if state is None else (_adaptive_rate(state, limit.adaptive),), state, flight))
            asked += [(key, rate, place) for place, rate in enumerate(own[-1][0], 1)]
        listed.append((name, limit, rates, shown, own, len(keys)))
    states = iter(rate_states(runtime.scripts, asked))
    infos = []
    for name, limit, rates, shown, own, found in listed:
        partitions = []
        for key, (by, learnt, flight) in zip(shown, own):
            read = [next(states) for _ in by]
            if all(state is not None for state in read):  # else its key holds something else
                partitions.append(
                    PartitionInfo(key, tuple(state for state in read if state is not None), learnt, flight)
                )
        overridden = name in overrides and limit.adaptive is None
        infos.append(
            LimitInfo(
                name, rates, limit.rates, limit.source, overridden, tuple(partitions), found, limit.adaptive
            )
        )
    return infos


def _adaptive_rate(state: AdaptiveState, spec: AdaptiveRate | None) -> Rate:
    """The rate an adaptive partition decides by now, as its wire form holds it."""
    return Rate(max(1, round(state.rate * 3600)), 3600, spec.burst if spec is not None else 1)
