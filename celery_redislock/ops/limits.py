"""The named rate limits of an app, from Python and the CLI (``celery redislock limit``): what
they are (declared rates, runtime rates, each partition's state), a rate changed at run time for
every worker (from its next decision, until reset), a pause. The decisions read the runtime rates
in the same script call as they decide (``engine.rate_decisions``), so nothing here restarts or
signals a worker."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from celery import Celery

from ..config.limits import NamedLimit, unknown_limit
from ..engine.checks import check_argument
from ..engine.keys import glob_escape, limit_keys
from ..engine.leases import as_text
from ..engine.rate_decisions import (
    Limit,
    RateState,
    clear_runtime_rates,
    pause_limits,
    rate_state,
    runtime_rates,
    set_runtime_rates,
)
from ..engine.rates import Rate
from ..errors import OptionError
from ..integration.runtime import Runtime, runtime_for
from ..modes.rate_calls import catalog_of, named_log, overrides_of

__all__ = ["LimitInfo", "PartitionInfo", "pause_limit", "reset_limit", "set_limit", "show_limits"]

_DIGEST = re.compile(r"[0-9a-f]{32}")
#: The key beside a log that holds a pause's end (``keys.limit_keys``).
_PAUSE = limit_keys("x")[4].rsplit(":", 1)[1]


@dataclass(frozen=True)
class PartitionInfo:
    """One partition of a named limit now: its log's ``key``, its ``state`` (by the limit's
    first current rate, counted as a window; ``paused``: seconds left of a pause)."""

    key: str
    state: RateState


@dataclass(frozen=True)
class LimitInfo:
    """A named limit: the ``rates`` decisions use now, those ``declared`` (``source``:
    ``redislock_limits`` or ``declare_limit``), whether a runtime rate ``overridden`` them,
    and its partitions in Redis."""

    name: str
    rates: tuple[Rate, ...]
    declared: tuple[Rate, ...]
    source: str
    overridden: bool
    partitions: tuple[PartitionInfo, ...]


def _known(runtime: Runtime, name: str, source: str) -> NamedLimit:
    catalog = catalog_of(runtime)
    limit = catalog.get(name)
    if limit is None:
        raise OptionError("name", source, unknown_limit(name, catalog))
    return limit


def set_limit(app: Celery, name: str, rate: Any) -> tuple[Rate, ...]:
    """Replace the rates of the named limit ``name`` for every worker of ``app``, from each one's
    next decision until ``reset_limit``: ``rate`` as ``redislock_limits`` takes it. Returns the
    rates set. ``OptionError`` for a name not declared or a rate it cannot read."""
    runtime = runtime_for(app)
    _known(runtime, name, f"set_limit({name!r})")
    return set_runtime_rates(runtime.scripts.client, overrides_of(runtime.settings.key_prefix), name, rate)


def reset_limit(app: Celery, name: str) -> bool:
    """Back to the declared rates of ``name``; True when a runtime rate was set."""
    runtime = runtime_for(app)
    _known(runtime, name, f"reset_limit({name!r})")
    return clear_runtime_rates(runtime.scripts.client, overrides_of(runtime.settings.key_prefix), name)


def pause_limit(app: Celery, name: str, seconds: float, partition: str = "") -> float:
    """Pause the named limit ``name`` (one ``partition``, a log key ``show_limits`` lists; "":
    every partition it has now, and its one partition) for ``seconds`` on every worker; returns
    the pause's end, in the Redis server's seconds."""
    runtime = runtime_for(app)
    source = f"pause_limit({name!r})"
    limit = _known(runtime, name, source)
    seconds = check_argument("seconds", "seconds", seconds, source)
    prefix = runtime.settings.key_prefix
    keys = [partition] if partition else sorted({named_log(prefix, name), *_partition_keys(runtime, name)})
    ends = [pause_limits(runtime.scripts, (Limit(key, limit.rates, name),), seconds) for key in keys]
    return max(ends)


def show_limits(app: Celery) -> list[LimitInfo]:
    """Every named limit of ``app``, by name, with its runtime rates and partitions."""
    runtime = runtime_for(app)
    client = runtime.scripts.client
    overrides = runtime_rates(client, overrides_of(runtime.settings.key_prefix))
    shown = []
    for name, limit in sorted(catalog_of(runtime).items()):
        rates = overrides.get(name) or limit.rates
        partitions = []
        for key in _partition_keys(runtime, name):
            state = rate_state(runtime.scripts, key, rates[0])
            if state is not None:
                partitions.append(PartitionInfo(key, state))
        shown.append(LimitInfo(name, rates, limit.rates, limit.source, name in overrides, tuple(partitions)))
    return shown


def _partition_keys(runtime: Runtime, name: str) -> list[str]:
    """The logs of ``name``'s partitions in Redis (a log, or a pause without a log yet)."""
    one = named_log(runtime.settings.key_prefix, name)
    found: set[str] = set()
    for pattern in (glob_escape(one), glob_escape(one) + ":*"):
        for batch in runtime.engine.scan_batches(pattern):
            for raw in batch:
                key = as_text(raw)
                rest = key[len(one) :].split(":")
                if key == one or (len(rest) == 2 and _DIGEST.fullmatch(rest[1])):
                    found.add(key)
                elif rest[-1] == _PAUSE and (len(rest) == 2 or _DIGEST.fullmatch(rest[1])):
                    found.add(key[: -len(_PAUSE) - 1])
    return sorted(found)
