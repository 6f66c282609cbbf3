"""What ``celery redislock list`` says of the rate-limit gate's keys: a ``global_rate_limit``
partition's log (found beside its lock key, by its suffix) and a named limit's partitions
(found under the app's one named-limit tag, by ``other_keys``), each by its current state."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..config.limits import NamedLimit
from ..config.options import LockOptions
from ..engine.adaptive_rates import adaptive_key
from ..engine.keys import glob_escape, limit_keys, parse_key
from ..engine.leases import as_text
from ..engine.rate_decisions import RateState, rate_state, runtime_rates
from ..engine.rates import rate_of
from ..errors import ConfigurationError
from ..integration.runtime import Runtime, task_options
from .rate_calls import MIXED_MARK, RATE_SUFFIX, catalog_of, named_base, named_log, overrides_of

__all__ = [
    "LIMIT_SUFFIX",
    "describe_limit_key",
    "describe_rate_key",
    "named_keys",
    "partition_keys",
    "state_text",
]

#: What a named limit's partition is listed under (``other_keys``): not a suffix beside a lock
#: key, its limit is read from the key itself.
LIMIT_SUFFIX = "limit"

_DIGEST = re.compile(r"[0-9a-f]{32}")
#: The keys beside a log that a partition may have without its log: a pause's end
#: (``keys.limit_keys``), an adaptive partition's state (``adaptive_rates.adaptive_key``).
_BESIDE = (limit_keys("x")[4].rsplit(":", 1)[1], adaptive_key("x").rsplit(":", 1)[1])


def partition_keys(runtime: Runtime, name: str) -> list[str]:
    """The logs of named limit ``name``'s partitions in Redis (a log, or a pause or an adaptive
    state without a log now)."""
    one = named_log(runtime.settings.key_prefix, name)
    found: set[str] = set()
    for pattern in (glob_escape(one), glob_escape(one) + ":*"):
        for batch in runtime.engine.scan_batches(pattern):
            for raw in batch:
                key = as_text(raw)
                rest = key[len(one) :].split(":")
                if key == one or (len(rest) == 2 and _DIGEST.fullmatch(rest[1])):
                    found.add(key)
                elif rest[-1] in _BESIDE and (len(rest) == 2 or _DIGEST.fullmatch(rest[1])):
                    found.add(key[: -len(rest[-1]) - 1])
    return sorted(found)


def named_keys(runtime: Runtime, task: str | None) -> Iterator[tuple[str, str, str]]:
    """``(key, tasks, LIMIT_SUFFIX)`` of each partition of the app's named limits (of those
    ``task`` names, if given); ``tasks``: the tasks known here naming the limit, joined by
    ``,`` (``-`` when none is). Then ``(key, task, RATE_SUFFIX)`` of each ``global_rate_limit``
    partition kept under their tag (``rate_calls.mixed_rate_key``)."""
    yield from _mixed_keys(runtime, task)
    users = _users(runtime)
    for name in sorted(catalog_of(runtime)):
        if task is not None and task not in users.get(name, ()):
            continue
        tasks = ",".join(sorted(users.get(name, ()))) or "-"
        for key in partition_keys(runtime, name):
            yield key, tasks, LIMIT_SUFFIX


def _mixed_keys(runtime: Runtime, task: str | None) -> Iterator[tuple[str, str, str]]:
    prefix = runtime.settings.key_prefix
    head = f"{named_base(prefix)}:{MIXED_MARK}:"
    for batch in runtime.engine.scan_batches(glob_escape(head) + "*"):
        for raw in batch:
            key = as_text(raw)
            try:  # the log alone: the keys beside it (":reserved", ...) hold no partition key
                key_prefix, key_task, _ = parse_key(key[len(head) :])
            except ValueError:
                continue
            if key_prefix == prefix and task in (None, key_task):
                yield key, key_task, RATE_SUFFIX


def describe_limit_key(runtime: Runtime, key: str) -> str | None:
    """A named limit's partition: its state by the rate decisions use now (a runtime rate, else
    the declared one)."""
    name = key[len(named_base(runtime.settings.key_prefix)) + 1 :].split(":", 1)[0]
    limit: NamedLimit | None = catalog_of(runtime).get(name)
    if limit is None:
        return f"limit {name}: not declared here"
    overrides = runtime_rates(runtime.scripts.client, overrides_of(runtime.settings.key_prefix))
    shown = []
    for place, rate in enumerate(overrides.get(name) or limit.rates, 1):
        state = rate_state(runtime.scripts, key, rate, place)
        if state is None:
            return None
        shown.append(f"{rate}: {state_text(state)}")
    return f"limit {name} " + "; ".join(shown)


def describe_rate_key(runtime: Runtime, key: str, task_name: str) -> str | None:
    """A ``global_rate_limit`` partition's log: its state by the rate of its task, as this process
    resolves the task's options (its own and the app's; a queue's is not in the key)."""
    rate = _rate_of_task(runtime, task_name)
    if rate is None:
        return "rate limit: no global_rate_limit known here for its task"
    state = rate_state(runtime.scripts, key, rate_of(rate))
    return None if state is None else f"rate limit {rate}: {state_text(state)}"


def state_text(state: RateState) -> str:
    """A partition's state in one line: a window's starts, or a bucket's units and TAT."""
    free = "now" if not state.next_free else f"in {state.next_free:.3f}s"
    paused = f", paused for {state.paused:.3f}s" if state.paused else ""
    if state.burst is not None:
        full = "full" if not state.full_in else f"full again in {state.full_in:.3f}s"
        return (
            f"bucket of {state.burst}: {state.tokens} free ({full}), {state.reserved} reserved, "
            f"next free slot {free}{paused}"
        )
    return f"{state.started} started in the window, {state.reserved} reserved, next free slot {free}{paused}"


def _options(runtime: Runtime, name: str) -> LockOptions | None:
    task = runtime.app.tasks.get(name)
    try:
        return runtime.settings.options_for(name, task_options(type(task)) if task is not None else {}, None)
    except ConfigurationError:
        return None


def _rate_of_task(runtime: Runtime, name: str) -> str | None:
    options = _options(runtime, name)
    rate: str | None = None if options is None else options.value("global_rate_limit")
    return rate


def _users(runtime: Runtime) -> dict[str, set[str]]:
    """Limit name -> the app's tasks (registered in this process) whose ``rate_limits`` name it."""
    users: dict[str, set[str]] = {}
    for name in list(runtime.app.tasks):
        if name.startswith("celery."):
            continue
        options = _options(runtime, name)
        for limit, _ in (None if options is None else options.value("rate_limits")) or ():
            users.setdefault(limit, set()).add(name)
    return users
